"""Idle and trickling connections to a server on loopback, as an attacker without a key holds.

Shared by the slow-client test and the P6 benchmark. Half of the connections
say nothing after connecting; the other half send the start of a request
(without the key) and then one more header byte every :data:`TRICKLE_EVERY_S`,
never finishing it. Only loopback addresses are dialled.
"""

from __future__ import annotations

import contextlib
import ipaddress
import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

TRICKLE_EVERY_S = 0.5
REQUEST_START = b"GET /vllm/config HTTP/1.1\r\nHost: llmao\r\nX-Slow: "
CONNECT_TIMEOUT_S = 5.0


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
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return not readable or sock.recv(1, socket.MSG_PEEK) != b""
    except OSError:  # reset by the server
        return False


@contextmanager
def slow_clients(host: str, port: int, count: int) -> Iterator[SlowClients]:
    """Open ``count`` connections to ``host:port`` (loopback only) for the block's duration."""
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"slow clients dial loopback only, not {host}")
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
