# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lifecycle of one intended server: observations in, a state and an action out.

Pure and deterministic, so every boundary is a table-driven test. The rules
(each state is explained for operators in docs/troubleshooting.md, the knobs
in docs/configuration.md) are written to fail safe: one bad probe below the threshold keeps a
deployment, a listing that could not be read never makes a box "unlisted",
and only a server that is serving and is ours is ever registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any

from .config_file import Lifecycle
from .json_values import enum_member, is_number
from .vllm_latency import Cumulative
from .vllm_metrics import ServerMetrics


class State(StrEnum):
    AWAITING = "Awaiting"
    LOADING = "Loading"
    STALLED = "Stalled"
    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    REJECTED = "Rejected"
    FOREIGN = "Foreign"
    UNLISTED = "Unlisted"
    PREEMPTED = "Preempted"


class Action(StrEnum):
    """What reconcile does to the server's LiteLLM deployment."""

    ENSURE = "ensure"   # register it when missing (or when it differs)
    DELETE = "delete"   # remove it when present
    KEEP = "keep"       # leave LiteLLM as it is


ACTIONS = {
    State.AWAITING: Action.KEEP,
    State.LOADING: Action.KEEP,
    State.STALLED: Action.DELETE,
    State.HEALTHY: Action.ENSURE,
    State.UNHEALTHY: Action.DELETE,
    State.REJECTED: Action.DELETE,
    State.FOREIGN: Action.DELETE,
    State.UNLISTED: Action.DELETE,
    State.PREEMPTED: Action.DELETE,
}


class Change(StrEnum):
    """What a reconcile pass does to LiteLLM: a server's deployment, or a route of no server."""

    REGISTER = "register"   # the server is Healthy and has no deployment
    REPLACE = "replace"     # its deployment no longer fits (another model, a moved address)
    DELETE = "delete"       # it must not serve, or the route matches no intended server


def routed_after(routed: bool, change: Change | str | None) -> bool:
    """Whether LiteLLM holds a server's route once a pass made ``change`` to it (``routed``:
    whether it held one before): the plan's next turn phases and the verdicts kept read it."""
    return routed if change is None else change != Change.DELETE


class Drift(StrEnum):
    """What differs between config and the fleet that a pass reports rather than fixes."""

    ORPHAN_ROUTE = "orphan_route"        # llmao's route for a server no longer in config
    UNMANAGED_ROUTE = "unmanaged_route"  # someone else's route matching no intended server
    MODEL_MISMATCH = "model_mismatch"    # a deployment serving another model than config
    REVISION_BEHIND = "revision_behind"  # a box applied an older assignment than intended
    TOO_FEW_CARDS = "too_few_cards"      # an assignment needs more cards than its box reported


class Models(StrEnum):
    """Outcome of ``GET /v1/models`` with our bearer."""

    LISTS = "lists"          # 200 and the served name is there
    OTHER = "other"          # 200 but the served name is not (another model, still loading)
    REJECTED = "rejected"    # 401, or a certificate the fleet CA did not sign: not ours
    FAILED = "failed"        # refused, timed out, 5xx, garbage
    SKIPPED = "skipped"      # not asked: /health did not answer


class Listed(StrEnum):
    """What the provider listings say of the box's address."""

    NAMED = "named"            # a listing names it
    NOT_NAMED = "not_named"    # every configured listing was read, none names it
    UNKNOWN = "unknown"        # a listing could not be read and none that was read names it,
    #                            or several listed instances share the name (ambiguous)
    NO_PROVIDERS = "no_providers"  # a local fleet: nothing to ask
    PREEMPTED = "preempted"    # a listing names it: an interruptible instance its provider
    #                            stopped (a Vast bid outbid, a RunPod spot pod reclaimed)


@dataclass(frozen=True)
class Probe:
    """One pass's probe of a server at its public address."""

    health_ok: bool
    models: Models
    detail: str = ""
    metrics: ServerMetrics | None = None   # read when it answered with our bearer
    latency: Cumulative | None = None      # its latency histograms, read with the metrics
    # Under box TLS, the box answered the TLS hello in plain HTTP while it was still allowed to
    # (llmao never issued nor verified a certificate of it, docs/box-tls.md).
    plain_http: bool = False
    # Under box TLS, when the box's certificate expires (seconds since the epoch), as served.
    cert_not_after: float | None = None
    # Under box TLS, the serial number of the certificate the box served and we verified.
    cert_serial: int | None = None

    @property
    def tls_verified(self) -> bool:
        """A certificate of the box verified against the fleet CA on this probe."""
        return self.cert_not_after is not None or self.cert_serial is not None


