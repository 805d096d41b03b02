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

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from .config_file import Rollout
from .fleet import Fleet
from .intent import BoxAssignment
from .json_values import enum_member, is_number
from .lifecycle import State

# The settings live with the other config.yaml sections; the rules that use them, here.
__all__ = ["ACTIVE", "NEXT_PHASES", "Phase", "Rollout", "Turn", "TurnError", "decide_turn",
           "healthy_by_model", "may_apply", "paused_models", "turn_deadline"]

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
        phase = enum_member(Phase, record.get("phase"))
        times = [record.get(key) for key in ("granted_at", "expires_at")]
        ends = [record.get(key) for key in ("drained_at", "ended_at")]
        if not all(isinstance(text, str) for text in texts) \
                or not isinstance(servers, list) \
                or not all(isinstance(server, str) for server in servers) \
                or phase is None \
                or not all(is_number(value) for value in times) \
                or not all(value is None or is_number(value) for value in ends):
            raise TurnError("a turn must have box, revision, why (text), servers (a list of "
                            "deployment ids), a known phase and times in seconds")
        box, revision, why = texts
        return cls(box, revision, tuple(servers), phase, *times, *ends, why)

    def moved(self, phase: Phase, why: str, now: float) -> Turn:
        """This turn in ``phase`` from ``now``; :class:`TurnError` when it may not move so."""
        if phase not in NEXT_PHASES[self.phase]:
            raise TurnError(f"the turn of {self.box} for revision {self.revision} is "
                            f"{self.phase.value}; it cannot become {phase.value}")
        if phase is Phase.DRAINED:
            return replace(self, phase=phase, drained_at=now, why=why)
        return replace(self, phase=phase, ended_at=now, why=why)


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


def healthy_by_model(fleet: Fleet, states: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """Model name → the deployment ids of its servers that ``states`` (the last pass's,
    by deployment id) call Healthy: one walk of the fleet, made once per stored pass, so
    that deciding a turn never walks every server."""
    healthy: dict[str, set[str]] = {}
    for server in fleet.servers():
        server_id = server.id
        if states.get(server_id) == State.HEALTHY:
            healthy.setdefault(server.model_name, set()).add(server_id)
    return {model: frozenset(ids) for model, ids in healthy.items()}


def box_server_models(assignment: BoxAssignment | None,
                      names: Collection[str] | None = None) -> dict[str, str]:
    """Deployment id → model name of one box's intended servers (those named, if ``names``)."""
    if assignment is None:
        return {}
    return {server.id: server.model_name
            for server in assignment.servers if names is None or server.name in names}


def turn_models(fleet: Fleet, turn: Turn) -> list[str]:
    """The model of each of a turn's servers that its box is still meant to run."""
    models = box_server_models(fleet.assignment(turn.box))
    return [models[server] for server in turn.servers if server in models]


def paused_models(fleet: Fleet, turns: Iterable[Turn]) -> dict[str, Turn]:
    """Model name → the failed turn pausing its rollout.

    A failed turn pauses the models of its servers for as long as its revision is
    still what its box is meant to run; a new revision (a fixed config) resumes them.
    Only the failed turns' own boxes are looked at, never the whole fleet.
    """
    paused: dict[str, Turn] = {}
    for turn in turns:
        assignment = fleet.assignment(turn.box)
        if turn.phase is not Phase.FAILED or assignment is None \
                or assignment.revision != turn.revision:
            continue
        for model in sorted(set(turn_models(fleet, turn))):
            paused.setdefault(model, turn)
    return paused


def decide_turn(fleet: Fleet, box: str, revision: str, server_names: Iterable[str],
                turns: Iterable[Turn], healthy: Mapping[str, Collection[str]], now: float,
                applied: str | None = None) -> Turn | str | None:
    """The turn granted to ``box`` for ``revision``, why it must wait, or None: nothing to
    turn, the box may apply at once.

    ``server_names`` name the box's servers whose programs change or go. Only those
    the box is meant to run need a turn (a server that goes has no place to drain
    from); an ask naming none of them is granted nothing (None) and nothing is
    kept. ``turns`` are the stored turns that are not done, ``healthy`` the last
    pass's Healthy servers (:func:`healthy_by_model`), ``applied`` the revision
    the box last reported it applied: a box that already runs ``revision`` has
    nothing to turn. Asking again while the box holds an active turn for
    ``revision`` returns that turn when it covers every server asked for; else
    the rules decide again for all of them together. The why of a wait tells
    only about the asking box: never another box's name, revision or reason.
    Raises ValueError when ``revision`` is not the box's intended one: the box
    must fetch again.
    """
    assignment = fleet.assignment(box)
    if assignment is None or assignment.revision != revision:
        raise ValueError(f"revision {revision!r} is not what {box} is meant to run")
    if applied == revision:
        return f"{assignment.box} already applied revision {revision}: there is nothing to turn"
    turns = list(turns)
    mine = box_server_models(assignment, set(server_names))
    held = next((turn for turn in turns if turn.box == assignment.box
                 and turn.revision == revision and turn.active), None)
    if held is not None:
        if set(mine) <= set(held.servers):
            return held
        mine.update((server, model) for server, model in box_server_models(assignment).items()
                    if server in held.servers)
    if not mine:
        return None
    why = _why_wait(fleet, assignment.box, mine, turns, healthy)
    if why:
        return why
    rollout = fleet.settings.rollout
    return Turn(assignment.box, revision, tuple(mine), Phase.DRAINING, now,
                turn_deadline(now, rollout, fleet.settings.fleet.lifecycle.health_grace_s))


def _why_wait(fleet: Fleet, box: str, mine: Mapping[str, str], turns: list[Turn],
              healthy: Mapping[str, Collection[str]]) -> str:
    """Why the servers ``mine`` (deployment id → model) of ``box`` may not change now, or ""."""
    paused = paused_models(fleet, turns)
    busy = {server for turn in turns if turn.active for server in turn.servers}
    others = [turn for turn in turns if turn.active and turn.box != box]
    limit = fleet.settings.rollout.max_unavailable
    for model in sorted(set(mine.values())):
        failed = paused.get(model)
        if failed and failed.box == box:
            return (f"rollout of {model} paused: this box failed on revision "
                    f"{failed.revision}: {failed.why or 'no reason given'}")
        if failed:
            return (f"rollout of {model} paused: a change of another box failed on its "
                    "intended revision (the dashboard says which)")
        changing = sum(turn_models(fleet, turn).count(model) for turn in others)
        asking = [server for server, of in mine.items() if of == model]
        if changing and changing + len(asking) > limit:
            return f"{model}: other servers of it are changing, max_unavailable is {limit}"
        serving = healthy.get(model, ())
        if any(server in serving for server in asking) and not any(
                server not in mine and server not in busy for server in serving):
            return f"{model}: no other server is Healthy and serving; never the last healthy"
    return ""
