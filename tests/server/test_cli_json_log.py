"""With ``--log-format json`` every line ``llmao-server`` writes is JSON from the first one:
the start's warnings and refusals too, so that ``journalctl -u llmao-server -o cat | jq .``
(docs/running-the-server.md) never stops at a plain-text line. The real command, started
and stopped by its PID."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from rig.boxes import free_port
from rig.processes import stop_child
from tests.server.fleet_pair import config, write_pair

LLMAO_SERVER = Path(sys.executable).with_name("llmao-server")
START_S = 60.0


def json_lines(text: str) -> list[dict]:
    """Each stderr line as JSON; a line that is not JSON fails the test, naming it."""
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not JSON: {line!r}\nin:\n{text}") from None
    return lines


def test_the_start_warnings_are_json_lines(tmp_path: Path) -> None:
    hosts = {"203.0.113.10": [["gemma", 8001, "gemma", 40001]]}
    config_path, models_path = write_pair(tmp_path / "fleet", config(hosts=hosts,
                                                                     key="CHANGE_ME"))
    log = tmp_path / "stderr.log"
    with open(log, "wb") as err:
        process = subprocess.Popen(
            [str(LLMAO_SERVER), "--config", config_path, "--models", models_path,
             "--bind", f"127.0.0.1:{free_port()}", "--workers", "1", "--log-format", "json",
             "--state", str(tmp_path / "state.sqlite3")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + START_S
        while "Booting worker" not in log.read_text() and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            time.sleep(0.2)
    finally:
        stop_child(process, 30.0)
    lines = json_lines(log.read_text())
    assert lines[0]["level"] == "WARNING", lines[0]
    warnings = [line["message"] for line in lines if line["level"] == "WARNING"]
    assert any("the fourth element (public port) is deprecated" in text for text in warnings)
    assert any("fleet.key is missing, empty or CHANGE_ME" in text for text in warnings)
    assert any("Booting worker" in line.get("message", "") for line in lines)


def test_a_refusal_is_a_json_line(tmp_path: Path) -> None:
    config_path, models_path = write_pair(tmp_path / "fleet")
    done = subprocess.run([str(LLMAO_SERVER), "--config", config_path, "--models",
                           models_path, "--bind", "127.0.0.1:1", "--workers", "0",
                           "--log-format", "json"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2
    (line,) = json_lines(done.stderr)
    assert line["level"] == "ERROR" and "--workers must be at least 1" in line["message"]
