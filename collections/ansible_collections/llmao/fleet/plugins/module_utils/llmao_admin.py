# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llmao's admin API as reconcile uses it: read what the server observed, post verdicts.

The config server is passive: it notes when each box fetched its assignment and
which revision it applied, and keeps the previous pass's verdicts (with the
lifecycle memory the classifier needs between runs). Reconcile reads all of it
in one call at the start of a pass and posts the new verdicts at the end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from .bearer import is_placeholder
from .config_file import Settings
from .http_json import HttpCallError, JsonService
from .json_values import is_integer, is_number
from .lifecycle import Memory, routed_after
from .reconcile_records import RecordError, turns_from_record
from .rollout import Turn

OBSERVATIONS_PATH = "/admin/api/observations"
VERDICTS_PATH = "/admin/api/verdicts"
PASS_LEASE_PATH = "/admin/api/pass-lease"
TURNS_PATH = "/admin/api/turns"
TAKE_TURN_PATH = "/admin/api/turns/take"
POOLS_PATH = "/admin/api/pools"
# One box's resources: /admin/api/boxes/<name>/applied, /turn, /binding, /cert.
BOXES_PATH = "/admin/api/boxes"


class LlmaoAdminError(RuntimeError):
    """llmao's admin API cannot be used; the message says why and holds no secret."""


@dataclass(frozen=True)
class BoxLeaves:
    """The certificates llmao issued a box and that have not expired: whether one was issued
    to its current binding (then the box never reads as plain HTTP again), and the serials of
    those a release revoked (a box presenting one is not ours)."""

    issued: bool = False
    revoked: frozenset[int] = frozenset()


@dataclass(frozen=True)
class ServerObservations:
    """What llmao knows of the fleet at ``now`` (its own clock, which fetch times use too)."""

    now: float
    last_fetches: Mapping[str, float | None] = field(default_factory=dict)
    applied: Mapping[str, str | None] = field(default_factory=dict)
    verdicts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    pass_at: float | None = None
    approved: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    turns: tuple[Turn, ...] = ()
    # Bound box names to the provider instance id each bound with (None: not reported).
    bindings: Mapping[str, str | None] = field(default_factory=dict)
    # Box to the number of cards it reported with its applied revision (boxes that did).
    cards: Mapping[str, int] = field(default_factory=dict)
    # Box to the pool an enrollment made it a member of (docs/pools.md).
    pool_members: Mapping[str, str] = field(default_factory=dict)
    # Box to the leaves llmao issued it that have not expired (docs/box-tls.md).
    leaves: Mapping[str, BoxLeaves] = field(default_factory=dict)

    @property
    def memories(self) -> dict[str, Memory]:
        return {key: Memory.from_record(verdict.get("memory"))
                for key, verdict in self.verdicts.items()}


@dataclass(frozen=True)
class PassLeaseState:
    """The fleet-wide pass lease as llmao answers: whether it is the asking pass's, who holds
    it (None when free) and until when, on llmao's clock (``now``)."""

    granted: bool
    holder: str | None
    expires_at: float | None
    now: float


@dataclass(frozen=True)
class TurnAnswer:
    """llmao's answer to a turn ask: whether the box holds a turn for the revision, its phase
    (None without one), whether it may apply now (on llmao's clock), the drain, and why it
    waits (or the turn's own why)."""

    granted: bool
    phase: str | None
    apply: bool
    drain_s: float
    why: str


