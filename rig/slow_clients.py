"""Hostile clients without a key, on loopback: idle, trickling, and pipelining connections.

Shared by the slow-client test and the P6 benchmark. Of :func:`slow_clients`,
half of the connections say nothing after connecting; the other half send the
start of a request and then one more header byte every :data:`TRICKLE_EVERY_S`,
never finishing it. :func:`pipelining_clients` do the opposite: each sends
requests back to back as fast as the server takes them, reading the answers.
Only loopback addresses are dialled.
"""

from __future__ import annotations

import contextlib
import ipaddress
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import CONFIG_PATH

TRICKLE_EVERY_S = 0.5
REQUEST_LINE = f"GET {CONFIG_PATH} HTTP/1.1\r\nHost: llmao\r\n".encode("ascii")
REQUEST_START = REQUEST_LINE + b"X-Slow: "
CONNECT_TIMEOUT_S = 5.0
PIPELINE_STAGGER_S = 0.3
PIPELINED = (REQUEST_LINE + b"\r\n") * 1000


@dataclass
class SlowClients:
    """The open connections; :meth:`still_open` tells how many the server has not closed."""

    sockets: list[socket.socket]
    trickling: list[socket.socket]
    _stop: threading.Event = field(default_factory=threading.Event)

    def still_open(self) -> int:
        """How many of the connections the server has not closed yet."""
        return sum(is_open(sock) for sock in self.sockets)

    def _trickle(self) -> None:
        while not self._stop.wait(TRICKLE_EVERY_S):
            for sock in self.trickling:
                with contextlib.suppress(OSError):  # closed by the server, as it should be
                    sock.send(b"a", socket.MSG_DONTWAIT)


def is_open(sock: socket.socket) -> bool:
    """Whether the server has not closed ``sock`` (a read would not see end-of-file)."""
    # poll, not select: a thousand clients beside the test's own files pass descriptor 1024.
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    try:
        readable = poller.poll(0)
        return not readable or sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except OSError:  # reset by the server
        return False


def require_loopback(host: str) -> None:
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"hostile clients dial loopback only, not {host}")


@contextmanager
def slow_clients(host: str, port: int, count: int) -> Iterator[SlowClients]:
    """Open ``count`` connections to ``host:port`` (loopback only) for the block's duration."""
    require_loopback(host)
    clients = SlowClients([], [])
    trickler = threading.Thread(target=clients._trickle, name="slow-clients", daemon=True)
    try:
        for index in range(count):
            sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
            clients.sockets.append(sock)
            if index % 2:
                sock.sendall(REQUEST_START)
                clients.trickling.append(sock)
        trickler.start()
        yield clients
    finally:
        clients._stop.set()
        if trickler.is_alive():
            trickler.join()
        for sock in clients.sockets:
            sock.close()


@contextmanager
def pipelining_clients(host: str, port: int, count: int) -> Iterator[None]:
    """``count`` connections sending unkeyed requests back to back until the block ends.

    Each starts flooding before the next connects, so that a server whose busy worker
    stopped taking connections gets the next one on another worker, and so on.
    """
    require_loopback(host)
    stop = threading.Event()
    sockets: list[socket.socket] = []
    threads: list[threading.Thread] = []

    def drain(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set() and sock.recv(1 << 16):
                pass

    def flood(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set():
                sock.sendall(PIPELINED)

    try:
        for _ in range(count):
            sockets.append(socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S))
            for work in (drain, flood):
                threads.append(threading.Thread(target=work, args=(sockets[-1],), daemon=True))
                threads[-1].start()
            time.sleep(PIPELINE_STAGGER_S)
        yield
    finally:
        stop.set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in threads:
            thread.join(CONNECT_TIMEOUT_S)
