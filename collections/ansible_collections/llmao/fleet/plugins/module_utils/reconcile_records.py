# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one reconcile task hands the next, as plain JSON and back.

Reconcile runs as a chain of Ansible tasks (observe, probe, plan, apply, record),
so its observations travel through play variables. These records are that wire
form: JSON types only, no secret (bearers are derived again inside each module
that needs one), and read back strictly, because a record that silently loses a
listing or a route would make boxes look unlisted or routes look missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .json_values import is_integer, is_number
from .lifecycle import Memory, Models, Probe
from .listings import EntryProblem, ListedBox, Listings, index_listings
from .litellm_routes import Route
from .rollout import Turn
from .vllm_latency import Cumulative
from .vllm_metrics import MetricsRecordError, ServerMetrics


class RecordError(ValueError):
    """A record passed between tasks does not have the shape its writer gives it."""


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RecordError(f"{what} must be a mapping")
    return value


def _sequence(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise RecordError(f"{what} must be a list")
    return list(value)


def _number(value: Any, what: str, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if not is_number(value):
        raise RecordError(f"{what} must be a number")
    return float(value)


def _count(value: Any, what: str) -> int:
    if not is_integer(value) or value < 0:
        raise RecordError(f"{what} must be a whole number")
    return value


# ----------------------------------------------------------------- listings


def listings_record(listings: Listings) -> dict[str, Any]:
    """Every listed box once (with its price and GPU count when the listing gives them, its
    status and whether it is interruptible), what failed, and the entries read only in part."""
    boxes = [{"provider": box.provider, "names": list(box.names), "public_ip": box.public_ip,
              "ports": {str(listen): public for listen, public in box.ports.items()},
              "price_per_hour": box.price_per_hour, "status": box.status,
              "interruptible": box.interruptible, "gpus": box.gpus}
             for box in listings.boxes]
    problems = [{"provider": problem.provider, "where": problem.where, "reason": problem.reason,
                 "names": list(problem.names), "skipped": problem.skipped}
                for problem in listings.problems]
    return {"configured": list(listings.configured), "failed": dict(listings.failed),
            "boxes": boxes, "problems": problems}


def listings_from_record(record: Any) -> Listings:
    record = _mapping(record, "listings")
    boxes = []
    for index, box in enumerate(_sequence(record.get("boxes", []), "listings.boxes")):
        what = f"listings.boxes[{index}]"
        box = _mapping(box, what)
        try:
            ports = {int(k): int(v) for k, v in _mapping(box.get("ports", {}), what).items()}
        except (TypeError, ValueError):
            raise RecordError(f"{what}.ports must map port numbers to port numbers") from None
        boxes.append(ListedBox(str(box.get("provider", "")),
                               tuple(str(n) for n in _sequence(box.get("names"), what + ".names")),
                               str(box.get("public_ip", "")), MappingProxyType(ports),
                               _number(box.get("price_per_hour"), what + ".price_per_hour",
                                       optional=True),
                               str(box.get("status") or ""), box.get("interruptible") is True,
                               None if box.get("gpus") is None
                               else _count(box["gpus"], what + ".gpus")))
    problems = []
    for index, problem in enumerate(_sequence(record.get("problems", []), "listings.problems")):
        what = f"listings.problems[{index}]"
        problem = _mapping(problem, what)
        problems.append(EntryProblem(
            str(problem.get("provider", "")), str(problem.get("where", "")),
            str(problem.get("reason", "")),
            tuple(str(n) for n in _sequence(problem.get("names", []), what + ".names")),
            problem.get("skipped") is not False))
    failed = {str(k): str(v) for k, v in _mapping(record.get("failed", {}),
                                                  "listings.failed").items()}
    configured = [str(kind) for kind in _sequence(record.get("configured", []),
                                                  "listings.configured")]
    return index_listings(configured, boxes, failed, problems)


# ------------------------------------------------------------------- routes


def route_record(route: Route) -> dict[str, Any]:
    return {"id": route.id, "model_name": route.model_name, "api_base": route.api_base,
            "public_base": route.public_base, "ca_path": route.ca_path}


def route_from_record(record: Any) -> Route:
    record = _mapping(record, "route")
    if not isinstance(record.get("id"), str):
        raise RecordError("route.id must be a string")
    ca_path = record.get("ca_path")
    return Route(record["id"], str(record.get("model_name") or ""), record.get("api_base"),
                 record.get("public_base"), ca_path=ca_path if isinstance(ca_path, str) else None)


# ------------------------------------------------------------------- probes


def probe_record(probe: Probe) -> dict[str, Any]:
    """The probe as JSON; under box TLS, ``plain_http`` when true (a box not on it yet) and
    ``cert_not_after`` when a certificate was verified."""
    record = {"health_ok": probe.health_ok, "models": probe.models.value,
              "detail": probe.detail, "metrics": probe.metrics.record() if probe.metrics else None,
              "latency": probe.latency.record() if probe.latency else None}
    if probe.plain_http:
        record["plain_http"] = True
    if probe.cert_not_after is not None:
        record["cert_not_after"] = probe.cert_not_after
    if probe.cert_serial is not None:
        # As a decimal string: a serial is up to 160 bits, more than a JSON number holds.
        record["cert_serial"] = str(probe.cert_serial)
    return record


def probe_from_record(record: Any, what: str = "probe") -> Probe:
    record = _mapping(record, what)
    if not isinstance(record.get("health_ok"), bool):
        raise RecordError(f"{what}.health_ok must be true or false")
    try:
        models = Models(record.get("models"))
    except ValueError:
        choices = ", ".join(m.value for m in Models)
        raise RecordError(f"{what}.models must be one of {choices}") from None
    try:
        metrics = record.get("metrics")
        metrics = None if metrics is None else ServerMetrics.from_record(metrics)
    except MetricsRecordError as exc:
        raise RecordError(f"{what}: {exc}") from None
    try:
        latency = record.get("latency")
        latency = None if latency is None else Cumulative.from_record(latency)
    except MetricsRecordError as exc:
        raise RecordError(f"{what}: {exc}") from None
    plain_http = record.get("plain_http", False)
    if not isinstance(plain_http, bool):
        raise RecordError(f"{what}.plain_http must be true or false")
    serial = record.get("cert_serial")
    if serial is not None and not (isinstance(serial, str) and serial.isdigit()):
        raise RecordError(f"{what}.cert_serial must be a decimal string")
    return Probe(record["health_ok"], models, str(record.get("detail") or ""), metrics, latency,
                 plain_http, _number(record.get("cert_not_after"), f"{what}.cert_not_after",
                                     optional=True), None if serial is None else int(serial))


def probes_from_record(record: Any) -> dict[str, Probe]:
    return {str(key): probe_from_record(value, f"probes[{key!r}]")
            for key, value in _mapping(record, "probes").items()}


# ---------------------------------------------------------------- approvals


def approvals_from_record(record: Any) -> dict[str, tuple[str, ...]]:
    """Approved box to its model names in port order, as the admin API gave them."""
    approvals = {}
    for box, models in _mapping(record, "approved").items():
        names = _sequence(models, f"approved[{box!r}]")
        if not all(isinstance(name, str) for name in names):
            raise RecordError(f"approved[{box!r}] must list model names")
        approvals[str(box)] = tuple(names)
    return approvals


def pool_members_from_record(record: Any) -> dict[str, str]:
    """Member box to the pool llmao bound it in, as the admin API gave them; misread, a
    member's servers would look like no intended server's and lose their routes."""
    members = {}
    for box, pool in _mapping(record, "pool_members").items():
        if not isinstance(pool, str):
            raise RecordError(f"pool_members[{box!r}] must name a pool")
        members[str(box)] = pool
    return members


# -------------------------------------------------------------------- turns


def turns_from_record(record: Any) -> tuple[Turn, ...]:
    """The stored rollout turns; a misread one must fail, or a draining server could be
    registered again."""
    turns = []
    for index, turn in enumerate(_sequence(record, "turns")):
        try:
            turns.append(Turn.from_record(_mapping(turn, f"turns[{index}]")))
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"turns[{index}] is not a turn: {exc}") from None
    return tuple(turns)


# ------------------------------------------------------------- observations


@dataclass(frozen=True)
class Observations:
    """Everything a pass knows before it probes: llmao's records, the listings, LiteLLM.

    ``approved`` holds the approvals in force on the server (box to model names in
    port order) and ``pool_members`` the boxes bound as members of a pool (box to pool,
    docs/pools.md): the modules add those boxes to the fleet they load, as the server
    serves them. ``turns`` are the rollout turns the store holds (the latest per box).
    """

    now: float
    last_fetches: Mapping[str, float | None] = field(default_factory=dict)
    applied: Mapping[str, str | None] = field(default_factory=dict)
    memories: Mapping[str, Memory] = field(default_factory=dict)
    listings: Listings = field(default_factory=Listings)
    routes: tuple[Route, ...] = ()
    approved: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    turns: tuple[Turn, ...] = ()
    # Box to the number of cards it reported (boxes that did).
    cards: Mapping[str, int] = field(default_factory=dict)
    # Box to the leaves llmao issued it (llmao_admin.BoxLeaves); None: llmao did not say.
    leaves: Mapping[str, Any] | None = None
    pool_members: Mapping[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "last_fetches": dict(self.last_fetches),
            "applied": dict(self.applied),
            "memories": {key: memory.record() for key, memory in self.memories.items()},
            "listings": listings_record(self.listings),
            "routes": [route_record(route) for route in self.routes],
            "approved": {box: list(models) for box, models in self.approved.items()},
            "turns": [turn.record() for turn in self.turns],
            "cards": dict(self.cards),
            "pool_members": dict(self.pool_members),
            **({} if self.leaves is None else {"leaves": leaves_record(self.leaves)}),
        }

    @classmethod
    def from_record(cls, record: Any) -> Observations:
        record = _mapping(record, "observations")
        last_fetches = {str(box): _number(when, f"last_fetches[{box!r}]", optional=True)
                        for box, when in _mapping(record.get("last_fetches", {}),
                                                  "last_fetches").items()}
        applied = {str(box): None if revision is None else str(revision)
                   for box, revision in _mapping(record.get("applied", {}), "applied").items()}
        memories = {str(key): Memory.from_record(_mapping(value, f"memories[{key!r}]"))
                    for key, value in _mapping(record.get("memories", {}), "memories").items()}
        # No default for these two: a lost listing would make every box look unlisted,
        # lost routes would make every deployment look missing.
        for required in ("listings", "routes"):
            if required not in record:
                raise RecordError(f"observations.{required} is missing")
        routes = tuple(route_from_record(route) for route in _sequence(record["routes"], "routes"))
        return cls(_number(record.get("now"), "now"), last_fetches, applied, memories,
                   listings_from_record(record["listings"]), routes,
                   approvals_from_record(record.get("approved", {})),
                   turns_from_record(record.get("turns", [])),
                   {str(box): _count(count, f"cards[{box!r}]")
                    for box, count in _mapping(record.get("cards", {}), "cards").items()},
                   None if record.get("leaves") is None
                   else leaves_from_record(record["leaves"]),
                   pool_members_from_record(record.get("pool_members", {})))


def leaves_record(leaves: Mapping[str, Any]) -> dict[str, Any]:
    """What llmao issued each box, as its observations document says it."""
    return {box: {"issued": held.issued, "revoked": sorted(str(n) for n in held.revoked)}
            for box, held in leaves.items()}


def leaves_from_record(record: Any) -> dict[str, Any]:
    """:func:`leaves_record` read back, by the reader of llmao's own document (imported
    here, when read: llmao_admin reads its records with this module)."""
    from .llmao_admin import LlmaoAdminError
    from .llmao_admin import _leaves as read_leaves

    try:
        return read_leaves(record)
    except LlmaoAdminError as exc:
        raise RecordError(str(exc)) from None
