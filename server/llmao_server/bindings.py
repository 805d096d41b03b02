"""Per-box identity (``fleet.binding: first_fetch``, docs/box-identity.md): a box name is
bound to the box that first fetched it, like SSH's known hosts.

The first accepted ``GET /vllm/config`` of an unbound name hands out a box token in
the ``X-LLMAO-Box-Token`` answer header; the box presents it on every later call.
The binding is pending until the box first presents it (a fetch without a token
then gets a fresh one, so a lost answer never strands a box), confirmed after:
from then on a call for that name without the token, or with another, is refused
(403) and nothing of that box is handed out. Only each token's SHA-256 is kept (a
token is 256 random bits, so a fast hash is as safe as a slow one), in the shared
store.

A fetch must not read the store (bench P9): each worker keeps every binding in
memory (:class:`~.binding_cache.BindingCache`). A presented token the memory confirms
is admitted at once (after its first time, by one dictionary lookup); anything else
(a first token, a stale memory, a refusal) is decided against the store, after the
attempt is counted per peer in the admin credentials' limiter
(:mod:`.admin_attempts`), so guessing is bounded.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from .admin_attempts import AttemptRefused, claim_attempts
from .api_errors import RequestRefused
from .audit import audit
from .binding_cache import BindingCache
from .state import ServerState
from .store import BoxBinding, StoreError

T = TypeVar("T")

TOKEN_HEADER = "X-LLMAO-Box-Token"
INSTANCE_HEADER = "X-LLMAO-Box-Instance"
# Where WSGI keeps them (PEP 3333).
TOKEN_ENVIRON = "HTTP_X_LLMAO_BOX_TOKEN"
INSTANCE_ENVIRON = "HTTP_X_LLMAO_BOX_INSTANCE"
TOKEN_BYTES = 32
# A provider's instance id is short; anything longer or unprintable is not kept.
MAX_INSTANCE = 128


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def new_token() -> str:
    """A fresh box token: 43 URL-safe characters."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def reported_instance(value: str | None) -> str | None:
    """The provider instance id a box reports, when it looks like one."""
    if value and len(value) <= MAX_INSTANCE and value.isascii() and value.isprintable():
        return value
    return None


def matches(binding: BoxBinding | None, presented: str | None) -> bool:
    return (binding is not None and binding.bound and presented is not None
            and hmac.compare_digest(token_hash(presented), binding.token_hash))


def admit_box(state: ServerState, environ: dict[str, Any], box: str, peer: str | None,
              may_bind: bool) -> str | None:
    """Let a call for ``box`` through, or refuse it (403, or 429 over the attempt limit).

    Returns a new token when this call binds the name (an unbound or pending name's
    ``GET``, ``may_bind``), else None. A confirmed token this worker holds answers from
    memory; anything else is decided against the store, a presented token counted first.
    """
    if not state.binds_boxes:
        return None
    presented = environ.get(TOKEN_ENVIRON)
    cache: BindingCache = state.bindings
    if presented is not None and admitted_by_memory(cache, box, presented):
        return None
    scope = None if presented is None else count_attempt(state, box, peer)
    cache.refresh_quietly()
    held = cache.held(box)
    instance = reported_instance(environ.get(INSTANCE_ENVIRON))
    now = time.time()
    if held is not None and matches(held, presented):
        if not held.confirmed and written(lambda: state.store.confirm_binding(
                box, held.token_hash, peer, instance, now)):
            audit(state.redact, "box_binding", "confirmed", f"box {box}", peer,
                  instance=instance)
            cache.refresh_quietly()
        give_back(state, scope)
        return None
    if held is not None and held.bound and (held.confirmed or presented is not None):
        refuse(state, box, peer, presented, now)  # confirmed, or a void token while pending
    give_back(state, scope)  # unbound (a token from before a release: no guess), or pending
    if not may_bind:
        return None
    token = new_token()
    bound = written(lambda: state.store.bind_box(box, token_hash(token), peer, instance, now))
    if bound is None:
        return None  # served unbound, as a pending name is; its next fetch binds it
    if not bound:
        cache.refresh_quietly()  # another worker confirmed it meanwhile
        refuse(state, box, peer, presented, now)
    audit(state.redact, "box_binding", "issued", f"box {box}", peer, instance=instance)
    cache.refresh_quietly()
    return token


def admitted_by_memory(cache: BindingCache, box: str, presented: str) -> bool:
    """Whether the confirmed binding of ``box`` this worker holds admits ``presented``: a
    token it checked before by one lookup, else by its hash (then remembered). False
    decides nothing: the store does (:func:`admit_box`)."""
    if cache.admits(box, presented):
        return True
    held = cache.held(box)
    if held is not None and held.confirmed and matches(held, presented):
        cache.admit(box, presented, held)
        return True
    return False


def count_attempt(state: ServerState, box: str, peer: str | None) -> str:
    """Count a presented token as one attempt of the peer; 429 over its limit."""
    try:
        return claim_attempts(state, peer, "box_token", f"box {box}", overall=False,
                              what="box token")
    except AttemptRefused as refused:
        raise RequestRefused(refused.status, "box_token_attempts", refused.message,
                             refused.headers()) from None


def give_back(state: ServerState, scope: str | None) -> None:
    """A counted token that was no guess gives its attempt back."""
    if scope is not None:
        written(lambda: state.store.release_attempt(scope, give_back_overall=False))


def written(write: Callable[[], T]) -> T | None:
    """A binding's write, or None when the store cannot take it now: a box the memory does
    not refuse is still served, as known boxes are whatever the store does (its next call
    writes again); what cannot be verified without the store was refused before."""
    try:
        return write()
    except StoreError:
        return None


def refuse(state: ServerState, box: str, peer: str | None, presented: str | None,
           now: float) -> NoReturn:
    """A claim of the bound name ``box`` without its token: audited, counted, refused."""
    code = "box_token_required" if presented is None else "box_token_mismatch"
    audit(state.redact, "box_claim", "refused", f"box {box}", peer, why=code)
    written(lambda: state.store.note_binding_conflict(box, peer, now))
    raise RequestRefused(403, code, (
        f"box {box!r} is bound to another box (the first that fetched its config); if this "
        f"box replaced it, an admin releases the binding (the dashboard's Release button, or "
        f"DELETE /admin/api/boxes/{box}/binding) and this box fetches again; if not, someone "
        f"holds the fleet key: rotate it (docs/box-identity.md)"))


def release_binding(state: ServerState, box: str, who: str, peer: str | None,
                    why: str) -> BoxBinding | None:
    """Release ``box``'s binding (a replaced box binds again on its next fetch); audited.
    The binding released, or None when the name was not bound."""
    released = state.store.release_binding(box)
    audit(state.redact, "box_binding", "released" if released else "not_bound", who, peer,
          box=box, why=why, instance=released.instance if released else None)
    state.bindings.refresh()
    return released


def binding_record(binding: BoxBinding) -> dict[str, Any]:
    """What the admin API and the dashboard show of a binding: never its token's hash."""
    return {"state": "confirmed" if binding.confirmed else "pending",
            "bound_at": binding.bound_at, "peer": binding.peer, "instance": binding.instance}
