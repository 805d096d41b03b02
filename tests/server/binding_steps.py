"""Binding steps for store and cache tests, each one call of the server's own rule
(:func:`llmao_server.boxes.bindings.decide`) run by the store, as the box API runs it."""

from __future__ import annotations

from llmao_server.boxes import bindings
from llmao_server.boxes.bindings import CONTROLLER, FETCH, POST, Claim, decide
from llmao_server.store import BoxBinding, StateStore


def claim(store: StateStore, box: str, call: str, presented: str | None, peer: str | None,
          instance: str | None, now: float, new_hash: str = "",
          enrolled_only: bool = False, bootstrap: str | None = None) -> bool:
    """Whether the rule admits this call (hashes as they are kept), writing what it decides."""
    request = Claim(box, call, peer, instance, presented, bootstrap, enrolled_only, now,
                    new_hash)
    outcome = store.decide_binding(box, lambda held, enrolled: decide(request, held, enrolled))
    return outcome.admitted


def bind(store: StateStore, box: str, new_hash: str, peer: str | None, instance: str | None,
         now: float) -> bool:
    """A first fetch without a token: a pending binding to ``new_hash`` when the rule lets."""
    return claim(store, box, FETCH, None, peer, instance, now, new_hash)


def confirm(store: StateStore, box: str, presented: str, peer: str | None,
            instance: str | None, now: float) -> bool:
    """The box's next call presents its token: the pending binding is confirmed."""
    return claim(store, box, POST, presented, peer, instance, now)


def push(store: StateStore, box: str, now: float) -> bool:
    return claim(store, box, CONTROLLER, None, "192.0.2.250", None, now, "controller-hash")


def held(store: StateStore, box: str) -> BoxBinding | None:
    return next((b for b in store.bindings_since(0) if b.box == box), None)


def release(store: StateStore, box: str, claimant: str | None = None) -> BoxBinding | None:
    """An admin's release (:func:`llmao_server.boxes.bindings.release`) run by the store."""
    return store.decide_binding(box, lambda binding, _enrolled: bindings.release(
        box, claimant, binding, 9.0))
