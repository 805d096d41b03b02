"""The server's view of the fleet: the loaded config joined with the observed state.

One :class:`ServerState` per app holds the immutable :class:`Fleet`, the store
every worker shares and the redactor of this fleet's secrets. The rules it
applies (what a box is served, what an approval may hold) are the core's.
"""

from __future__ import annotations

from collections.abc import Sequence

from flask import Flask, current_app

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import normalize_host
from ansible_collections.llmao.fleet.plugins.module_utils.intent import BoxAssignment

from .binding_cache import BindingCache
from .box_api_stats import BoxApiStats
from .recorder import FetchRecorder
from .redaction import Redactor
from .store import Approval, StateStore

EXTENSION = "llmao"


def app_state(app: Flask | None = None) -> ServerState:
    """The state of ``app`` (by default the app handling the request), as create_app set it.

    The one way in, as flaskr's ``get_db()``: no view, handler or test spells the
    extension's key itself.
    """
    return (current_app if app is None else app).extensions[EXTENSION]


def attach_state(app: Flask, state: ServerState) -> None:
    app.extensions[EXTENSION] = state


class ServerState:
    """The fleet, the shared store and the redactor of one app."""

    def __init__(self, fleet: Fleet, store: StateStore):
        self.fleet = fleet
        self.store = store
        self.redact = Redactor.for_settings(fleet.settings)
        self.recorder = FetchRecorder(store, redact=self.redact)
        self.bindings = BindingCache(store)
        # Decided once: every box call asks it (fleet.binding, docs/box-identity.md).
        self.binds_boxes = fleet.settings.binds_boxes
        # Made here, in the arbiter that preloads the app, so every worker forked shares it.
        self.box_api_stats = BoxApiStats()
        # Decided and encoded once: the gate checks it on every request. None: no usable
        # key is configured (missing, empty or a placeholder), so every fetch answers 503.
        self.fleet_key: bytes | None = (
            (fleet.settings.fleet_key or "").encode("utf-8") if fleet.fleet_key_configured
            else None)

    def served_assignment(self, box: str) -> BoxAssignment | None:
        """What ``box`` is served: its ``fleet.hosts`` rows, else its approval, else None."""
        assignment = self.fleet.assignment(box)
        if assignment is not None:
            return assignment
        approval = self.store.approval(box)
        if approval is None:
            return None
        return self.fleet.approved_assignment(box, approval.models)

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
