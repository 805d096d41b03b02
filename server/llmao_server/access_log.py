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
peer='…' xff=None 0.080ms``. ``llmao-server --no-access-log`` leaves the layer
out: nothing is written and nothing is spent.

A WSGI layer around the Flask app (admin API, dashboard, health, metrics), and
the writer the box API calls (:meth:`AccessLog.write`): the box API stands in
front of this layer, so that a boot storm's fetch passes through no wrapper, and
writes its line with the claim, status and duration it already holds, so that
nothing is read or timed twice on that hot path. One rule covers every line.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Container, Iterable
from typing import Any, NamedTuple

from .logs import RequestLog
from .redaction import Redactor, clipped

ACCESS_LOGGER = "llmao_server.access"
# The claim of a request that names no box: the (name, how) the box API's claims have.
NO_CLAIM: tuple[str | None, str | None] = (None, None)
# HTTP methods are short tokens; a longer one is cut.
SHOWN_METHOD_LENGTH = 16
# A path shown as it is in a text line: printable ASCII, no space or quote, not too long.
PLAIN_PATH = re.compile(r"[!#-&(-~]{1,100}")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class LineHead(NamedTuple):
    """The fields of a line that precede its peer, and their text (:meth:`AccessLog.head`)."""

    method: str
    path: str
    status: int | str
    box: str | None
    via: str | None
    text: str


def access_message(head: str, peer: str | None, xff: str | None, seconds: float) -> str:
    """A line's message: its head (:meth:`AccessLog.head`), then the peer,
    ``X-Forwarded-For`` and the duration."""
    return f"{head} peer={peer!r} xff={xff!r} {seconds * 1000:.3f}ms"


log = RequestLog(logging.getLogger(ACCESS_LOGGER), render=access_message)


class AccessLog:
    """WSGI layer: writes one access line per request that ``app`` answers; the box API
    writes its own through :meth:`write`."""

    def __init__(self, app: WsgiApp, redact: Redactor, box_paths: Iterable[str] = (),
                 box_names: Container[str] = ()):
        self.app = app
        self.redact = redact
        # The box API's routes: they hold nothing a caller chose, so are shown as they are.
        self.box_paths = frozenset(box_paths)
        # Names of the fleet's boxes: each is redacted once per worker, then remembered (a
        # name nobody configured is redacted each time, so a caller cannot fill the memory).
        self.box_names = box_names
        self._shown: dict[str, str] = {}

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
            code = status[0][:3]
            self.write(environ, int(code) if code.isdigit() else code,
                       time.perf_counter() - started)

    def write(self, environ: dict[str, Any], status: int | str, seconds: float,
              claim: tuple[str | None, str | None] = NO_CLAIM) -> None:
        """The line of one answered request; ``claim``: the box it named and how, when it is
        a box API request."""
        self.write_after(self.head(environ.get("REQUEST_METHOD", ""),
                                   environ.get("PATH_INFO", ""), status, claim),
                         environ, seconds)

    def head(self, method: str, path: str, status: int | str,
             claim: tuple[str | None, str | None] = NO_CLAIM) -> LineHead:
        """What a line says before its peer: the same for every answer of one kind to one
        box, so the box API makes it once per box for the fetch a boot storm repeats."""
        plain = path in self.box_paths
        if not plain:
            path = clipped(self.redact(path))
        method = method[:SHOWN_METHOD_LENGTH]
        name, via = claim
        box = None if name is None else self.shown_name(name)
        return LineHead(method, path, status, box, via,
                        text_head(method, path, status, box, via, plain))

    def write_after(self, head: LineHead, environ: dict[str, Any], seconds: float) -> None:
        """The line of a request whose :meth:`head` is known: its peer and
        ``X-Forwarded-For`` are read here."""
        peer = environ.get("REMOTE_ADDR")
        forwarded = environ.get("HTTP_X_FORWARDED_FOR")
        xff = None if forwarded is None else clipped(self.redact(forwarded))
        if log.plain_text():  # the line is the message: no fields to make, and it is made
            log.text(head.text, peer, xff, seconds)  # from its parts when it is written
            return
        log.entry({"method": head.method, "path": head.path, "status": head.status,
                   "duration_ms": round(seconds * 1000, 3), "box": head.box, "via": head.via,
                   "peer": peer, "xff": xff}, access_message(head.text, peer, xff, seconds))

    def shown_name(self, name: str) -> str:
        """A claimed box name as the line shows it: redacted and cut."""
        shown = self._shown.get(name)
        if shown is None:
            shown = clipped(self.redact(name))
            if name in self.box_names:
                self._shown[name] = shown
        return shown


def text_head(method: str, path: str, status: int | str, box: str | None, via: str | None,
              plain: bool = False) -> str:
    """The fields before the peer as the start of a text line (the peer, ``X-Forwarded-For``
    and duration follow); values a caller chose are quoted, so that none can pass for
    another field or line (a line break shows as ``\\n``). ``plain``: the path is known to
    need no quotes."""
    shown_path = path if plain or PLAIN_PATH.fullmatch(path) else repr(path)
    claim = "" if via is None else f" host={box!r} via={via}"
    return f"{method} {shown_path} {status}{claim}"
