"""One HTTP request to llmao, whole within its deadline, with no redirect followed.

urllib alone bounds each socket operation, not the request, and would follow a
redirect with the fleet key: this module closes both gaps for every call the box
program makes (:mod:`.llmao_api` adds the protocol on top).
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.client import HTTPException
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import TOKEN_HEADER

from .json_input import MAX_ANSWER_BYTES

RETRY_AFTER_HEADER = "Retry-After"


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect would carry the Authorization header to another address: refuse it."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class Deadline:
    """When one request must have ended, however slowly llmao (or whoever answers) sends it.

    urllib's timeout bounds each socket operation, not the request: an answer dripped one
    byte per timeout would hold the follow loop for ever. A timer shuts the request's
    connection down at the deadline, which ends whatever read waits on it; it acts on a
    duplicate of the socket, which TLS's wrapping leaves open and only :meth:`end` closes.
    """

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.fired = False
        self.timers: list[threading.Timer] = []
        self.sockets: list[socket.socket] = []

    def watch(self, sock: socket.socket) -> None:
        watched = sock.dup()
        self.sockets.append(watched)
        timer = threading.Timer(max(self.at - time.monotonic(), 0.0), self.fire, (watched,))
        timer.daemon = True
        timer.start()
        self.timers.append(timer)

    def fire(self, sock: socket.socket) -> None:
        self.fired = True
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def end(self) -> None:
        for timer in self.timers:
            timer.cancel()
        for sock in self.sockets:
            sock.close()


class WatchedOpen:
    """An opener's handler whose connections give their socket to the request's Deadline."""

    def do_open(self, http_class, req, **kwargs):
        deadline = getattr(req, "deadline", None)
        if deadline is None:
            return super().do_open(http_class, req, **kwargs)

        def connection(*args, **options):
            made = http_class(*args, **options)
            create = made._create_connection

            def watched(*address, **how):
                sock = create(*address, **how)
                deadline.watch(sock)
                return sock

            made._create_connection = watched
            return made

        return super().do_open(connection, req, **kwargs)


class WatchedHTTPHandler(WatchedOpen, urllib.request.HTTPHandler):
    pass


class WatchedHTTPSHandler(WatchedOpen, urllib.request.HTTPSHandler):
    pass


@functools.lru_cache(maxsize=4)
def build_opener(ca_file: str | None, ca_dir: str | None) -> urllib.request.OpenerDirector:
    """The opener for llmao, made once per trust store.

    A TLS context reads the whole CA store when it is made: about 45 ms of CPU, where a
    follow check answered 304 costs well under one. So it is made once and every check
    reuses it; the trust store the context reads (``SSL_CERT_FILE``, ``SSL_CERT_DIR``,
    the arguments) keys the cache, so a changed one gets a context of its own.
    """
    context = ssl.create_default_context()
    return urllib.request.build_opener(
        WatchedHTTPHandler(), WatchedHTTPSHandler(context=context), NoRedirects())


def http_request(method: str, url: str, headers: Mapping[str, str], body: bytes | None,
                 timeout: float, heard: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One request, whole (connect, headers, body) within ``timeout`` seconds.

    Any HTTP answer is returned as (status, body), its body cut at MAX_ANSWER_BYTES;
    network faults raise, and an answer not whole by the deadline raises TimeoutError.
    The answer's headers of llmao's protocol (a box token it hands out, a Retry-After) go
    into ``heard`` when given, whatever the status.
    """
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
    opener = build_opener(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    deadline = Deadline(timeout)
    request.deadline = deadline
    try:
        try:
            with opener.open(request, timeout=timeout) as answer:
                note_headers(answer.headers, heard)
                status, body = answer.status, answer.read(MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as answer:
            with answer:
                note_headers(answer.headers, heard)
                status, body = answer.code, answer.read(MAX_ANSWER_BYTES)
    except (OSError, HTTPException):
        if not deadline.fired:
            raise
    finally:
        deadline.end()
    if deadline.fired:
        # Cut at the deadline: what was read may look whole (headers cut short, a body
        # ended early) and is not.
        raise TimeoutError(f"no whole answer within {timeout:g} s")
    return status, body


def note_headers(headers: Any, heard: dict[str, str] | None) -> None:
    """Copy the answer headers the box program acts on into ``heard``."""
    if heard is None or headers is None:
        return
    for name in (TOKEN_HEADER, RETRY_AFTER_HEADER):
        value = headers.get(name)
        if value:
            heard[name] = value.strip()
