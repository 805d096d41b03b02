# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one JSON-over-HTTP call of the controller-side clients (LiteLLM, llmao's admin API,
the provider listings).

Standard library only, so modules need nothing beyond Ansible. Errors carry the
method, URL, status and the error type the other side named, never the bearer or
the body sent.

Every call carries a credential, so a redirect is never followed: urllib would
resend the ``Authorization`` header to whatever host the ``Location`` names, and
an ``https`` URL could be sent on as plain ``http``. A 3xx is an error that names
both URLs, stripped of any user, password or query.
"""

from __future__ import annotations

import email.utils
import functools
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

MAX_ERROR_BODY = 4096
# The largest answer read: LiteLLM's /model/info or a provider listing of a big fleet fits
# many times over, and a hostile or broken server cannot fill the controller's memory.
MAX_ANSWER_BYTES = 64 * 2**20
SCHEMES = ("http", "https")


class HttpCallError(RuntimeError):
    """The other side could not be reached or refused.

    ``status`` is None when it was unreachable; ``kind`` is the ``error.type`` of a
    JSON error body when it had one (LiteLLM says ``no_db_connection`` for a
    refused key, for instance); ``reason`` is the message without the request,
    for callers that name the service themselves; ``retry_after`` is how many
    seconds the other side asked to wait before the next call (``Retry-After``,
    or the IETF ``RateLimit`` fields RunPod sends), None when it did not say.
    """

    def __init__(self, request: str, reason: str, status: int | None = None,
                 kind: str | None = None, retry_after: float | None = None):
        super().__init__(f"{request}: {reason}")
        self.reason = reason
        self.status = status
        self.kind = kind
        self.retry_after = retry_after


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Hand every 3xx back as the error it is instead of following it."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


@functools.cache
def _opener() -> urllib.request.OpenerDirector:
    """Built once: building one reads the proxy settings of the whole environment, and a
    first reconcile pass of 300 servers makes 300 calls (its handlers keep no state)."""
    return urllib.request.build_opener(_RefuseRedirects())


def shown_url(url: str) -> str:
    """``url`` fit for a message: scheme, host, port and path only (no user, password, query)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def call_json(method: str, url: str, bearer: str | None, body: Any = None,
              timeout: float = 10.0) -> Any:
    """Send ``body`` as JSON (when given) and decode the JSON answer (None when empty)."""
    request_name = f"{method} {shown_url(url)}"
    if urllib.parse.urlsplit(url).scheme not in SCHEMES:
        raise HttpCallError(request_name, "the URL must be http:// or https://")
    sent = {"Accept": "application/json"}
    if bearer:
        sent["Authorization"] = f"Bearer {bearer}"
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        sent["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with _opener().open(request, timeout=timeout) as answer:
            raw = answer.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        with exc:
            if 300 <= exc.code < 400:
                raise _redirect_error(request_name, exc) from None
            message, kind = _error_detail(exc)
        if bearer:
            message = message.replace(bearer, "***")
        raise HttpCallError(request_name, f"HTTP {exc.code}{message}", exc.code, kind,
                            retry_after(exc.headers)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise HttpCallError(request_name, f"unreachable ({reason})") from None
    if len(raw) > MAX_ANSWER_BYTES:
        raise HttpCallError(request_name, f"the answer is over {MAX_ANSWER_BYTES} bytes")
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise HttpCallError(request_name, "the answer is not JSON") from None
    except RecursionError:
        raise HttpCallError(request_name, "the answer is nested too deeply to be read") from None


class JsonService:
    """A JSON API at ``url`` that takes one bearer: what LiteLLM's and llmao's clients share.

    Each client turns :class:`HttpCallError` into its own error, since only it can
    tell the operator which credential to check.
    """

    def __init__(self, url: str, bearer: str, timeout: float = 15.0):
        self.url = url.rstrip("/")
        self._bearer = bearer
        self.timeout = timeout

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """:func:`call_json` on ``path`` of this service, with its bearer and timeout."""
        return call_json(method, self.url + path, self._bearer, body, self.timeout)


# A parameter of one window in the IETF ``RateLimit`` field: ``r`` remaining, ``t`` seconds left.
# ASCII digits only: ``\d`` and ``str.isdigit`` take "²" or "١٢", which float() refuses.
_RATELIMIT_PARAM = re.compile(r';\s*([a-z]+)=\s*"?([0-9]{1,9})(?![0-9])"?')
_SECONDS = re.compile(r"[0-9]{1,9}")


def retry_after(headers: Any) -> float | None:
    """Seconds an error answer asks the caller to wait, or None when it does not say.

    ``Retry-After`` (seconds or an HTTP date) wins; otherwise the IETF ``RateLimit``
    field (``"minute";r=0;t=30, "hour";r=7;t=1800``): the longest ``t`` of a window
    with nothing remaining, or the older ``RateLimit-Reset: 30``. Never raises: it runs
    on every error answer, and what it cannot read is None, never the caller's error.
    """
    if headers is None:
        return None
    given = str(headers.get("Retry-After") or "").strip()
    if _SECONDS.fullmatch(given):
        return float(given)
    if given:
        try:
            when = email.utils.parsedate_tz(given)
            if when is not None:
                return max(0.0, email.utils.mktime_tz(when) - time.time())
        except (ValueError, OverflowError, TypeError, IndexError):
            pass
    exhausted = []
    for window in str(headers.get("RateLimit") or "").split(","):
        params = dict(_RATELIMIT_PARAM.findall(window))
        if params.get("r") == "0" and "t" in params:
            exhausted.append(float(params["t"]))
    if exhausted:
        return max(exhausted)
    reset = str(headers.get("RateLimit-Reset") or "").strip()
    return float(reset) if _SECONDS.fullmatch(reset) else None


def _redirect_error(request_name: str, exc: urllib.error.HTTPError) -> HttpCallError:
    location = exc.headers.get("Location") if exc.headers else None
    target = f" to {shown_url(location)}" if location else ""
    return HttpCallError(request_name, f"HTTP {exc.code} redirect{target} not followed: the "
                         "credential is never sent on; configure the final URL", exc.code)


def _error_detail(exc: urllib.error.HTTPError) -> tuple[str, str | None]:
    """A short reason (``": ..."``) and the error type from a JSON error body, if any."""
    try:
        payload = json.loads(exc.read(MAX_ERROR_BODY) or b"{}")
    except (ValueError, OSError):
        return "", None
    if not isinstance(payload, dict):
        return "", None
    error = payload.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else error or payload.get("detail")
    text = f": {str(message)[:200]}" if message else ""
    return text, kind if isinstance(kind, str) else None
