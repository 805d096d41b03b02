"""The box program run as a box runs it: its own process, its own environment, a time limit.

The reliability tests judge how it ends (exit code, no traceback, quickly), so
it runs for real rather than imported; a hang is a failure, not a stuck suite.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.unit.box_program.helpers import INSTALL_SET, Box

TIME_LIMIT_S = 20.0


@dataclass(frozen=True)
class Ending:
    rc: int
    out: str
    err: str
    seconds: float

    @property
    def clean(self) -> bool:
        """Ended by its own decision: no traceback, and a refusal says why on one line."""
        if "Traceback" in self.out + self.err:
            return False
        return self.rc in (0, 1) or self.err.startswith("install_set: ")


def run_box(box: Box, *args: str, env: dict | None = None) -> Ending:
    """``install_set.py ARGS`` with the box's environment (plus ``env``), never inherited."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(INSTALL_SET), *args], env=box.env(**(env or {})),
                          capture_output=True, timeout=TIME_LIMIT_S, check=False)
    return Ending(done.returncode, done.stdout.decode("utf-8", "replace"),
                  done.stderr.decode("utf-8", "replace"), time.monotonic() - started)


def dry_run(box: Box, payload: bytes, name: str = "payload.json") -> Ending:
    """``--dry-run --payload FILE`` on these exact bytes."""
    path = Path(box.root) / name
    path.write_bytes(payload)
    return run_box(box, "--dry-run", "--payload", str(path))
