"""One attempt limit for every admin credential: the login form and the admin API's bearer.

Both take ``admin.token``, so both draw on one budget kept in the shared store,
``admin.attempts`` (:class:`config_file.AttemptLimits`): so many attempts per
peer and so many from everyone in a window, whichever worker or instance
answers. Each attempt is counted in the store *before* the token is compared,
by one atomic statement per scope, so tries sent in parallel cannot all slip in
under the limit: once a count is over, the token is not even looked at. The
right token gives its attempts back and clears its peer, so reconcile's regular
calls never use the budget up; only the attempts it drew: a trusted peer, never
counted overall, gives none back there (else each of its calls would hand a
spread guesser one more try). The overall limit bounds guessing from many
addresses; it also means such a spread attack locks everyone out until its
window ends, which is the price of a bound, except the ``trusted_peers`` (the
controllers reconcile runs on): the overall limit neither counts nor stops
them, their own limit still does.

The peer is the TCP peer (an IPv6 peer counts by its /64, which one host
usually holds whole): ``X-Forwarded-For`` is whatever a caller writes, so
trusting it would let one caller try without limit.

An attempt the store cannot count is refused with 503: counting nothing would
be an unlimited try. Wrong tokens are audited one line each (the limits bound
them); refusals once when a window closes and every hundredth after.
"""

from __future__ import annotations

import hmac
import ipaddress
import time

from .audit import audit
from .state import ServerState
from .store import OVERALL_SCOPE, StoreError

AUDIT_EVERY = 100
IPV6_PEER_PREFIX = 64


class AttemptRefused(Exception):
    """The token was not compared: over a limit (429) or not countable (503)."""

    def __init__(self, status: int, message: str, retry_after_s: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        """``Retry-After`` when the refusal says how long to wait."""
        return {} if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}


def peer_scope(address: str | None) -> str:
    """The budget a peer address draws on: itself, or its /64 for IPv6."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return address or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/{IPV6_PEER_PREFIX}", strict=False))
    return str(ip)


def admin_token_matches(state: ServerState, presented: str, peer: str | None, action: str,
                        who: str = "-") -> bool:
    """Whether ``presented`` is ``admin.token``, counted against both limits first.

    Raises :class:`AttemptRefused` instead of comparing when a limit is reached or
    the store cannot count the attempt. ``action`` and ``who`` name it in the audit log.
    A peer over its own limit is not counted overall: one caller alone never locks
    everybody out.
    """
    counted_overall = not state.fleet.settings.admin.attempts.trusts(peer)
    scope = claim_attempts(state, peer, action, who)
    expected = (state.fleet.settings.admin.token or "").encode("utf-8")
    if hmac.compare_digest(presented.encode("utf-8"), expected):
        state.store.release_attempt(scope, give_back_overall=counted_overall)
        return True
    audit(state.redact, action, "refused", who, peer, why="wrong token")
    return False


def claim_attempts(state: ServerState, peer: str | None, action: str, who: str = "-",
                   overall: bool = True, what: str = "admin token", kind: str = "") -> str:
    """Count one credential attempt from ``peer`` (and from everyone, when ``overall``),
    before the credential is looked at; the peer's scope, for
    :meth:`~.store.StateStore.release_attempt` when it was right. ``kind`` names a budget
    of its own (box tokens count apart from the admin token). Raises
    :class:`AttemptRefused` over a limit or when the store cannot count."""
    limits = state.fleet.settings.admin.attempts
    scope = f"{kind}:{peer_scope(peer)}" if kind else peer_scope(peer)
    scopes = [(scope, limits.per_peer, "this address")]
    if overall and not limits.trusts(peer):
        scopes.append((OVERALL_SCOPE, limits.overall, "all addresses"))
    for counted, limit, whose in scopes:
        now = time.time()
        try:
            attempts, since = state.store.claim_attempt(counted, now, limits.window_s)
        except StoreError as exc:
            audit(state.redact, action, "refused", who, peer, why=f"not counted: {exc}")
            raise AttemptRefused(503, f"the state store cannot count {what} attempts now, "
                                      "so none is accepted; try again when it is writable"
                                 ) from None
        if attempts > limit:
            if worth_auditing(attempts - limit):
                audit(state.redact, action, "refused", who, peer,
                      why=f"attempt limit: {attempts} from {whose} in the window")
            wait_s = max(1, round(since + limits.window_s - now))
            raise AttemptRefused(429, f"too many {what} attempts from {whose}: try again "
                                      f"in {max(1, round(wait_s / 60))} min", wait_s)
    return scope


def worth_auditing(over: int) -> bool:
    """The first refusal of a window, then every :data:`AUDIT_EVERY`-th: bounded lines."""
    return over == 1 or over % AUDIT_EVERY == 0
