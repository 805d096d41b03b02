"""The test rig: a container engine, the box image, container boxes and the GPU-side doubles.

Tests, the demo and the benchmarks share it. Nothing here ships: it stands in for what this
machine lacks (a GPU, vLLM, rented boxes) with real processes, real Supervisor and real HTTP.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """The rig's scratch folder (`.cache/rig/` at the repo root, git-ignored), created on demand."""
    path = REPO_ROOT / ".cache" / "rig"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def rig_lock(name: str) -> Iterator[None]:
    """Hold an exclusive lock shared by every process using this checkout's rig.

    Several pytest sessions, the demo and the benchmarks may try to start the engine or build the
    image at the same moment; the lock makes the second one wait and then find the work done.
    """
    with open(cache_dir() / f"{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