class LlmaoAdmin(JsonService):
    """llmao at ``url``, with the admin token as bearer: ``LlmaoAdmin(url, token, timeout)``."""

    @classmethod
    def from_settings(cls, settings: Settings, timeout: float = 15.0) -> LlmaoAdmin:
        """The admin API ``config.yaml`` names; both ``server.url`` and ``admin.token`` needed."""
        if not settings.server.url:
            raise LlmaoAdminError("config.yaml: server.url is not set; reconcile reads fetch "
                                  "times and records verdicts through llmao's admin API")
        if is_placeholder(settings.admin.token):
            raise LlmaoAdminError("config.yaml: admin.token is missing or CHANGE_ME; reconcile "
                                  "uses it on llmao's admin API")
        return cls(settings.server.url, settings.admin.token or "", timeout)

    def observations(self) -> ServerObservations:
        return parse_observations(self._call("GET", OBSERVATIONS_PATH, None))

    def post_verdicts(self, document: Mapping[str, Any]) -> None:
        self._call("POST", VERDICTS_PATH, dict(document))

    def post_turn_updates(self, updates: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Move rollout turns on (``box``, ``revision``, ``phase``, ``why`` each); returns the
        moves llmao refused (the turn moved meanwhile, say: a box asked again), each with why."""
        answer = self._call("POST", TURNS_PATH, {"updates": [dict(u) for u in updates]})
        refused = answer.get("refused") if isinstance(answer, Mapping) else None
        if not isinstance(refused, list):
            raise LlmaoAdminError("llmao's answer to the turn updates has no 'refused' list")
        return [item for item in refused if isinstance(item, Mapping)]

    def take_turn(self, box: str, revision: str, servers: Sequence[str]) -> TurnAnswer:
        """Ask for ``box``'s turn to move ``servers`` (the ones that change or go) to
        ``revision``, as the push path does; asked again the same way, it polls."""
        return parse_turn_answer(self._call("POST", TAKE_TURN_PATH,
                                            {"box": box, "revision": revision,
                                             "servers": list(servers)}))

    def report_applied(self, box: str, report: Mapping[str, Any]) -> None:
        """Report what the push applied on ``box`` (``revision``, ``applied_at``,
        ``servers``), as the controller; llmao refuses a revision it does not intend."""
        self._call("POST", box_path(box, "applied"), dict(report))

    def sign_certificate(self, box: str, csr: str) -> dict[str, str]:
        """Have the fleet CA sign ``box``'s certificate request (PEM), as the push path does
        for a box that has no box token; llmao's answer: ``certificate``, ``ca``,
        ``not_after``."""
        answer = self._call("POST", box_path(box, "cert"), {"csr": csr})
        fields = ("certificate", "ca", "not_after")
        if not isinstance(answer, Mapping) or not all(isinstance(answer.get(name), str)
                                                      for name in fields):
            raise LlmaoAdminError("llmao's answer to the certificate request lacks the "
                                  "certificate, the CA or not_after")
        return {name: answer[name] for name in fields}

    def box_turn(self, box: str) -> Turn | None:
        """``box``'s latest rollout turn, if it holds one."""
        answer = self._call("GET", box_path(box, "turn"), None)
        turn = answer.get("turn") if isinstance(answer, Mapping) else None
        if turn is None:
            return None
        return _turns([turn])[0]

    def release_binding(self, box: str, why: str, next_instance: str | None = None) -> bool:
        """Release ``box``'s binding (docs/box-identity.md); whether it was bound. With
        ``next_instance``, only the box reporting that instance id may bind the name next."""
        query = f"why={quote(why, safe='')}"
        if next_instance is not None:
            query += f"&next_instance={quote(next_instance, safe='')}"
        answer = self._call("DELETE", f"{box_path(box, 'binding')}?{query}", None)
        return isinstance(answer, Mapping) and answer.get("released") is True

    def enroll(self, box: str, ttl_s: float, pool: str | None = None) -> dict[str, Any]:
        """Mint a one-time bootstrap token for ``box`` (``pool``: the name joins that pool):
        ``{"box", "bootstrap_token", "expires_at", "pool"}``. The token is a secret."""
        body: dict[str, Any] = {"ttl_s": ttl_s}
        if pool is not None:
            body["pool"] = pool
        answer = self._call("POST", box_path(box, "enroll"), body)
        if not isinstance(answer, Mapping) or not isinstance(answer.get("bootstrap_token"), str):
            raise LlmaoAdminError(f"llmao's answer to enrolling {box} has no bootstrap token")
        return dict(answer)

    def report_pools(self, document: Mapping[str, Any]) -> None:
        """Tell llmao what a pool pass left (:func:`pool_report.pool_report`'s document), for
        its ``/metrics`` and dashboard."""
        self._call("POST", POOLS_PATH, dict(document))

    def claim_pass_lease(self, lease_id: str, holder: str, ttl_s: float) -> PassLeaseState:
        """Take (or renew, with the same ``lease_id``) the one-pass-at-a-time lease."""
        return parse_pass_lease(self._call("POST", PASS_LEASE_PATH,
                                           {"lease_id": lease_id, "holder": holder,
                                            "ttl_s": ttl_s}))

    def pass_lease(self) -> PassLeaseState:
        """Who holds the lease, without taking it (a checked pass)."""
        return parse_pass_lease(self._call("GET", PASS_LEASE_PATH, None))

    def release_pass_lease(self, lease_id: str) -> bool:
        answer = self._call("POST", PASS_LEASE_PATH + "/release", {"lease_id": lease_id})
        return isinstance(answer, Mapping) and answer.get("released") is True

    def _call(self, method: str, path: str, body: Any) -> Any:
        try:
            return self.call(method, path, body)
        except HttpCallError as exc:
            if exc.status is None:
                raise LlmaoAdminError(f"llmao at {self.url} {exc.reason}") from None
            # A 403 that is not about the token (a certificate for an address llmao does not
            # attribute to the box) says llmao's own reason, below.
            if exc.status == 401 or (exc.status == 403 and "admin token" in exc.reason):
                raise LlmaoAdminError(f"llmao at {self.url} refused the admin token "
                                      f"(HTTP {exc.status}): check admin.token") from None
            raise LlmaoAdminError(f"llmao at {self.url}: {exc}") from None


def box_path(box: str, resource: str) -> str:
    return f"{BOXES_PATH}/{quote(box, safe='')}/{resource}"


def observations_document(now: float, last_fetches: Mapping[str, float | None],
                          applied: Mapping[str, Mapping[str, Any] | None],
                          approved: Mapping[str, Sequence[str]],
                          verdicts: Mapping[str, Mapping[str, Any]],
                          drift: Sequence[Mapping[str, Any]],
                          pass_at: float | None, turns: Sequence[Turn] = (),
                          bindings: Mapping[str, Mapping[str, Any]] | None = None,
                          leaves: Mapping[str, BoxLeaves] | None = None,
                          ) -> dict[str, Any]:
    """What ``GET /admin/api/observations`` answers; :func:`parse_observations` reads it.

    ``last_fetches`` names every box llmao serves; ``applied`` holds, per box, the
    report it last made (``revision``, ``applied_at``, ``reported_at``, and ``cards``, the
    number of cards it reported, when it did) if any. ``turns`` are the latest rollout
    turn of each box; ``bindings`` each bound box's binding (its ``instance`` id and ``pool``
    read); ``leaves`` what llmao issued each box (:class:`BoxLeaves`).
    """
    return {
        "now": now,
        "boxes": {box: {"last_fetch": fetched, "applied": applied.get(box)}
                  for box, fetched in last_fetches.items()},
        "approved": {box: list(models) for box, models in approved.items()},
        "verdicts": dict(verdicts),
        "drift": list(drift),
        "pass_at": pass_at,
        "turns": [turn.record() for turn in turns],
        "bindings": {box: dict(binding) for box, binding in (bindings or {}).items()},
        "leaves": {box: {"issued": held.issued, "revoked": sorted(str(n) for n in held.revoked)}
                   for box, held in (leaves or {}).items()},
    }


def parse_observations(document: Any) -> ServerObservations:
    """The admin API's answer, checked: a misread one must fail, not look like an empty fleet."""
    if not isinstance(document, Mapping):
        raise LlmaoAdminError("llmao's observations are not a JSON object")
    now = document.get("now")
    boxes = document.get("boxes")
    verdicts = document.get("verdicts")
    if not is_number(now):
        raise LlmaoAdminError("llmao's observations have no 'now' time")
    if not isinstance(boxes, Mapping) or not isinstance(verdicts, Mapping):
        raise LlmaoAdminError("llmao's observations lack the 'boxes' or 'verdicts' object")
    last_fetches: dict[str, float | None] = {}
    applied: dict[str, str | None] = {}
    cards: dict[str, int] = {}
    for box, seen in boxes.items():
        if not isinstance(seen, Mapping):
            raise LlmaoAdminError(f"llmao's observations: boxes[{box!r}] is not an object")
        fetched = seen.get("last_fetch")
        last_fetches[box] = float(fetched) if is_number(fetched) else None
        applied[box] = _applied_revision(seen.get("applied"))
        count = _applied_cards(seen.get("applied"))
        if count is not None:
            cards[box] = count
    pass_at = document.get("pass_at")
    return ServerObservations(float(now), last_fetches, applied,
                              {str(k): v for k, v in verdicts.items() if isinstance(v, Mapping)},
                              float(pass_at) if is_number(pass_at) else None,
                              _approved(document.get("approved", {})),
                              _turns(document.get("turns", [])),
                              _bindings(document.get("bindings", {})), cards,
                              _pool_members(document.get("bindings", {})),
                              _leaves(document.get("leaves", {})))


def parse_pass_lease(document: Any) -> PassLeaseState:
    """The lease answer, checked: a misread one must not let two passes act at once."""
    if not isinstance(document, Mapping) or not isinstance(document.get("granted"), bool):
        raise LlmaoAdminError("llmao's pass lease answer has no 'granted' flag")
    now, holder, expires = document.get("now"), document.get("holder"), document.get("expires_at")
    if not is_number(now):
        raise LlmaoAdminError("llmao's pass lease answer has no 'now' time")
    return PassLeaseState(document["granted"], holder if isinstance(holder, str) else None,
                          float(expires) if is_number(expires) else None,
                          float(now))


def parse_turn_answer(document: Any) -> TurnAnswer:
    """The turn answer, checked: a misread ``apply`` would restart servers still routed."""
    if not isinstance(document, Mapping) or not all(
            isinstance(document.get(key), bool) for key in ("granted", "apply")):
        raise LlmaoAdminError("llmao's turn answer has no 'granted' and 'apply' flags")
    phase, drain_s, why = document.get("phase"), document.get("drain_s"), document.get("why")
    if not is_number(drain_s):
        raise LlmaoAdminError("llmao's turn answer has no 'drain_s'")
    return TurnAnswer(document["granted"], phase if isinstance(phase, str) else None,
                      document["apply"], float(drain_s), why if isinstance(why, str) else "")


def _approved(approved: Any) -> dict[str, tuple[str, ...]]:
    """Approved box to model names; misread, an approved box would lose its routes."""
    if not isinstance(approved, Mapping):
        raise LlmaoAdminError("llmao's observations: 'approved' is not an object")
    result = {}
    for box, models in approved.items():
        if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
            raise LlmaoAdminError(f"llmao's observations: approved[{box!r}] is not a list "
                                  "of model names")
        result[str(box)] = tuple(models)
    return result


def _bindings(bindings: Any) -> dict[str, str | None]:
    """Bound box to its instance id; misread, reconcile could release a box's binding."""
    if not isinstance(bindings, Mapping) or not all(
            isinstance(binding, Mapping) for binding in bindings.values()):
        raise LlmaoAdminError("llmao's observations: 'bindings' is not an object of objects")
    return {str(box): binding.get("instance") if isinstance(binding.get("instance"), str)
            else None for box, binding in bindings.items()}


def _pool_members(bindings: Mapping[str, Any]) -> dict[str, str]:
    """Bound box to the pool it is a member of (those that are), from the checked bindings."""
    return {str(box): binding["pool"] for box, binding in bindings.items()
            if isinstance(binding.get("pool"), str)}


def _leaves(leaves: Any) -> dict[str, BoxLeaves]:
    """Box to what llmao issued it; misread, a released box's leaf could pass for ours."""
    if not isinstance(leaves, Mapping):
        raise LlmaoAdminError("llmao's observations: 'leaves' is not an object")
    read = {}
    for box, held in leaves.items():
        revoked = held.get("revoked") if isinstance(held, Mapping) else None
        if not isinstance(revoked, list) or not all(
                isinstance(n, str) and n.isdigit() for n in revoked):
            raise LlmaoAdminError(f"llmao's observations: leaves[{box!r}] is not read")
        read[str(box)] = BoxLeaves(held.get("issued") is True, frozenset(int(n) for n in revoked))
    return read


def _turns(turns: Any) -> tuple[Turn, ...]:
    """The stored rollout turns; misread, a draining server could be registered again."""
    try:
        return turns_from_record(turns)
    except RecordError as exc:
        raise LlmaoAdminError(f"llmao's observations: {exc}") from None


def _applied_cards(report: Any) -> int | None:
    """The number of cards a box reported; None when it did not say (or said nonsense)."""
    count = report.get("cards") if isinstance(report, Mapping) else None
    if is_integer(count) and count >= 0:
        return count
    return None


def _applied_revision(report: Any) -> str | None:
    if isinstance(report, Mapping) and report.get("revision"):
        return str(report["revision"])
    return None


def verdicts_document(now: float, servers: list[Mapping[str, Any]],
                      memories: Mapping[str, Mapping[str, Any]],
                      drift: list[Mapping[str, Any]],
                      models: Mapping[str, Any] | None = None,
                      boxes: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What ``POST /admin/api/verdicts`` takes: one verdict per server after this pass.

    ``in_litellm`` is the state after the pass's changes, which is what the
    dashboard shows; ``change`` is what the pass did (None when nothing).
    ``models`` and ``boxes`` are the pass's loads and prices (docs/metrics.md).
    """
    verdicts = {}
    for server in servers:
        in_litellm = routed_after(bool(server.get("in_litellm")), server.get("change"))
        verdicts[server["id"]] = {**server, "in_litellm": in_litellm,
                                  "memory": dict(memories.get(server["id"]) or {})}
    return {"pass_at": now, "verdicts": verdicts, "drift": [dict(item) for item in drift],
            "models": dict(models or {}), "boxes": dict(boxes or {})}
