"""Per-box identity (docs/box-identity.md): a box name is given by llmao, never won.

``fleet.binding`` says how a name binds. ``enrolled``: only through a one-time bootstrap
token an admin or a pool minted for it (:func:`enroll_box`), presented once in
``X-LLMAO-Bootstrap-Token``. ``first_fetch`` (the default): also by the first box that
fetches it with the fleet key, for templates that cannot carry a per-box value. ``off``:
the seed's protocol, no binding. A bound name's holder has a box token (the
``X-LLMAO-Box-Token`` answer header, presented on every later call); a name the push path
first acts on belongs to the controller, and no box holds its token.

Every call for a name is decided here, once, by :func:`decide` (a pure rule of the binding
as the store holds it, the name's enrollment and the claim): the fetch, the box's posts
(its applied report, its turn, its certificate) and the push path's calls. The store runs
the rule inside one transaction that no other binding change interleaves with, on every
worker and instance, so two callers never both win a name. Only hashes of tokens are
kept (a token is 256 random bits, so a fast hash is as safe as a slow one).

A fetch must not read the store (bench P9): each worker keeps every binding in memory
(:class:`~..binding_cache.BindingCache`) and asks the same rule of the binding it holds
(:func:`admitted_by_memory`); what the rule admits there with nothing to write is admitted at
once. Anything else is decided against the store after the attempt is counted per peer in a
limiter scope of the box tokens' own (:mod:`..admin_attempts`), so guessing is bounded and
never spends the admin token's budget.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import (
    BOOTSTRAP_ENV,
    BOOTSTRAP_ENVIRON,
    BOOTSTRAP_HEADER,
    INSTANCE_ENVIRON,
    MAX_INSTANCE,
    TOKEN_BYTES,
    TOKEN_ENVIRON,
)
from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import (
    INSTANCE_HEADER as INSTANCE_HEADER,  # named where identity is decided, as the tests read it
)
from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import (
    TOKEN_HEADER as TOKEN_HEADER,
)
from ansible_collections.llmao.fleet.plugins.module_utils.config_file import BINDING_ENROLLED

from ..admin_attempts import AttemptRefused, claim_attempts, peer_scope, worth_auditing
from ..api_errors import RequestRefused
from ..audit import audit
from ..binding_cache import BindingCache
from ..state import ServerState
from ..store import BindingWrite, BoxBinding, Enrollment, StoreError

# Box and bootstrap tokens are counted per peer in a scope of their own: a box's guesses never
# spend the admin token's budget, nor an admin's typos a box's.
BOX_TOKEN_SCOPE = "box-token"
# Who may call for a name: its box (fetch, or a post), or the controller (the push path).
FETCH, POST, CONTROLLER = "fetch", "post", "controller"
HOLDER_BOX, HOLDER_CONTROLLER = "box", "controller"
# What an enrollment may last: a minute to thirty days.
MIN_ENROLL_S, MAX_ENROLL_S = 60, 30 * 86400


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def new_token() -> str:
    """A fresh box or bootstrap token: 43 URL-safe characters."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def reported_instance(value: str | None) -> str | None:
    """The provider instance id a box reports, when it looks like one."""
    if value and len(value) <= MAX_INSTANCE and value.isascii() and value.isprintable():
        return value
    return None


def same_hash(kept: str, presented: str | None) -> bool:
    return bool(kept) and presented is not None and hmac.compare_digest(kept, presented)


@dataclass(frozen=True)
class Claim:
    """One call for a name, as the rule reads it: the hashes of what it presented, who and
    where from, which kind of call (:data:`FETCH`, :data:`POST`, :data:`CONTROLLER`), the
    binding mode, when, and the hash of the token a binding it makes would hold."""

    box: str
    call: str
    peer: str | None
    instance: str | None
    presented: str | None
    bootstrap: str | None
    enrolled_only: bool
    now: float
    new_hash: str = ""


@dataclass(frozen=True)
class Outcome:
    """What :func:`decide` says of a claim: admitted (handing out the new token when
    ``issued``), or refused with a code."""

    admitted: bool
    issued: bool = False
    confirmed: bool = False
    refusal: str | None = None
    holder_peer: str | None = None


ADMIT = Outcome(True)


def refused(code: str, binding: BoxBinding | None = None) -> tuple[None, Outcome]:
    return None, Outcome(False, refusal=code,
                         holder_peer=binding.peer if binding is not None else None)


