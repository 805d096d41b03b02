"""Every error of the API as one JSON shape: ``{"error": {"message", "type", "code"}}``.

A box (or curl) always gets a body it can parse and a message that says what
to do. Faults of our own are logged with their traceback and answered with a
generic 500: the details stay in the log, which is redacted like every line.
A store that cannot be written is not a fault of ours but of the moment: 503.
:func:`error_answer` makes that decision once, for the box API and for the
Flask routes alike.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable, Mapping

from flask import Response
from werkzeug.exceptions import HTTPException

from .state import app_state
from .store import StoreError

log = logging.getLogger(__name__)

JSON = "application/json"
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "unavailable_error",
}


class RequestRefused(Exception):
    """An answer the API gives on purpose: status, a stable ``code``, a message, and any
    headers it needs (``Retry-After`` on a 429)."""

    def __init__(self, status: int, code: str, message: str,
                 headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def error_body(status: int, code: str, message: str) -> bytes:
    error = {"message": message, "type": ERROR_TYPES.get(status, "invalid_request_error"),
             "code": code}
    return json.dumps({"error": error}).encode("utf-8")


def error_answer(exc: BaseException, redact: Callable[[str], str]) -> tuple[int, bytes]:
    """Status and body for any exception: deliberate errors, HTTP errors, and faults."""
    if isinstance(exc, RequestRefused):
        return exc.status, error_body(exc.status, exc.code, exc.message)
    if isinstance(exc, StoreError):  # the database is down, full or read-only: not our bug
        log.warning("%s", redact(f"answered 503: {exc}"))
        return 503, error_body(503, "store_unavailable",
                               "the server cannot record this now; try again later")
    if isinstance(exc, HTTPException) and exc.code is not None and exc.code < 500:
        code = (exc.name or "error").lower().replace(" ", "_")
        return exc.code, error_body(exc.code, code, exc.description or exc.name)
    trace = "".join(traceback.format_exception(exc)).rstrip()
    log.error("%s", redact("unexpected fault:\n" + trace))
    return 500, error_body(500, "internal_error", "internal error; the server log has the details")


def flask_error_handler(exc: Exception) -> Response:
    """The Flask app's one error handler, so its routes answer errors like the box API."""
    status, body = error_answer(exc, app_state().redact)
    headers = exc.headers if isinstance(exc, RequestRefused) else None
    return Response(body, status, mimetype=JSON, headers=headers)
