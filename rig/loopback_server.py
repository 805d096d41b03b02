"""Run a test HTTP server in a thread for a ``with`` block, and stop it cleanly after."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from socketserver import BaseServer


@contextmanager
def serving(server: BaseServer, poll_interval: float = 0.5) -> Iterator[BaseServer]:
    """``server`` answering from a daemon thread; shut down, closed and joined on exit.

    Fakes of the services llmao talks to (llmao itself for the box program, the
    providers' listing APIs) share this, so none leaves a listener or thread behind.
    """
    thread = threading.Thread(target=server.serve_forever, args=(poll_interval,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
