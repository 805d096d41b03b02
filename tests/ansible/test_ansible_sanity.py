"""``ansible-test sanity`` on the collection passes, set up with nothing but PyPI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ansible_test_sanity.py"


@pytest.mark.slow
def test_collection_passes_ansible_test_sanity() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=1800, check=False)
    problems = [line for line in (done.stdout + done.stderr).splitlines()
                if line.startswith(("ERROR", "FATAL"))]
    assert done.returncode == 0, "\n".join(problems[-60:]) or done.stderr[-3000:]