@dataclass(frozen=True)
class Memory:
    """What the previous pass left behind (stored by the server between runs).

    Four are the load's (:mod:`server_load`): passes in a row with
    requests waiting, the generation counter with the time it was read, and the
    latency histograms as last scraped (:meth:`Cumulative.record`), whose deltas
    the next pass reads.
    """

    state: State | None = None
    consecutive_failures: int = 0
    rejected_passes: int = 0
    last_healthy_at: float | None = None
    waiting_passes: int = 0
    generation_tokens_total: int | None = None
    generation_counted_at: float | None = None
    latency_seen: Mapping[str, Any] | None = None
    # A probe once verified a certificate of this server: it never answers plain HTTP again
    # (no downgrade, docs/box-tls.md). Only set, never cleared by a plain answer.
    tls_seen: bool = False

    def record(self) -> dict[str, Any]:
        """The memory as JSON, as the server keeps it between passes."""
        # Shallow: every field is a JSON value already (latency_seen is a record), which
        # asdict would copy deep for every server of every pass.
        values = {item.name: getattr(self, item.name) for item in fields(self)}
        return {**values, "state": self.state.value if self.state else None}

    @classmethod
    def from_record(cls, record: Mapping[str, Any] | None) -> Memory:
        """A stored memory back; an unknown state is forgotten rather than trusted."""
        if not record:
            return cls()
        return cls(enum_member(State, record.get("state")),
                   int(record.get("consecutive_failures") or 0),
                   int(record.get("rejected_passes") or 0), record.get("last_healthy_at"),
                   int(record.get("waiting_passes") or 0),
                   _remembered(record.get("generation_tokens_total")),
                   _remembered(record.get("generation_counted_at")),
                   record.get("latency_seen") if isinstance(record.get("latency_seen"), Mapping)
                   else None, record.get("tls_seen") is True)


def _remembered(value: Any) -> Any:
    """A number the load remembers, or None: a stored value of another type is forgotten."""
    return value if is_number(value) else None


@dataclass(frozen=True)
class Verdict:
    state: State
    reason: str
    memory: Memory

    @property
    def action(self) -> Action:
        return ACTIONS[self.state]

    @property
    def answered_healthy(self) -> bool:
        """Healthy on this pass's own probe. A Healthy server whose probe failed (fewer than
        ``health_fail_threshold`` times in a row) keeps its state and route, but has not shown
        that it serves: a restarted server is proven only by an answer."""
        return _answered(self.state, self.memory.consecutive_failures)

    @property
    def outlives_instance(self) -> bool:
        """The ``fleet.hosts`` row points at nothing a provider runs: flag it, never retire it."""
        return self.state is State.UNLISTED


def stored_answered_healthy(verdict: Mapping[str, Any]) -> bool:
    """:attr:`Verdict.answered_healthy` of a verdict as llmao stores it (``POST
    /admin/api/verdicts``: its state, and its memory with the failures in a row)."""
    memory = verdict.get("memory")
    failures = memory.get("consecutive_failures") if isinstance(memory, Mapping) else 0
    return _answered(verdict.get("state"), failures)


def _answered(state: Any, consecutive_failures: Any) -> bool:
    return state == State.HEALTHY and not consecutive_failures


def classify(now: float, last_fetch: float | None, probe: Probe, listed: Listed,
             memory: Memory, knobs: Lifecycle) -> Verdict:
    """The state of one server after this pass's probe."""
    if probe.health_ok and probe.models is Models.LISTS:
        # A Healthy probe's detail says why its figures are unknown, if they are.
        return Verdict(State.HEALTHY, "serving its model with our bearer"
                       + (f"; {probe.detail}" if probe.detail else ""),
                       Memory(State.HEALTHY, 0, 0, now))
    if probe.models is Models.REJECTED:
        return _rejected(probe, listed, memory, knobs)
    answering = probe.health_ok or probe.models is Models.OTHER
    if listed is Listed.PREEMPTED and not answering:
        return Verdict(State.PREEMPTED, "preempted: the provider stopped it (an interruptible "
                       "instance); its route is removed until it runs again",
                       replace(memory, state=State.PREEMPTED, consecutive_failures=0,
                               rejected_passes=0))
    gone = listed is Listed.NOT_NAMED and not answering
    if _was_serving_since_last_boot(last_fetch, memory):
        verdict = _failing(probe, memory, knobs)
        if gone and verdict.state is State.UNHEALTHY:
            return _unlisted(verdict.memory)
        return verdict
    if gone:
        return _unlisted(memory)
    return _starting(now, last_fetch, probe, memory, knobs)


