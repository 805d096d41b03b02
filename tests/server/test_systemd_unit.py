"""The systemd unit in docs/ is valid for systemd and for llmao-server, sandboxed, and
``Type=notify`` with a server that does notify.

``systemd-analyze verify`` checks the unit (keys, sections, an executable
``ExecStart``) and ``systemd-analyze security --offline`` scores its sandbox where
systemd's tools exist; its command line and environment are checked against the
CLI everywhere, and the real ``llmao-server`` is started with a ``NOTIFY_SOCKET``
to see it say ``READY=1`` as systemd would hear it.
"""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from llmao_server import cli
from llmao_server.app import SETTINGS_FROM_ENVIRONMENT
from tests.llmao_process import start_llmao_server
from tests.server.fleet_pair import write_pair

UNIT = Path(__file__).resolve().parents[2] / "docs" / "systemd" / "llmao-server.service"
INSTALLED = "/opt/llmao/.venv/bin/llmao-server"
SERVER = Path(sys.executable).with_name("llmao-server")
# The bar: "OK" or better in systemd-analyze's 0 (safe) to 10 (exposed) scale.
MOST_EXPOSURE = 2.0
OVERALL = re.compile(r"Overall exposure level for \S+: (?P<score>\d+\.\d+)")
NOTIFY_WAIT_S = 60.0


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


def local_unit(folder: Path) -> Path:
    """The same unit, with ExecStart where this checkout installed ``llmao-server``."""
    unit = folder / UNIT.name
    unit.write_text(UNIT.read_text(encoding="utf-8").replace(INSTALLED, str(SERVER)))
    assert str(SERVER) in unit.read_text()
    return unit


needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="no systemd-analyze here")


@needs_systemd_analyze
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    done = subprocess.run(["systemd-analyze", "verify", str(local_unit(tmp_path))],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


@needs_systemd_analyze
def test_the_units_sandbox_scores_ok_in_systemd_analyze_security(tmp_path: Path) -> None:
    done = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                           str(local_unit(tmp_path))],
                          capture_output=True, text=True, timeout=60, check=False)
    found = OVERALL.search(done.stdout)
    assert found, done.stdout + done.stderr
    assert float(found["score"]) <= MOST_EXPOSURE, done.stdout


def test_the_unit_waits_for_the_servers_own_ready_notice() -> None:
    assert service()["Type"] == ["notify"]
    assert service().get("NotifyAccess", ["main"]) == ["main"]  # the arbiter is ExecStart's pid


def test_llmao_server_notifies_systemd_once_it_serves(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``Type=notify`` relies on: ``READY=1`` sent to ``$NOTIFY_SOCKET`` (a datagram
    socket), by the arbiter, after the fleet is loaded and the port bound."""
    address = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(address))
        notify.settimeout(NOTIFY_WAIT_S)
        monkeypatch.setenv("NOTIFY_SOCKET", str(address))
        server = start_llmao_server(*map(Path, write_pair(tmp_path / "fleet")), tmp_path,
                                    workers=1)
        try:
            notice = notify.recv(4096).decode()
            assert server.answers()
        finally:
            server.stop()
    assert "READY=1" in notice.splitlines()


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
