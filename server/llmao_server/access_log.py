"""The access log: one line per request, every path, written after the answer is made.

A line holds the method, the path, the status, the time taken to make the
answer (``duration_ms``: the app's time, not the client's), the peer, and for
the box API the box name the request claims, how it claimed it and the raw
``X-Forwarded-For``. Nothing else a caller sent is read: no header's value
(``Authorization`` above all), no query string, no body. What a caller did send
(a claimed name, ``X-Forwarded-For``, an odd path) is redacted of the fleet's
secrets and cut short (:mod:`.redaction`), so a request cannot write a secret or
kilobytes into the log.

``--log-format json`` writes each line as a JSON object with those fields
(``method``, ``path``, ``status``, ``duration_ms``, ``box``, ``via``, ``peer``,
``xff``); text lines read ``GET /vllm/config 200 host='…' via=header
peer='…' xff=None 0.08ms``. ``llmao-server --no-access-log`` leaves the layer
out: nothing is written and nothing is spent.

A WSGI layer around the whole app, so that one rule covers the box API, the
admin API and the dashboard; the box API hands its claim over in the environ
(:data:`CLAIM_KEY`) rather than reading the headers twice.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from .logs import RequestLog
from .redaction import Redactor, clipped

ACCESS_LOGGER = "llmao_server.access"
# Where the box API leaves the (name, how) of the request's claim for this layer.
CLAIM_KEY = "llmao.claim"
# HTTP methods are short tokens; a longer one is cut.
SHOWN_METHOD_LENGTH = 16
# A path shown as it is in a text line: printable ASCII, no space or quote, not too long.
PLAIN_PATH = re.compile(r"[!#-&(-~]{1,100}")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

log = RequestLog(logging.getLogger(ACCESS_LOGGER))


class AccessLog:
    """WSGI layer: writes one access line per request that ``app`` answers."""

    def __init__(self, app: WsgiApp, redact: Redactor, plain_paths: Iterable[str] = ()):
        self.app = app
        self.redact = redact
        # Paths known to hold nothing a caller chose (the box API's routes): shown as they are.
        self.plain_paths = frozenset(plain_paths)

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        started = time.perf_counter()
        status = ["500"]  # what gunicorn answers when the app raises

        def start(line: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            status[0] = line
            return start_response(line, headers, exc_info)

        try:
            return self.app(environ, start)
        finally:
            self.write(environ, status[0][:3], time.perf_counter() - started)

    def write(self, environ: dict[str, Any], status: str, seconds: float) -> None:
        path = environ.get("PATH_INFO", "")
        if path not in self.plain_paths:
            path = clipped(self.redact(path))
        name, via = environ.get(CLAIM_KEY, (None, None))
        forwarded = environ.get("HTTP_X_FORWARDED_FOR")
        log.entry({
            "method": environ.get("REQUEST_METHOD", "")[:SHOWN_METHOD_LENGTH],
            "path": path,
            "status": int(status) if status.isdigit() else status,
            "duration_ms": round(seconds * 1000, 3),
            "box": None if name is None else clipped(self.redact(name)),
            "via": via,
            "peer": environ.get("REMOTE_ADDR"),
            "xff": None if forwarded is None else clipped(self.redact(forwarded)),
        }, text_line)


def text_line(fields: dict[str, Any]) -> str:
    """The fields as a text log line; values a caller chose are quoted, so that none can
    pass for another field or line (a line break shows as ``\\n``)."""
    path = fields["path"]
    shown_path = path if PLAIN_PATH.fullmatch(path) else repr(path)
    claim = (f" host={fields['box']!r} via={fields['via']}" if fields["via"] is not None
             else "")
    return (f"{fields['method']} {shown_path} {fields['status']}{claim} "
            f"peer={fields['peer']!r} xff={fields['xff']!r} {fields['duration_ms']}ms")
