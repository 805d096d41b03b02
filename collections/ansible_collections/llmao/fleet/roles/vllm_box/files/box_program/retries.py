"""The one retry loop every call to llmao goes through, bounded two ways.

Network faults, 5xx and a call's "not yet" statuses share one count of attempts with
a capped backoff; llmao's 429 ``Retry-After`` is waited out within one budget per
run. Nested loops once let one certificate request make attempts x attempts calls.
"""

from __future__ import annotations

import re
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from http.client import HTTPException

from .answers import error_code, server_message
from .errors import Refused, Unreachable
from .transport import RETRY_AFTER_HEADER

BACKOFF_CAP_S = 60.0

RETRY_AFTER_RE = re.compile(r"[0-9]{1,10}\Z")
MIN_RATE_WAIT_S = 1


def is_tls_verification_error(exc: BaseException) -> bool:
    reason = getattr(exc, "reason", exc)
    return isinstance(reason, ssl.SSLCertVerificationError)


def describe_network_error(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason if reason is not None else exc) or type(exc).__name__


def with_retries(send: Callable[[], tuple[int, bytes]], attempts: int, backoff_s: float,
                 what: str, say: Callable[[str], None],
                 sleep: Callable[[float], None] = time.sleep, *,
                 heard: dict[str, str] | None = None, rate_wait_s: float = 0.0,
                 again: Iterable[int] = ()) -> tuple[int, bytes]:
    """Call ``send`` until llmao answers for good: one loop, bounded two ways.

    Network errors, 5xx and the statuses in ``again`` (llmao's "not yet") are tried
    ``attempts`` times in all, backing off in between. A 429 whose ``Retry-After`` (read
    from ``heard``, which ``send`` fills) says how long is waited out and costs no attempt
    (llmao said when; asking sooner is only refused again), while this loop's waits stay
    within ``rate_wait_s`` in all: each is a second at least, so they are bounded too. A
    TLS verification failure is not retried: waiting does not fix a CA.
    """
    failures, waited, retried = 0, 0.0, frozenset(again)
    while True:
        if heard is not None:
            heard.clear()
        status, body, problem = attempt_once(send, what)
        wait = retry_after(heard) if status == 429 else None
        if wait is not None:
            rate_limited(wait, rate_wait_s - waited, rate_wait_s, what, body, say)
            waited += wait
            sleep(wait)
            continue
        if status is not None and status < 500 and status not in retried | {429}:
            return status, body
        failures += 1
        if failures >= attempts:
            raise gave_up(what, status, problem, attempts)
        delay = min(backoff_s * 2 ** (failures - 1), BACKOFF_CAP_S)
        again_in = "asking again" if status in retried else "retrying"
        say(f"{what}: {problem}; attempt {failures} of {attempts}, {again_in} in {delay:g} s")
        sleep(delay)


def attempt_once(send: Callable[[], tuple[int, bytes]],
                 what: str) -> tuple[int | None, bytes, str]:
    """One call: its status (None on a network fault), body, and what went wrong in words."""
    try:
        status, body = send()
    except (OSError, HTTPException) as exc:
        if is_tls_verification_error(exc):
            raise Refused(f"{what}: TLS verification failed ({describe_network_error(exc)}); "
                          "give the CA that signs llmao's certificate in SSL_CERT_FILE"
                          ) from None
        return None, b"", describe_network_error(exc)
    if status >= 500:
        return status, body, f"HTTP {status}"
    return status, body, f"HTTP {status}: {server_message(body)}"


def retry_after(heard: Mapping[str, str] | None) -> int | None:
    """The seconds a ``Retry-After`` asks for, or None when there is none or it is not whole
    seconds (an HTTP date, a fraction, a sign: llmao sends none of them)."""
    value = (heard or {}).get(RETRY_AFTER_HEADER, "")
    return max(int(value), MIN_RATE_WAIT_S) if RETRY_AFTER_RE.match(value) else None


def rate_limited(wait: int, left: float, budget: float, what: str, body: bytes,
                 say: Callable[[str], None]) -> None:
    """Say that the box waits ``wait`` s as llmao's 429 asks; Unreachable when that is more
    than what is ``left`` of LLMAO_RETRY_AFTER_MAX_S: no use waiting to be refused again."""
    code = error_code(body) or "rate limited"
    if wait > left:
        raise Unreachable(f"{what}: llmao asks this box to wait {wait} s (429 {code}), more "
                          f"than the {max(left, 0):g} s left of LLMAO_RETRY_AFTER_MAX_S="
                          f"{budget:g}; nothing more was sent: run again later")
    say(f"{what}: llmao asks this box to wait (429 {code}): waiting {wait} s as its "
        "Retry-After says")


def gave_up(what: str, status: int | None, problem: str, attempts: int) -> Unreachable:
    """Why the retries ended, in one message (exit 3)."""
    if status == 503:
        return Unreachable(f"{what}: llmao answered 503 on all {attempts} attempts: fleet.key is "
                           "probably not configured on the server (config.yaml fleet.key empty "
                           "or CHANGE_ME)")
    if status is None or status >= 500:
        return Unreachable(f"{what}: no answer after {attempts} attempts: {problem}")
    return Unreachable(f"{what}: still {problem} after {attempts} attempts")
