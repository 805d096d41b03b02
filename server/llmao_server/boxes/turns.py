"""Rollout turns as the server hands them out: a box's ask (``POST /vllm/turn``), the push
path's (``POST /admin/api/turns/take``) and reconcile's progress (``POST /admin/api/turns``).

The rules are the core's (:func:`rollout.decide_turn`); the store decides and
keeps the turn in one transaction, so every worker and instance agrees. The
answer is the same for both asks: whether the box holds a turn, its phase,
and whether it may apply now, on this server's clock (a box never compares
clocks). Each grant, each first refusal per box and revision, and each move
of a turn goes to the audit log.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NoReturn

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import (
    State,
    stored_answered_healthy,
)
from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import (
    MAX_SERVERS,
    SERVER_NAME_RE,
    revision_problem,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_turns import TurnUpdate
from ansible_collections.llmao.fleet.plugins.module_utils.rollout import (
    Turn,
    TurnError,
    decide_turn,
    healthy_by_model,
    may_apply,
)

from ..api_errors import RequestRefused
from ..audit import audit
from ..redaction import clipped
from ..state import ServerState, StateView

# A box names at most the servers it runs now plus those it is told to run.
MAX_NAMES = 2 * MAX_SERVERS
MAX_TEXT = 300
MAX_UPDATES = 10_000
# A box's asks: this many at once, then one per ASK_INTERVAL_S (per worker).
ASK_BURST = 5
ASK_INTERVAL_S = 0.5
# Reconcile's why names a server, its state and its reason: a line, not a document.
MAX_WHY = 2000


def read_ask(doc: Any, with_box: bool) -> tuple[str | None, str, list[str]]:
    """``{"revision", "servers": [names]}`` (and ``"box"`` when ``with_box``); 400 otherwise,
    an empty list of servers included: it could only ever be granted nothing."""
    if not isinstance(doc, dict):
        bad_turn("the body must be a JSON object with revision and servers")
    box = doc.get("box") if with_box else None
    if with_box and not (isinstance(box, str) and 0 < len(box) <= MAX_TEXT):
        bad_turn(f"box must be a box name of 1 to {MAX_TEXT} characters")
    revision, names = doc.get("revision"), doc.get("servers")
    if problem := revision_problem(revision):
        bad_turn(f"revision (the revision being moved to) {problem}")
    if not isinstance(names, list) or not 0 < len(names) <= MAX_NAMES or not all(
            isinstance(name, str) and SERVER_NAME_RE.match(name) for name in names):
        bad_turn(f"servers must be a list of 1 to {MAX_NAMES} server names (the programs "
                 "that change or go; a box that changes none needs no turn)")
    return box, revision, names


def ask_turn(state: ServerState, box: str, intended: str, revision: str,
             names: Sequence[str], who: str, peer: str | None) -> dict[str, Any]:
    """Decide ``box``'s ask for ``revision`` (its intended revision is ``intended``).

    What the rules read besides the turns is read before the store's lock and
    cheaply: the fleet in force and the last pass's Healthy servers per model are
    made once per approval set (:meth:`ServerState.fleet_in_force`) and per stored pass
    (:class:`AskViews`) in each worker,
    the box's applied revision is one row. Inside the lock only the turns that are
    not done are read, and only the boxes of those turns are looked at.
    """
    if revision != intended:
        raise RequestRefused(409, "stale_revision",
                             f"revision {clipped(revision)!r} is not what {box} is meant to run "
                             "now; fetch GET /vllm/config again")
    views = AskViews.of(state)
    fleet = state.fleet_in_force()
    healthy = views.healthy(fleet)
    applied = state.store.applied_revision(box)
    now = time.time()
    seen: list[Turn] = []

    def decide(turns: list[Turn]) -> Turn | str | None:
        seen.extend(turns)
        return decide_turn(fleet, box, revision, names, turns, healthy, now, applied)

    decision = state.store.grant_turn(decide)
    if isinstance(decision, Turn):
        if decision not in seen:
            audit(state.redact, "turn", "granted", who, peer, box=box, revision=revision,
                  phase=decision.phase.value, servers=list(decision.servers))
        return answer(fleet, box, revision, decision, "", now)
    if decision is None:
        return nothing_to_turn(fleet, box, revision)
    if state.store.note_wait(box, revision):
        audit(state.redact, "turn", "waiting", who, peer, box=box, revision=revision,
              why=decision)
    held = next((turn for turn in seen if turn.box == box and turn.revision == revision), None)
    return answer(fleet, box, revision, held, decision, now, granted=False)


def answer(fleet: Fleet, box: str, revision: str, turn: Turn | None, why: str, now: float,
           granted: bool = True) -> dict[str, Any]:
    """The answer of both asks: granted, the phase of the box's turn for this revision (if
    any), whether to apply now, the drain, and why (the wait, or the turn's own why)."""
    rollout = fleet.settings.rollout
    return {"host": box, "revision": revision, "granted": granted,
            "phase": turn.phase.value if turn else None,
            "apply": granted and turn is not None and may_apply(turn, rollout, now),
            "drain_s": float(rollout.drain_s), "why": why or (turn.why if turn else "")}


def nothing_to_turn(fleet: Fleet, box: str, revision: str) -> dict[str, Any]:
    """The answer to an ask naming none of the servers the box is meant to run: there is
    nothing to drain, so the box applies now and no turn is kept."""
    return {"host": box, "revision": revision, "granted": True, "phase": None, "apply": True,
            "drain_s": float(fleet.settings.rollout.drain_s),
            "why": "none of the servers named is one this box is meant to run: nothing to drain"}


class AskViews(StateView):
    """What deciding a turn reads besides the turns, kept per worker and per app.

    The last pass's Healthy servers per model (:func:`rollout.healthy_by_model`) are made
    again only when a new pass is stored (one cheap read says which is stored): a box's ask never
    decodes the whole pass or walks every server. Asks of ``POST /vllm/turn`` are
    rate-limited per box here too (:meth:`take_ask`).
    """

    def __init__(self, state: ServerState):
        super().__init__(state)
        self._healthy: tuple[Fleet, tuple[float, float], Mapping[str, frozenset[str]]] | None \
            = None
        self._asks: dict[str, tuple[float, float]] = {}

    def healthy(self, fleet: Fleet) -> Mapping[str, frozenset[str]]:
        """Model name → its servers that answered Healthy in the last stored pass."""
        stamp = self.state.store.pass_stamp()
        if stamp is None:
            return {}
        if self._healthy is None or self._healthy[0] is not fleet \
                or self._healthy[1] != stamp:
            last = self.state.store.last_pass()
            # Only servers that answered count: one kept Healthy through a failed probe may
            # be down, and must not be the healthy server another box's restart leans on.
            states = {} if last is None else {
                key: State.HEALTHY for key, verdict in last.verdicts.items()
                if isinstance(verdict, Mapping) and stored_answered_healthy(verdict)}
            kept = stamp if last is None else (last.pass_at, last.recorded_at)
            self._healthy = (fleet, kept, healthy_by_model(fleet, states))
        return self._healthy[2]

    def take_ask(self, box: str, now: float) -> None:
        """Count one ask of ``box``: 429 with ``Retry-After`` beyond :data:`ASK_BURST` asks
        at once, or beyond one per :data:`ASK_INTERVAL_S` after (a token bucket per box and
        worker; a following box asks at most every 0.8 s). Only known boxes get here, so
        the buckets are bounded by the fleet.

        The refusal is answered after the wait it names (at most ``ASK_INTERVAL_S``; a
        sleeping greenlet costs no CPU): a caller asking back to back on a connection
        then makes a few requests a second, instead of taking a worker's whole core
        from the boxes fetching their config.
        """
        tokens, since = self._asks.get(box, (ASK_BURST, now))
        tokens = min(ASK_BURST, tokens + (now - since) / ASK_INTERVAL_S)
        if tokens < 1:
            self._asks[box] = (tokens, now)
            wait_s = (1 - tokens) * ASK_INTERVAL_S
            time.sleep(wait_s)
            raise RequestRefused(429, "turn_asked_too_often",
                                 f"{box} asks for its turn too often: at most one ask every "
                                 f"{ASK_INTERVAL_S:g} s", {"Retry-After": str(math.ceil(wait_s))})
        self._asks[box] = (tokens - 1, now)


def read_updates(doc: Any) -> list[TurnUpdate]:
    """``{"updates": [{"box", "revision", "phase", "why"}]}``, each read as the core reads
    fleet_plan's (:meth:`TurnUpdate.from_record`); 400 otherwise."""
    updates = doc.get("updates") if isinstance(doc, dict) else None
    if not isinstance(updates, list) or len(updates) > MAX_UPDATES:
        bad_turn(f"the body must be {{\"updates\": [...]}} with at most {MAX_UPDATES} updates")
    read = []
    for index, record in enumerate(updates):
        try:
            update = TurnUpdate.from_record(record)
        except ValueError as exc:
            bad_turn(f"updates[{index}]: {exc}")
        if len(update.box) > MAX_TEXT or len(update.revision) > MAX_TEXT:
            bad_turn(f"updates[{index}]: box and revision must be at most {MAX_TEXT} characters")
        read.append(replace(update, why=update.why[:MAX_WHY]))
    return read


def apply_updates(state: ServerState, updates: list[TurnUpdate],
                  who: str, peer: str | None) -> dict[str, Any]:
    """Move each turn as asked; a move the turn may not make is refused and listed, the
    others still happen (reconcile's view may be a pass behind a box's new ask)."""
    now = time.time()
    refused = []
    for update in updates:
        box, revision, phase, why = update.box, update.revision, update.phase, update.why
        try:
            state.store.update_turn(box, revision, phase, why, now)
        except TurnError as exc:
            refused.append({**update.record(), "why": str(exc)})
            audit(state.redact, "turn-update", "refused", who, peer, box=box,
                  revision=revision, phase=phase.value, why=str(exc))
            continue
        audit(state.redact, "turn-update", "ok", who, peer, box=box, revision=revision,
              phase=phase.value, why=why)
    return {"turns": [turn.record() for turn in state.store.turns()], "refused": refused}


def bad_turn(message: str) -> NoReturn:
    raise RequestRefused(400, "bad_turn", message)
