# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rolling a change across the fleet: the settings, and who may change when.

A box that follows its assignment and sees a new revision asks llmao for a
turn before it restarts anything. The rules deciding a turn live here, pure,
so that the box API, the admin API (the push path) and every test apply the
same ones: at most ``rollout.max_unavailable`` servers of a model change at
once, never the last healthy server of a model, and a model whose change
failed on its intended revision waits until that revision changes. The store
keeps the turns and decides inside one transaction, so every worker and every
instance agrees (docs/rolling-changes.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from .config_file import Rollout
from .fleet import Fleet
from .lifecycle import State
from .litellm_routes import deployment_id

# The settings live with the other config.yaml sections; the rules that use them, here.
__all__ = ["ACTIVE", "NEXT_PHASES", "Phase", "Rollout", "Turn", "TurnError", "decide_turn",
           "may_apply", "paused_models", "server_models", "turn_deadline"]

# A turn outlives its parts by this much: a pass or two of reconcile to see the result.
TURN_SLACK_S = 120.0


class Phase(StrEnum):
    DRAINING = "draining"   # granted; reconcile deletes the turn's routes
    DRAINED = "drained"     # no route left; the box may apply once drain_s has passed
    DONE = "done"           # the box applied it and every server of the turn is Healthy
    FAILED = "failed"       # not Healthy within its grace, or expired: the model pauses


ACTIVE = frozenset({Phase.DRAINING, Phase.DRAINED})
# The moves a turn may make after it is granted; anything else is refused.
NEXT_PHASES: Mapping[Phase, frozenset[Phase]] = {
    Phase.DRAINING: frozenset({Phase.DRAINED, Phase.FAILED}),
    Phase.DRAINED: frozenset({Phase.DONE, Phase.FAILED}),
    Phase.DONE: frozenset(),
    Phase.FAILED: frozenset(),
}


class TurnError(ValueError):
    """A turn record that cannot be read, or a move the turn may not make; says why."""


@dataclass(frozen=True)
class Turn:
    """One box's turn to change: the latest one per box is kept in the store."""

    box: str
    revision: str                 # the revision the box is moving to
    servers: tuple[str, ...]      # deployment ids of the servers that change
    phase: Phase
    granted_at: float
    expires_at: float             # turn_deadline(...)
    drained_at: float | None = None
    ended_at: float | None = None
    why: str = ""                 # failed: which server, which state, its reason

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE

    def record(self) -> dict[str, Any]:
        """The turn as JSON: what the store keeps and the admin API answers."""
        return {"box": self.box, "revision": self.revision, "servers": list(self.servers),
                "phase": self.phase.value, "granted_at": self.granted_at,
                "expires_at": self.expires_at, "drained_at": self.drained_at,
                "ended_at": self.ended_at, "why": self.why}

    @classmethod
    def from_record(cls, record: Any) -> Turn:
        """A turn back from :meth:`record`'s form; raises :class:`TurnError` on another shape."""
        if not isinstance(record, Mapping):
            raise TurnError("a turn must be an object")
        texts = [record.get(key) for key in ("box", "revision", "why")]
        servers = record.get("servers")
        phase = record.get("phase")
        times = [record.get(key) for key in ("granted_at", "expires_at")]
        ends = [record.get(key) for key in ("drained_at", "ended_at")]
        if not all(isinstance(text, str) for text in texts) \
                or not isinstance(servers, list) \
                or not all(isinstance(server, str) for server in servers) \
                or phase not in Phase._value2member_map_ \
                or not all(_is_time(value) for value in times) \
                or not all(value is None or _is_time(value) for value in ends):
            raise TurnError("a turn must have box, revision, why (text), servers (a list of "
                            "deployment ids), a known phase and times in seconds")
        box, revision, why = texts
        return cls(box, revision, tuple(servers), Phase(phase), *times, *ends, why)

    def moved(self, phase: Phase, why: str, now: float) -> Turn:
        """This turn in ``phase`` from ``now``; :class:`TurnError` when it may not move so."""
        if phase not in NEXT_PHASES[self.phase]:
            raise TurnError(f"the turn of {self.box} for revision {self.revision} is "
                            f"{self.phase.value}; it cannot become {phase.value}")
        if phase is Phase.DRAINED:
            return replace(self, phase=phase, drained_at=now, why=why)
        return replace(self, phase=phase, ended_at=now, why=why)


def _is_time(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def turn_deadline(granted_at: float, rollout: Rollout, health_grace_s: float) -> float:
    """When a turn has run too long: drain, the grace to become Healthy, two follow
    checks (to notice the turn, then the drain's end) and :data:`TURN_SLACK_S`."""
    return (granted_at + rollout.drain_s + health_grace_s + 2 * (rollout.follow_s or 0)
            + TURN_SLACK_S)


def may_apply(turn: Turn, rollout: Rollout, now: float) -> bool:
    """Whether the box may apply now: drained, and ``drain_s`` has passed on llmao's clock
    (the box never compares clocks)."""
    return (turn.phase is Phase.DRAINED and turn.drained_at is not None
            and now >= turn.drained_at + rollout.drain_s)


def server_models(fleet: Fleet) -> dict[str, str]:
    """Deployment id → model name of every intended server."""
    return {deployment_id(server.box, server.listen_port, server.name): server.model_name
            for server in fleet.servers()}


def paused_models(fleet: Fleet, turns: Iterable[Turn]) -> dict[str, Turn]:
    """Model name → the failed turn pausing its rollout.

    A failed turn pauses the models of its servers for as long as its revision is
    still what its box is meant to run; a new revision (a fixed config) resumes them.
    """
    models = server_models(fleet)
    paused: dict[str, Turn] = {}
    for turn in turns:
        assignment = fleet.assignment(turn.box)
        if turn.phase is not Phase.FAILED or assignment is None \
                or assignment.revision != turn.revision:
            continue
        for server in turn.servers:
            if server in models:
                paused.setdefault(models[server], turn)
    return paused


def decide_turn(fleet: Fleet, box: str, revision: str, server_names: Iterable[str],
                turns: Iterable[Turn], states: Mapping[str, Any], now: float) -> Turn | str:
    """The turn granted to ``box`` for ``revision``, or why it must wait.

    ``server_names`` name the box's servers whose programs change or go; those
    not intended are ignored (a server that goes has no place to drain from).
    ``turns`` are every stored turn, ``states`` the last pass's states by
    deployment id. Raises ValueError when ``revision`` is not the box's intended
    one: the box must fetch again.
    """
    assignment = fleet.assignment(box)
    if assignment is None or assignment.revision != revision:
        raise ValueError(f"revision {revision!r} is not what {box} is meant to run")
    turns = list(turns)
    for turn in turns:
        if turn.box == assignment.box and turn.revision == revision and turn.active:
            return turn
    wanted = set(server_names)
    mine = {deployment_id(s.box, s.listen_port, s.name): s.model_name
            for s in assignment.servers if s.name in wanted}
    why = _why_wait(fleet, assignment.box, mine, turns, states)
    if why:
        return why
    rollout = fleet.settings.rollout
    granted = Turn(assignment.box, revision, tuple(mine), Phase.DRAINING, now,
                   turn_deadline(now, rollout, fleet.settings.lifecycle.health_grace_s))
    return granted if mine else granted.moved(Phase.DRAINED, "", now)


def _why_wait(fleet: Fleet, box: str, mine: Mapping[str, str], turns: list[Turn],
              states: Mapping[str, Any]) -> str:
    """Why the servers ``mine`` (deployment id → model) of ``box`` may not change now, or ""."""
    paused = paused_models(fleet, turns)
    models = server_models(fleet)
    busy = {server for turn in turns if turn.active for server in turn.servers}
    others = [turn for turn in turns if turn.active and turn.box != box]
    limit = fleet.settings.rollout.max_unavailable
    for model in sorted(set(mine.values())):
        failed = paused.get(model)
        if failed:
            return (f"rollout of {model} paused: {failed.box} failed on revision "
                    f"{failed.revision}: {failed.why or 'no reason given'}")
        changing = [s for turn in others for s in turn.servers if models.get(s) == model]
        asking = [s for s, m in mine.items() if m == model]
        if changing and len(changing) + len(asking) > limit:
            return (f"{model}: {len(changing)} server(s) already changing, "
                    f"max_unavailable is {limit}")
        if any(_healthy(states, s) for s in asking) and not any(
                _healthy(states, s) and s not in busy
                for s, m in models.items() if m == model and s not in mine):
            return f"{model}: no other server is Healthy and serving; never the last healthy"
    return ""


def _healthy(states: Mapping[str, Any], server: str) -> bool:
    return states.get(server) == State.HEALTHY