def decide(claim: Claim, binding: BoxBinding | None,
           enrollment: Enrollment | None) -> tuple[BindingWrite | None, Outcome]:
    """The one rule of who may act for a name: what to write, and the outcome."""
    if claim.call == CONTROLLER:
        return controller_claim(claim, binding)
    if claim.bootstrap is not None and claim.call == FETCH:
        return redeemed(claim, binding, enrollment)
    if binding is not None and binding.bound:
        return bound_claim(claim, binding)
    if claim.call != FETCH:
        return refused("box_token_required")
    if enrollment is not None and enrollment.expires_at > claim.now:
        return refused("box_not_enrolled")
    if claim.enrolled_only:
        return refused("box_not_enrolled")
    if binding is not None and binding.next_claimant not in (None, instance_claimant(claim)):
        return refused("box_reserved")
    return pending(claim, binding), Outcome(True, issued=True)


def bound_claim(claim: Claim, binding: BoxBinding) -> tuple[BindingWrite | None, Outcome]:
    """A call for a bound name: its token admits it (and confirms a pending binding); a
    pending name is fetched again only by the peer that holds it (its answer was lost)."""
    if same_hash(binding.token_hash, claim.presented):
        if binding.confirmed:
            return None, ADMIT
        confirmed = replace(binding, confirmed=True, bound_at=claim.now, peer=claim.peer,
                            instance=claim.instance or binding.instance)
        return BindingWrite(confirmed), Outcome(True, confirmed=True)
    if binding.confirmed or claim.presented is not None:
        code = "box_token_required" if claim.presented is None else "box_token_mismatch"
        return refused(code, binding)
    if claim.call == FETCH and peer_scope(binding.peer) == peer_scope(claim.peer):
        return pending(claim, binding), Outcome(True, issued=True)
    return refused("box_pending_elsewhere" if claim.call == FETCH else "box_token_required",
                   binding)


def redeemed(claim: Claim, binding: BoxBinding | None,
             enrollment: Enrollment | None) -> tuple[BindingWrite | None, Outcome]:
    """A bootstrap token: the name binds, confirmed at once, to the box presenting it, whoever
    held it before (an admin enrolled the name for this box), and its enrollment is used."""
    if (enrollment is None or enrollment.expires_at <= claim.now
            or not same_hash(enrollment.token_hash, claim.bootstrap)):
        return refused("bootstrap_token_invalid", binding)
    bound = BoxBinding(claim.box, claim.new_hash, True, claim.now, claim.peer, claim.instance,
                       0, HOLDER_BOX, enrollment.pool)
    return (BindingWrite(bound, drop_enrollment=True, revoke_leaves=True),
            Outcome(True, issued=True, confirmed=True))


def controller_claim(claim: Claim,
                     binding: BoxBinding | None) -> tuple[BindingWrite | None, Outcome]:
    """The push path acts on a name: one no box has confirmed becomes the controller's (a
    pending claim is voided), with a token nobody holds; a confirmed name stays as it is."""
    if binding is not None and binding.bound and binding.confirmed:
        return None, ADMIT
    owned = BoxBinding(claim.box, claim.new_hash, True, claim.now, claim.peer, None, 0,
                       HOLDER_CONTROLLER)
    return BindingWrite(owned, revoke_leaves=True), Outcome(True, confirmed=True)


def pending(claim: Claim, binding: BoxBinding | None) -> BindingWrite:
    """A pending binding of the name to the claiming box (its next call confirms it)."""
    return BindingWrite(BoxBinding(claim.box, claim.new_hash, False, claim.now, claim.peer,
                                   claim.instance, 0, HOLDER_BOX,
                                   binding.pool if binding is not None else None))


def instance_claimant(claim: Claim) -> str | None:
    return None if claim.instance is None else f"instance:{claim.instance}"


# ------------------------------------------------------------------ applying the rule


def admit_box(state: ServerState, environ: dict[str, Any], box: str, peer: str | None,
              may_bind: bool) -> str | None:
    """Let a box's call for ``box`` through, or refuse it (403, or 429 over the attempt
    limit). ``may_bind``: the call is a ``GET`` of its config. Returns the box token this
    call hands out when it binds the name, else None."""
    if not state.binds_boxes:
        return None
    presented = environ.get(TOKEN_ENVIRON)
    if environ.get("REQUEST_METHOD") == "HEAD":
        return look(state, box, peer, presented)
    bootstrap = environ.get(BOOTSTRAP_ENVIRON) if may_bind else None
    call = FETCH if may_bind else POST
    if presented is not None and admitted_by_memory(state.bindings, box, call, presented,
                                                    bootstrap):
        return None
    guessed = presented if bootstrap is None else bootstrap
    scope = None if guessed is None else count_attempt(state, box, peer)
    token = new_token()
    claim = Claim(box, call, peer, reported_instance(environ.get(INSTANCE_ENVIRON)),
                  None if presented is None else token_hash(presented),
                  None if bootstrap is None else token_hash(bootstrap),
                  state.fleet.settings.fleet.binding == BINDING_ENROLLED, time.time(),
                  token_hash(token))
    outcome = decided(state, claim)
    if outcome is None:  # the store cannot decide now: what the memory knows decides
        return unstored(state, claim, scope)
    if outcome.refusal is not None:
        refuse(state, claim, outcome)
    give_back(state, scope)
    if outcome.issued or outcome.confirmed:
        audit(state.redact, "box_binding", "confirmed" if outcome.confirmed else "issued",
              f"box {box}", peer, instance=claim.instance,
              **({"by": "bootstrap_token"} if bootstrap is not None else {}))
        state.bindings.refresh_quietly()
    return token if outcome.issued else None


