"""``ansible-test sanity`` and the collection's unit tests pass on every ansible-core release
the collection claims (``requires_ansible``), each in its own environment, set up from PyPI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scripts.ansible_core_matrix import claimed_releases, runtime_releases

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ansible_core_matrix.py"


def test_the_claimed_range_is_closed_and_read_as_releases() -> None:
    assert claimed_releases(">=2.17.0,<2.20.0") == ["2.17", "2.18", "2.19"]
    assert claimed_releases(">=2.18,<=2.18.99") == ["2.18"]
    with pytest.raises(SystemExit, match="no upper bound"):
        claimed_releases(">=2.17.0")


@pytest.mark.slow
@pytest.mark.parametrize("release", runtime_releases())
def test_collection_passes_sanity_and_units(release: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--core", release], capture_output=True,
                          text=True, timeout=1800, check=False)
    problems = [line for line in (done.stdout + done.stderr).splitlines()
                if line.startswith(("ERROR", "FATAL", "FAILED", "failed:"))]
    assert done.returncode == 0, "\n".join(problems[-60:]) or done.stderr[-3000:]
