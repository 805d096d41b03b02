"""A step repeated in a thread while a ``with`` block runs: the tests' watchers and loops.

Why one class: a watcher that outlives its test keeps dialling what the test tore down, so
every one of them stops the same way, when its block ends (or at ``stop()``), and joins its
thread before the test goes on.
"""

from __future__ import annotations

import threading
from typing import Self


class Background:
    """``step()`` then a pause of ``pause_s``, again and again, from ``with`` to its end."""

    def __init__(self, name: str, pause_s: float) -> None:
        self.pause_s = pause_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()

    def step(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.pause_s)