def look(state: ServerState, box: str, peer: str | None, presented: str | None) -> None:
    """A ``HEAD`` of the config hands out nothing (no body, no token) and binds nothing: the
    rule decides it as the fetch it mirrors, on the binding this worker holds."""
    if presented is not None and admitted_by_memory(state.bindings, box, FETCH, presented):
        return
    claim = Claim(box, FETCH, peer, None, None if presented is None else token_hash(presented),
                  None, state.fleet.settings.fleet.binding == BINDING_ENROLLED, time.time())
    _write, outcome = decide(claim, state.bindings.held(box), None)
    if outcome.refusal is not None:
        refuse(state, claim, outcome)


def decided(state: ServerState, claim: Claim) -> Outcome | None:
    """:func:`decide` run by the store, atomically; None when the store cannot run it."""
    try:
        return state.store.decide_binding(
            claim.box, lambda binding, enrollment: decide(claim, binding, enrollment))
    except StoreError:
        return None


def unstored(state: ServerState, claim: Claim, scope: str | None) -> None:
    """The store cannot decide: the rule decides on the binding this worker holds. What it
    refuses is refused; a fetch it would bind is served unbound, as before it bound (the next
    fetch binds it); anything else needs the store (503)."""
    _write, outcome = decide(claim, state.bindings.held(claim.box), None)
    if outcome.refusal is not None:
        refuse(state, claim, outcome)
    if outcome.issued and claim.bootstrap is None:
        give_back(state, scope)
        return None
    raise RequestRefused(503, "store_unavailable", "the state store cannot check this box's "
                                                   "binding now; try again shortly")


def admitted_by_memory(cache: BindingCache, box: str, call: str, presented: str,
                       bootstrap: str | None = None) -> bool:
    """Whether :func:`decide` admits, with nothing to write, a box's call for ``box`` (``call``
    :data:`FETCH` or :data:`POST`, presenting ``presented`` and, on a fetch, ``bootstrap``)
    on the binding this worker holds: the rule asked of memory. False decides nothing: the
    store does (:func:`admit_box`).

    That outcome is a confirmed binding's own token on a call without a bootstrap token, and
    it reads nothing the memory lacks (the enrollment, the peer, the time: only a bootstrap
    token, a pending or an unbound name read them), so the ``None`` and zeros below cannot
    change it (tests/server/test_binding_memory.py). A token so admitted on a binding is
    admitted again by one lookup while that very binding is held."""
    if bootstrap is None and cache.admits(box, presented):
        return True
    held = cache.held(box)
    claim = Claim(box, call, None, None, token_hash(presented),
                  None if bootstrap is None else token_hash(bootstrap), False, 0.0)
    if decide(claim, held, None) != (None, ADMIT):
        return False
    cache.admit(box, presented, held)
    return True


def count_attempt(state: ServerState, box: str, peer: str | None) -> str:
    """Count a presented box or bootstrap token as one attempt of the peer in the box tokens'
    own scope; 429 over its limit."""
    try:
        return claim_attempts(state, peer, "box_token", f"box {box}", overall=False,
                              what="box token", kind=BOX_TOKEN_SCOPE)
    except AttemptRefused as refusal:
        raise RequestRefused(refusal.status, "box_token_attempts", refusal.message,
                             refusal.headers()) from None


def give_back(state: ServerState, scope: str | None) -> None:
    """A counted token that was no guess gives its attempt back."""
    if scope is not None:
        # Not written: the attempt stays counted until its window ends, a bound, not a fault.
        with suppress(StoreError):
            state.store.release_attempt(scope, give_back_overall=False)


REFUSALS = {
    "box_token_required": "box {box!r} is bound (to the box that {how}); this call presents "
                          "no box token",
    "box_token_mismatch": "box {box!r} is bound (to the box that {how}); the box token "
                          "presented is not its token",
    "box_pending_elsewhere": "box {box!r} was claimed by another box a moment ago (peer "
                             "{holder}) and is waiting for that box to confirm it",
    "box_not_enrolled": "box {box!r} binds only through a bootstrap token: an admin enrolls "
                        "it (llmao-server enroll {box} --ttl 1h, or POST "
                        "/admin/api/boxes/{box}/enroll) and the box presents the token once in "
                        f"{BOOTSTRAP_HEADER} ({BOOTSTRAP_ENV})",
    "box_reserved": "box {box!r} was released for another instance (the provider listing's); "
                    "this box does not report that instance id",
    "bootstrap_token_invalid": "the bootstrap token presented for box {box!r} is not its "
                               "enrollment's: wrong, used already, or expired; ask an admin "
                               "for a new one",
}
NEXT_STEP = ("if this box replaced it, an admin releases the binding (the dashboard's Release "
             "button, or DELETE /admin/api/boxes/{box}/binding) or enrolls the name for it; "
             "if not, someone holds the fleet key: rotate it (docs/box-identity.md)")


