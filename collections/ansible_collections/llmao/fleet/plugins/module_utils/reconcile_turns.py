# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a reconcile pass does about rollout turns: hold servers back, move turns on.

Reconcile is the one writer of LiteLLM, so a box's turn works through it: while
a turn is on and its box has not applied the turn's revision, the turn's servers
are kept out of LiteLLM (their routes deleted while it drains); each pass then
moves the turn one phase on from what it saw, and the box follows the phase.
Pure, like the rest of the plan: the updates are posted after LiteLLM was written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .audit_log import stamped
from .json_values import enum_member
from .lifecycle import Action, Verdict
from .rollout import ACTIVE, Phase, Turn


@dataclass(frozen=True)
class TurnUpdate:
    """One turn's next phase, as ``POST /admin/api/turns`` takes it."""

    box: str
    revision: str
    phase: Phase
    why: str = ""

    def record(self) -> dict[str, Any]:
        return {"box": self.box, "revision": self.revision, "phase": self.phase.value,
                "why": self.why}

    @classmethod
    def from_record(cls, record: Any) -> TurnUpdate:
        """An update back from :meth:`record`'s form (fleet_plan's result, the body of
        ``POST /admin/api/turns``); raises ValueError on another shape."""
        if not isinstance(record, Mapping):
            raise ValueError("a turn update must be an object with box, revision, phase and why")
        box, revision, phase, why = (record.get(key) for key in
                                     ("box", "revision", "phase", "why"))
        if not isinstance(box, str) or not isinstance(revision, str) \
                or not isinstance(why, str | None):
            raise ValueError("a turn update's box and revision must be texts, its why a text")
        known = enum_member(Phase, phase)
        if known is None:
            raise ValueError(f"a turn update's phase must be one of "
                             f"{', '.join(p.value for p in Phase)}")
        return cls(box, revision, known, why or "")

    def line(self) -> str:
        return f"turn of {self.box} (rev {self.revision}): {self.phase.value}" + (
            f": {self.why}" if self.why else "")

    def audit_entry(self, now: float) -> dict[str, Any]:
        """Its line in the controller's audit log, once llmao took it."""
        return stamped({"action": "turn", "box": self.box, "revision": self.revision,
                        "phase": self.phase.value, "reason": self.why}, now)


def holding_turns(turns: Iterable[Turn], applied: Mapping[str, str | None]) -> dict[str, Turn]:
    """Server id to the turn keeping it out of LiteLLM: an active turn whose box has not
    applied the turn's revision yet (the server may restart any moment)."""
    held = {}
    for turn in turns:
        if turn.phase in ACTIVE and applied.get(turn.box) != turn.revision:
            held.update(dict.fromkeys(turn.servers, turn))
    return held


def next_phase(turn: Turn, applied: str | None, verdicts: Mapping[str, Verdict],
               routed: set[str], now: float) -> TurnUpdate | None:
    """The phase this pass moves ``turn`` to, or None when it stays (or has ended).

    Once its box has applied the turn's revision, only its servers' health decides:
    a draining turn is drained at once (then done when they answer Healthy), so a box
    that applied without waiting never leaves a turn to expire and pause its models.
    Done takes an answer on this pass's probe (:attr:`Verdict.answered_healthy`): a
    server Healthy before its restart that fails fewer probes than the threshold is
    still Healthy, and must not end a turn it never served.

    ``verdicts`` are this pass's, by server id; ``routed`` the ids LiteLLM has a
    route for once this pass's changes are made.
    """
    if turn.phase not in ACTIVE:
        return None
    applied_it = applied == turn.revision
    states = [(server, verdicts.get(server)) for server in turn.servers]
    if turn.phase is Phase.DRAINED and applied_it and all(
            verdict is not None and verdict.answered_healthy
            for verdict in (verdicts.get(server) for server in turn.servers)):
        return TurnUpdate(turn.box, turn.revision, Phase.DONE)
    failing = [(server, verdict) for server, verdict in states
               if verdict is not None and verdict.action is Action.DELETE]
    if applied_it and failing:
        return TurnUpdate(turn.box, turn.revision, Phase.FAILED, _server_text(*failing[0]))
    if turn.phase is Phase.DRAINING and applied_it:
        # Its servers were never held (the box runs the revision already), so their routes
        # would never go and the turn would expire and pause the model: it is past draining.
        return TurnUpdate(turn.box, turn.revision, Phase.DRAINED,
                          f"{turn.box} applied rev {turn.revision} before the drain ended")
    if now > turn.expires_at:
        return TurnUpdate(turn.box, turn.revision, Phase.FAILED,
                          _expired_text(turn, applied_it, states))
    if turn.phase is Phase.DRAINING and not routed & set(turn.servers):
        return TurnUpdate(turn.box, turn.revision, Phase.DRAINED)
    return None


def turn_updates(turns: Iterable[Turn], applied: Mapping[str, str | None],
                 verdicts: Mapping[str, Verdict], routed: set[str],
                 now: float) -> tuple[TurnUpdate, ...]:
    """Every active turn's next phase this pass, in the order the store gave them."""
    updates = (next_phase(turn, applied.get(turn.box), verdicts, routed, now) for turn in turns)
    return tuple(update for update in updates if update is not None)


def _server_text(server: str, verdict: Verdict) -> str:
    return f"{server} is {verdict.state.value}: {verdict.reason}"


def _expired_text(turn: Turn, applied_it: bool,
                  states: list[tuple[str, Verdict | None]]) -> str:
    if not applied_it:
        return f"the turn expired before {turn.box} applied rev {turn.revision}"
    for server, verdict in states:
        if verdict is None:
            return f"the turn expired: {server} is no longer intended"
        if not verdict.answered_healthy:
            return f"the turn expired: {_server_text(server, verdict)}"
    return "the turn expired"