def _unlisted(memory: Memory) -> Verdict:
    return Verdict(State.UNLISTED, "no provider listing names this box and it does not answer: "
                   "the fleet.hosts row may outlive its instance",
                   replace(memory, state=State.UNLISTED, rejected_passes=0))


def _rejected(probe: Probe, listed: Listed, memory: Memory, knobs: Lifecycle) -> Verdict:
    passes = memory.rejected_passes + 1
    remembered = replace(memory, state=State.REJECTED, rejected_passes=passes,
                         consecutive_failures=0)
    unnamed = listed in (Listed.NOT_NAMED, Listed.NO_PROVIDERS)
    # A 401 (detail "HTTP 401 ...", or none given) or a certificate that does not verify.
    why = (probe.detail if probe.detail and not probe.detail.startswith("HTTP 401")
           else "401 to our bearer")
    if passes >= knobs.rejected_passes and unnamed:
        return Verdict(State.FOREIGN, f"{why} on {passes} passes at an address no "
                       "provider listing names: not ours", replace(remembered,
                                                                   state=State.FOREIGN))
    return Verdict(State.REJECTED, f"{why} ({passes} pass(es))", remembered)


def _was_serving_since_last_boot(last_fetch: float | None, memory: Memory) -> bool:
    """Healthy before, and no config fetch since: a failure now is a fault, not a boot."""
    if memory.last_healthy_at is None:
        return False
    return last_fetch is None or last_fetch <= memory.last_healthy_at


def _failing(probe: Probe, memory: Memory, knobs: Lifecycle) -> Verdict:
    failures = memory.consecutive_failures + 1
    what = _failure_text(probe)
    if failures >= knobs.health_fail_threshold:
        return Verdict(State.UNHEALTHY, f"{what} on {failures} consecutive probes",
                       replace(memory, state=State.UNHEALTHY, consecutive_failures=failures,
                               rejected_passes=0))
    return Verdict(State.HEALTHY, f"{what} ({failures} of {knobs.health_fail_threshold} "
                   "failures before it is Unhealthy)",
                   replace(memory, state=State.HEALTHY, consecutive_failures=failures,
                           rejected_passes=0))


def _starting(now: float, last_fetch: float | None, probe: Probe, memory: Memory,
              knobs: Lifecycle) -> Verdict:
    remembered = replace(memory, consecutive_failures=0, rejected_passes=0)
    if last_fetch is None:
        return Verdict(State.AWAITING, "has not fetched its config yet; " + _failure_text(probe),
                       replace(remembered, state=State.AWAITING))
    age = now - last_fetch
    minutes = f"{age / 60:.0f} min" if age >= 60 else f"{age:.0f} s"
    if age <= knobs.health_grace_s:
        what = "vLLM up, model loading" if probe.health_ok else "not answering yet"
        return Verdict(State.LOADING, f"fetched its config {minutes} ago; {what}",
                       replace(remembered, state=State.LOADING))
    return Verdict(State.STALLED, f"fetched its config {minutes} ago, "
                   f"{_failure_text(probe)} after the {knobs.health_grace_s:.0f} s grace",
                   replace(remembered, state=State.STALLED))


def _failure_text(probe: Probe) -> str:
    if not probe.health_ok and probe.models is Models.SKIPPED:
        return "not answering" + (f" ({probe.detail})" if probe.detail else "")
    if probe.models is Models.OTHER:
        return "answering without its served model"
    if not probe.health_ok:
        return "/health failing" + (f" ({probe.detail})" if probe.detail else "")
    return "/v1/models failing" + (f" ({probe.detail})" if probe.detail else "")
