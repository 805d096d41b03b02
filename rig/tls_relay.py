"""A hostile relay on a box's address: what a network between reconcile and a box can do to
talk it down from TLS to plain HTTP (docs/box-tls.md, "No downgrade").

It listens where the box is dialled and stands in front of the real box, moved elsewhere:

- a TLS hello is never let through. ``Hello.CLOSE`` reads it and closes the connection (the
  client sees an EOF in the handshake, which any broken path can also cause);
  ``Hello.ANSWER_HTTP`` answers it with an HTTP error, as a server that speaks no TLS does
  (OpenSSL reads those bytes as a wrong version: the one sign a probe may take for plain HTTP);
- a plain HTTP connection is relayed to the real box over TLS, without verifying it (the
  relay terminates both sides, as an attacker who wants the bearer does). It counts the
  requests that carried an ``Authorization: Bearer`` header in clear, and never keeps the
  header's value.

Used as a context manager; every thread it starts is a daemon, and it stops its listener
and open connections when the block ends.
"""

from __future__ import annotations

import socket
import socketserver
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from enum import Enum

TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a ClientHello
RECORD_HEADER = 5
READ_TIMEOUT_S = 5.0
CHUNK = 1 << 16
# What a server speaking no TLS says to a ClientHello (what uvicorn, say, answers).
PLAIN_ANSWER = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
                b"Content-Length: 11\r\nConnection: close\r\n\r\nBad Request")
BEARER_HEADER = b"\r\nauthorization: bearer "


class Hello(Enum):
    """What the relay does to a TLS ClientHello."""

    CLOSE = "close"              # read it, then close: an EOF in the handshake
    ANSWER_HTTP = "answer_http"  # answer it in plain HTTP: a server with no TLS


@dataclass
class Seen:
    """What went through the relay (counts only: no byte of a request is kept)."""

    hellos: int = 0              # TLS ClientHellos stopped
    plain_connections: int = 0   # plain connections relayed to the box
    bearer_requests: int = 0     # plain requests that carried a bearer in clear
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, what: str, more: int = 1) -> None:
        with self.lock:
            setattr(self, what, getattr(self, what) + more)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _stop_hello(client: socket.socket, hello: Hello) -> None:
    """Consume the whole hello record (so a close is a clean FIN, not a reset), then
    close or answer it in HTTP."""
    header = _read_exactly(client, RECORD_HEADER)
    if len(header) == RECORD_HEADER:
        _read_exactly(client, int.from_bytes(header[3:5], "big"))
    if hello is Hello.ANSWER_HTTP:
        client.sendall(PLAIN_ANSWER)
    client.shutdown(socket.SHUT_RDWR)


class _Requests:
    """Counts plain requests carrying a bearer across chunk boundaries, keeping only the
    tail it needs to see a header split between two reads."""

    def __init__(self, seen: Seen):
        self.seen, self.tail = seen, b"\r\n"

    def read(self, chunk: bytes) -> None:
        text = self.tail + chunk.lower()
        self.seen.count("bearer_requests", text.count(BEARER_HEADER))
        self.tail = text[-(len(BEARER_HEADER) - 1):]


def _pipe(source: socket.socket, sink: socket.socket, requests: _Requests | None) -> None:
    """Copy ``source`` to ``sink`` until either side ends, then end both."""
    try:
        while chunk := source.recv(CHUNK):
            if requests is not None:
                requests.read(chunk)
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def _relay_plain(client: socket.socket, upstream: tuple[str, int], seen: Seen) -> None:
    """The client speaks plain HTTP: dial the box over TLS (unverified) and relay both ways."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    seen.count("plain_connections")
    with context.wrap_socket(socket.create_connection(upstream, READ_TIMEOUT_S)) as box:
        box.settimeout(None)
        client.settimeout(None)
        back = threading.Thread(target=_pipe, args=(box, client, None), daemon=True)
        back.start()
        _pipe(client, box, _Requests(seen))
        back.join(READ_TIMEOUT_S)


def _handler(hello: Hello, upstream: tuple[str, int], seen: Seen) -> type:
    class Relay(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            client: socket.socket = self.request
            client.settimeout(READ_TIMEOUT_S)
            try:
                first = client.recv(1, socket.MSG_PEEK)
                if not first:
                    return
                if first[0] == TLS_HANDSHAKE:
                    seen.count("hellos")
                    _stop_hello(client, hello)
                else:
                    _relay_plain(client, upstream, seen)
            except OSError:
                pass

    return Relay


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    block_on_close = False


@contextmanager
def tls_relay(listen: tuple[str, int], upstream: tuple[str, int],
              hello: Hello) -> Iterator[Seen]:
    """A relay on ``listen`` in front of the box at ``upstream`` (which serves TLS) for the
    block; yields what it saw so far."""
    seen = Seen()
    server = _Server(listen, _handler(hello, upstream, seen))
    thread = threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(READ_TIMEOUT_S)
