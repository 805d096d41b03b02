# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small JSON-over-HTTP call for the controller-side clients (LiteLLM, llmao's admin API).

Standard library only, so modules need nothing beyond Ansible. Errors carry the
method, URL and status, never the bearer or the body sent.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class ApiError(RuntimeError):
    """The other side could not be reached or refused; ``status`` is None when unreachable."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


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
        detail = _error_detail(exc)
        raise ApiError(f"{method} {url}: HTTP {exc.code}{detail}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ApiError(f"{method} {url}: unreachable ({reason})") from None
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(f"{method} {url}: the answer is not JSON") from None


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """A short reason from a JSON error body, if the server gave one."""
    try:
        payload = json.loads(exc.read(4096) or b"{}")
    except (ValueError, OSError):
        return ""
    error = payload.get("error") if isinstance(payload, dict) else None
    message = error.get("message") if isinstance(error, dict) else error or payload.get("detail")
    return f": {str(message)[:200]}" if message else ""
