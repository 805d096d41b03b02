"""The server's view of the fleet: the loaded config joined with the observed state.

One :class:`ServerState` per app holds the immutable :class:`Fleet`, the store
every worker shares and the redactor of this fleet's secrets. The rules it
applies (what a box is served, what an approval may hold) are the core's.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Self

from flask import Flask, current_app

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import normalize_host
from ansible_collections.llmao.fleet.plugins.module_utils.intent import BoxAssignment

from .binding_cache import BindingCache
from .box_api_stats import BoxApiStats
from .recorder import FetchRecorder
from .redaction import Redactor
from .store import Approval, StateStore, UnknownBox
from .tls.fleet_ca import CaSigner

EXTENSION = "llmao"


def app_state(app: Flask | None = None) -> ServerState:
    """The state of ``app`` (by default the app handling the request), as create_app set it.

    The one way in, as flaskr's ``get_db()``: no view, handler or test spells the
    extension's key itself.
    """
    return (current_app if app is None else app).extensions[EXTENSION]


def attach_state(app: Flask, state: ServerState) -> None:
    app.extensions[EXTENSION] = state


def approvals_in_force(fleet: Fleet, approvals: Iterable[Approval]) -> dict[str, list[str]]:
    """Approved box to its model names in port order; a box now in ``fleet.hosts`` is not one
    (its rows decide). What reconcile reads, and adds to the fleet it loads."""
    return {approval.box: list(approval.models) for approval in approvals
            if approval.box not in fleet.assignments}


def fleet_in_force(fleet: Fleet, approvals: Iterable[Approval]) -> Fleet:
    """The fleet llmao serves: ``fleet.hosts`` plus the approvals in force that the core's
    ``with_approvals`` honours (the rule reconcile follows with the same approvals)."""
    approved = approvals_in_force(fleet, approvals)
    return fleet.with_approvals(approved) if approved else fleet


def waiting_unknowns(fleet: Fleet, unknown: Iterable[UnknownBox],
                     approvals: Iterable[Approval]) -> list[UnknownBox]:
    """Unknown names still waiting for a decision: neither in ``fleet.hosts`` nor approved."""
    approved = {approval.box for approval in approvals}
    return [box for box in unknown if box.name not in approved
            and box.name not in fleet.assignments]


class ServerState:
    """The fleet, the shared store and the redactor of one app."""

    def __init__(self, fleet: Fleet, store: StateStore):
        self.fleet = fleet
        self.store = store
        self.redact = Redactor.for_settings(fleet.settings)
        self.recorder = FetchRecorder(store, redact=self.redact)
        self.bindings = BindingCache(store)
        # Decided once: every box call asks it (fleet.binding, docs/box-identity.md).
        self.binds_boxes = fleet.settings.fleet.binds_boxes
        # Made here, in the arbiter that preloads the app, so every worker forked shares it.
        self.box_api_stats = BoxApiStats()
        # Decided and encoded once: the gate checks it on every request. None: no usable
        # key is configured (missing, empty or a placeholder), so every fetch answers 503.
        self.fleet_key: bytes | None = (
            (fleet.settings.fleet.key or "").encode("utf-8") if fleet.fleet_key_configured
            else None)
        # The Authorization value the box program sends, matched whole before the bearer
        # rule reads one (:func:`llmao_server.boxes.box_api.presents_fleet_key`); None: no usable
        # key, or one not in ASCII (the rule alone then compares it).
        self.fleet_bearer: str | None = (
            "Bearer " + self.fleet_key.decode("ascii")
            if self.fleet_key is not None and self.fleet_key.isascii() else None)
        self._in_force: tuple[tuple[tuple[str, tuple[str, ...]], ...], Fleet] | None = None
        tls = fleet.settings.box_tls
        # The fleet CA, read and checked once here (the app's load), never again per leaf.
        self._signer = None if tls is None else CaSigner(tls.ca_pem, tls.ca_key)

    def ca_signer(self) -> CaSigner:
        """The fleet CA's signer (box TLS is on: the caller checked)."""
        if self._signer is None:
            raise RuntimeError("no box_tls section: nothing signs")
        return self._signer

    def fleet_in_force(self, approvals: Sequence[Approval] | None = None) -> Fleet:
        """:func:`fleet_in_force` of this app's fleet and ``approvals`` (by default the
        store's now), made again only when the approvals change (per worker): every box's
        turn ask, ``/metrics`` and the admin API's observations read it."""
        if approvals is None:
            approvals = self.store.approvals()
        key = tuple((approval.box, approval.models) for approval in approvals)
        kept = self._in_force
        if kept is None or kept[0] != key:
            kept = self._in_force = (key, fleet_in_force(self.fleet, approvals))
        return kept[1]

    def served_assignment(self, box: str) -> BoxAssignment | None:
        """What ``box`` is served: its ``fleet.hosts`` rows, else the rows of the pool an
        enrollment made it a member of (this worker's memory of the bindings: no store read),
        else its approval, else None."""
        assignment = self.fleet.assignment(box)
        if assignment is not None:
            return assignment
        held = self.bindings.held(normalize_host(box))
        if held is not None and held.bound and held.pool in self.fleet.settings.pools:
            return self.fleet.pool_assignment(box, held.pool)
        approval = self.store.approval(box)
        if approval is None:
            return None
        return self.fleet.approved_assignment(box, approval.models)

    def enrolled_assignment(self, box: str, now: float) -> BoxAssignment | None:
        """The pool rows an outstanding enrollment gives ``box`` before it binds (a rented
        box's first fetch, with its bootstrap token: the one path that reads enrollments)."""
        name = normalize_host(box)
        pool = next((e.pool for e in self.store.enrollments(now) if e.box == name), None)
        if pool is None or pool not in self.fleet.settings.pools:
            return None
        return self.fleet.pool_assignment(name, pool)

    def approve(self, box: str, models: Sequence[str], approved_by: str,
                now: float) -> BoxAssignment:
        """Let an unknown box run ``models``; raises the core's ``ApprovalError`` if it may not."""
        assignment = self.fleet.approved_assignment(box, models)
        self.store.approve(Approval(normalize_host(box), tuple(models), approved_by, now))
        return assignment

    def note_fetch(self, box: str, now: float) -> None:
        self.recorder.note_fetch(box, now)

    def note_check(self, box: str, now: float) -> None:
        self.recorder.note_check(box, now)

    def note_unknown(self, box: str, now: float) -> None:
        self.recorder.note_unknown(box, now)

    def forget_joined_unknowns(self) -> None:
        """Names that are now ``fleet.hosts`` keys leave the unknown list."""
        joined = [u.name for u in self.store.unknown_boxes() if u.name in self.fleet.assignments]
        self.store.forget_unknown(joined)

    def close(self) -> None:
        """Write what the recorder holds and release this process's connection."""
        self.recorder.close()
        self.bindings.close()
        self.store.close()


class StateView:
    """What a worker keeps of one app's state between requests (a view made from the store,
    kept until what it was made from changes): made on first use with :meth:`of`, dropped
    with the state."""

    _views: ClassVar[weakref.WeakKeyDictionary[ServerState, dict[type, Any]]] = \
        weakref.WeakKeyDictionary()

    def __init__(self, state: ServerState):
        self.state = state

    @classmethod
    def of(cls, state: ServerState) -> Self:
        views = StateView._views.setdefault(state, {})
        view = views.get(cls)
        if view is None:
            view = views[cls] = cls(state)
        return view
