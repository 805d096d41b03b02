"""A TCP relay that keeps every byte it carries: what anyone on the path to a box would see.

A test dials the relay instead of the box and then asserts what the bytes on the wire do
not hold (a bearer, a prompt), so that "encrypted" is measured rather than assumed.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress


class WireTap:
    """Listens on 127.0.0.1; every connection is relayed to ``target`` and recorded."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.connections = 0
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    @property
    def captured(self) -> bytes:
        with self._lock:
            return b"".join(self._chunks)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                with self._lock:
                    self._chunks.append(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (sink, source):
                with suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self.connections += 1
            for source, sink in ((client, upstream), (upstream, client)):
                thread = threading.Thread(target=self._pump, args=(source, sink), daemon=True)
                thread.start()
                self._threads.append(thread)

    def start(self) -> None:
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self._threads.append(thread)

    def close(self) -> None:
        self.listener.close()


@contextmanager
def tapped(target: tuple[str, int]) -> Iterator[WireTap]:
    """A running tap to ``target`` for a ``with`` block."""
    tap = WireTap(target)
    tap.start()
    try:
        yield tap
    finally:
        tap.close()
