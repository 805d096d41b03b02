# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small JSON-over-HTTP call for the controller-side clients (LiteLLM, llmao's admin API).

Standard library only, so modules need nothing beyond Ansible. Errors carry the
method, URL, status and the error type the other side named, never the bearer or
the body sent.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

MAX_ERROR_BODY = 4096


class ApiError(RuntimeError):
    """The other side could not be reached or refused.

    ``status`` is None when it was unreachable; ``kind`` is the ``error.type`` of a
    JSON error body when it had one (LiteLLM says ``no_db_connection`` for a
    refused key, for instance); ``reason`` is the message without the request,
    for callers that name the service themselves.
    """

    def __init__(self, request: str, reason: str, status: int | None = None,
                 kind: str | None = None):
        super().__init__(f"{request}: {reason}")
        self.reason = reason
        self.status = status
        self.kind = kind


def call_json(method: str, url: str, bearer: str | None, body: Any = None,
              timeout: float = 10.0) -> Any:
    """Send ``body`` as JSON (when given) and decode the JSON answer (None when empty)."""
    headers = {"Accept": "application/json"}
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
            raw = answer.read()
    except urllib.error.HTTPError as exc:
        message, kind = _error_detail(exc)
        raise ApiError(f"{method} {url}", f"HTTP {exc.code}{message}", exc.code, kind) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ApiError(f"{method} {url}", f"unreachable ({reason})") from None
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(f"{method} {url}", "the answer is not JSON") from None


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
