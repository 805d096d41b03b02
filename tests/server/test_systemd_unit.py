"""The systemd unit in docs/ is valid for systemd and for llmao-server.

``systemd-analyze verify`` checks the unit (keys, sections, an executable
``ExecStart``) where systemd's tools exist; its command line and environment are
checked against the CLI everywhere.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmao_server import cli
from llmao_server.app import SETTINGS_FROM_ENVIRONMENT

UNIT = Path(__file__).resolve().parents[2] / "docs" / "systemd" / "llmao-server.service"
INSTALLED = "/opt/llmao/.venv/bin/llmao-server"
SERVER = Path(sys.executable).with_name("llmao-server")


def service() -> dict[str, list[str]]:
    """The ``[Service]`` section: key → its values in order (systemd repeats keys)."""
    section, found = None, {}
    for line in UNIT.read_text(encoding="utf-8").replace("\\\n", " ").splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    unit = tmp_path / UNIT.name  # the same unit, with ExecStart where this checkout installed it
    unit.write_text(UNIT.read_text(encoding="utf-8").replace(INSTALLED, str(SERVER)))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    assert str(SERVER) in unit.read_text()


def test_the_units_command_line_is_one_llmao_server_accepts(monkeypatch) -> None:
    command = shlex.split(service()["ExecStart"][0])
    assert command[0] == INSTALLED
    environment = dict(line.split("=", 1) for line in service()["Environment"])
    for key in SETTINGS_FROM_ENVIRONMENT:
        monkeypatch.setenv(key, environment[key])
    args = cli.parse_args(command[1:])
    assert (args.config, args.models, args.state) == tuple(
        environment[key] for key in ("LLMAO_CONFIG", "LLMAO_MODELS", "LLMAO_STATE"))
    assert args.log_format == "json" and args.certfile and args.keyfile
