"""`make setup-vllm` on a machine without the CPU torch wheel: nothing installed, the reason kept,
and the real-vLLM tests skipped with it (never silently)."""

from __future__ import annotations

import os
import subprocess

import pytest

from rig import REPO_ROOT
from rig import real_vllm as real

pytestmark = pytest.mark.slow


def test_without_the_cpu_torch_wheel_the_reason_is_kept_for_the_skip(tmp_path, monkeypatch):
    empty = tmp_path / "wheels"
    empty.mkdir()
    venv = tmp_path / "venv"
    done = subprocess.run(["bash", str(REPO_ROOT / "rig" / "vllm_venv.sh"), str(venv)],
                          env={**os.environ, "PIP_FIND_LINKS": str(empty)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "the real-vLLM tests will be skipped" in done.stderr
    assert not (venv / "bin" / "vllm").exists()
    monkeypatch.setenv(real.VENV_ENV, str(venv))
    assert real.said_missing()
    assert real.missing() == ("the real vLLM is not installed: torch==2.13.0+cpu is not in "
                              "pip's find-links folder on this machine (rig/vllm_venv.sh)")


def test_an_environment_never_made_says_to_run_make_setup_vllm(tmp_path, monkeypatch):
    monkeypatch.setenv(real.VENV_ENV, str(tmp_path / "nothing"))
    assert not real.said_missing()
    assert real.missing() == (f"the real vLLM's environment {tmp_path / 'nothing'} is missing: "
                              "run `make setup-vllm`")
