"""ansible-lint passes with the production profile on the repository's Ansible content.

Settings in ``.ansible-lint`` at the repository root (offline: Galaxy is never asked for
anything). The same run as ``make lint``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.slow
def test_ansible_lint_production_profile_is_clean(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "NO_COLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local")}
    done = subprocess.run([str(BIN / "ansible-lint"), "--profile", "production", "--nocolor"],
                          cwd=ROOT, env=env, text=True, capture_output=True, timeout=600,
                          check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "Profile 'production' was required, and it passed" in output, output[-2000:]
