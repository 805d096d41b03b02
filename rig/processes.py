"""Child processes the rig starts: stopping them by PID, politely first, and forking a few.

Every service the tests, the demo and the benchmarks start as a child (stub
vLLM, LiteLLM, llmao-server) stops the same way, so a test never leaves one
running or a zombie behind.
"""

from __future__ import annotations

import multiprocessing
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self


def stop_child(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to the child's PID, SIGKILL if it is still there after ``timeout`` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Stoppable(Protocol):
    def stop(self) -> None: ...


def stop_all(*services: Stoppable | None) -> None:
    """Stop each service a test started, in order; None stands for one it never got to start."""
    for service in services:
        if service is not None:
            service.stop()


def run_forked(target: Callable[..., Any], argsets: Sequence[tuple[Any, ...]],
               timeout: float) -> list[int | None]:
    """Run ``target(*args)`` for every argset in forked processes, all at once; their exit
    codes (None for one still running after ``timeout`` seconds, which is then killed)."""
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=target, args=args) for args in argsets]
    for child in children:
        child.start()
    codes = []
    for child in children:
        child.join(timeout)
        codes.append(child.exitcode)
        if child.exitcode is None:
            child.kill()
            child.join()
    return codes


class ChildService:
    """What a service started as a child holds in common: its log, and a stop that runs once.

    A dataclass mixing it in declares ``process``, ``log_path`` and ``_stopped`` (False at
    first) and may set ``stop_timeout_s``; it is then a context manager that stops on leaving.
    """

    process: subprocess.Popen[bytes]
    log_path: Path
    _stopped: bool
    stop_timeout_s: ClassVar[float] = 30.0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM to its PID, then SIGKILL if it has not gone within ``stop_timeout_s``."""
        if self._stopped:
            return
        self._stopped = True
        stop_child(self.process, self.stop_timeout_s)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