def refuse(state: ServerState, claim: Claim, outcome: Outcome) -> NoReturn:
    """A claim the rule refused: counted per name, audited once a window and every hundredth
    after, refused (403) with what to do."""
    code = outcome.refusal or "box_token_required"
    held = state.bindings.held(claim.box)
    how = ("the controller pushes to: the push path owns it" if held is not None
           and held.holder == HOLDER_CONTROLLER else "first fetched it or was enrolled for it")
    message = REFUSALS[code].format(box=claim.box, how=how, holder=outcome.holder_peer or "?")
    if code in ("box_token_required", "box_token_mismatch", "box_pending_elsewhere"):
        message += "; " + NEXT_STEP.format(box=claim.box)
    try:
        count = state.store.note_binding_conflict(claim.box, claim.peer, claim.now)
    except StoreError:
        count = 1
    if worth_auditing(count):
        audit(state.redact, "box_claim", "refused", f"box {claim.box}", claim.peer, why=code,
              holder=outcome.holder_peer, refusals=count)
    raise RequestRefused(403, code, message)


# ---------------------------------------------------------- the controller and the admins


def claim_for_controller(state: ServerState, box: str, peer: str | None) -> None:
    """The push path acts on ``box`` (its turn, certificate or applied report): under binding,
    a name no box has confirmed becomes the controller's, so that a copy of the fleet key
    gets nothing of it (docs/box-identity.md)."""
    if not state.binds_boxes:
        return
    claim = Claim(box, CONTROLLER, peer, None, None, None, False, time.time(),
                  token_hash(new_token()))
    try:
        outcome = state.store.decide_binding(
            box, lambda binding, enrollment: decide(claim, binding, enrollment))
    except StoreError as exc:
        raise RequestRefused(503, "store_unavailable", f"the state store cannot bind {box} to "
                                                       f"the controller now: {exc}") from None
    if outcome.confirmed:
        audit(state.redact, "box_binding", "controller", "admin-api", peer, box=box)
        state.bindings.refresh_quietly()


def enroll_box(state: ServerState, box: str, ttl_s: float, pool: str | None, who: str,
               peer: str | None) -> tuple[str, float]:
    """Mint a one-time bootstrap token for ``box`` (replacing any outstanding one): the token,
    shown once and kept only as its hash, and when it expires."""
    token, now = new_token(), time.time()
    expires_at = now + ttl_s
    state.store.enroll(Enrollment(box, token_hash(token), expires_at, pool, now, who))
    audit(state.redact, "box_enroll", "issued", who, peer, box=box, pool=pool,
          ttl_s=round(ttl_s))
    return token, expires_at


def release_binding(state: ServerState, box: str, who: str, peer: str | None, why: str,
                    next_instance: str | None = None) -> BoxBinding | None:
    """Release ``box``'s binding and revoke the leaves llmao issued to it; audited. With
    ``next_instance`` only the box reporting that provider instance id may bind the name
    next (a listing named it). The binding released, or None when the name was not bound."""
    claimant = None if next_instance is None else f"instance:{next_instance}"
    released = state.store.decide_binding(box, lambda binding, _enrolled: release(
        box, claimant, binding, time.time()))
    audit(state.redact, "box_binding", "released" if released else "not_bound", who, peer,
          box=box, why=why, instance=released.instance if released else None,
          next_claimant=claimant)
    state.bindings.refresh()
    return released


def release(box: str, claimant: str | None, binding: BoxBinding | None,
            now: float) -> tuple[BindingWrite | None, BoxBinding | None]:
    """The rule of a release: the name is nobody's (but ``claimant``'s, when named) and its
    leaves are revoked; the binding released, if it was bound."""
    if (binding is None or not binding.bound) and claimant is None:
        return None, None
    gone = BoxBinding(box, "", False, now, None, None, 0, HOLDER_BOX, None, claimant)
    return (BindingWrite(gone, revoke_leaves=True),
            binding if binding is not None and binding.bound else None)


def binding_record(binding: BoxBinding) -> dict[str, Any]:
    """What the admin API and the dashboard show of a binding: never its token's hash."""
    return {"state": "confirmed" if binding.confirmed else "pending",
            "bound_at": binding.bound_at, "peer": binding.peer, "instance": binding.instance,
            "holder": binding.holder, "pool": binding.pool}
