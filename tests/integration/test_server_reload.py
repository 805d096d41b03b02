"""``llmao-server`` as a service: SIGHUP reloads the fleet files under a real gunicorn with
several workers, a bad new config is refused while the old one keeps serving, approvals
survive; ``--log-format json`` writes one JSON object a line (gunicorn's lines too).

The server runs from the installed entry point on a loopback port; every fetch goes on a
fresh connection, so the kernel spreads them over the workers.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmao_server.store import Approval, SqliteStore
from tests.llmao_process import LlmaoServer, start_llmao_server
from tests.server.fleet_pair import ADMIN_TOKEN, CONFIG, KNOWN, SECRETS, box_headers, write_pair

pytestmark = pytest.mark.slow

WORKERS = 3
ADDED = "203.0.113.77"  # not in the first config, in the second
APPROVED = "192.0.2.50"  # never in config.yaml: an admin's approval lets it fetch
FETCHES = 12  # fresh connections per check: every worker answers some, whatever the order


def fleet_config(folder: Path, hosts: dict[str, list] | None = None) -> dict[str, Any]:
    document = json.loads(json.dumps(CONFIG))
    document["fleet"]["hosts"].update(hosts or {})
    document["server"] = {"state": str(folder / "state.sqlite3")}
    return document


def fetch(server: LlmaoServer, box: str, path: str = "/vllm/config",
          headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    port = int(server.url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or box_headers(host=box))
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def statuses(server: LlmaoServer, box: str) -> set[int]:
    return {fetch(server, box)[0] for _ in range(FETCHES)}


def approved_boxes(server: LlmaoServer) -> dict[str, list[str]]:
    status, body = fetch(server, "", "/admin/api/observations",
                         {"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert status == 200, body
    return json.loads(body)["approved"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[LlmaoServer, Path]]:
    folder = tmp_path / "fleet"
    config_path, models_path = write_pair(folder, fleet_config(folder))
    server = start_llmao_server(Path(config_path), Path(models_path), tmp_path,
                                workers=WORKERS)
    with server:
        yield server, Path(config_path)
    assert not [secret for secret in SECRETS if secret in server.log()]


def test_sighup_reloads_keeps_approvals_and_survives_a_bad_config(served) -> None:
    server, config_path = served
    folder = config_path.parent
    assert statuses(server, KNOWN) == {200} and statuses(server, ADDED) == {404}
    SqliteStore(str(folder / "state.sqlite3")).approve(
        Approval(APPROVED, ("gemma",), "admin", time.time()))
    assert statuses(server, APPROVED) == {200}

    write_pair(folder, fleet_config(folder, {ADDED: [["qwen", 8001]]}))
    server.reload()
    assert "llmao_server.reload: llmao-server: reloaded" in server.log()
    assert statuses(server, ADDED) == {200}, "every worker serves the new config"
    assert statuses(server, KNOWN) == {200}
    assert statuses(server, APPROVED) == {200}
    assert approved_boxes(server) == {APPROVED: ["gemma"]}, "approvals survive a reload"

    write_pair(folder, fleet_config(folder, {ADDED: [["qwen", 8001], ["gemma", 8001]]}))
    server.reload()
    log = server.log()
    assert "reload refused, still serving the files read before" in log
    assert f"{config_path}: fleet.hosts.{ADDED}[1]: duplicate port 8001" in log
    assert "Traceback" not in log
    assert server.process.poll() is None, "a bad config never stops the service"
    assert statuses(server, ADDED) == {200}, "the config in force is the last good one"
    status, body = fetch(server, ADDED)
    assert [entry["port"] for entry in json.loads(body)["servers"]] == [8001]
    assert approved_boxes(server) == {APPROVED: ["gemma"]}


def test_json_log_format_writes_one_object_a_line(tmp_path: Path) -> None:
    folder = tmp_path / "fleet"
    config_path, models_path = write_pair(folder, fleet_config(folder))
    server = start_llmao_server(Path(config_path), Path(models_path), tmp_path, workers=2,
                                options=("--log-format", "json"))
    with server:
        assert fetch(server, KNOWN)[0] == 200
        deadline = time.monotonic() + 10
        while '"path": "/vllm/config"' not in server.log() and time.monotonic() < deadline:
            time.sleep(0.1)
    lines = [json.loads(line) for line in server.log().splitlines() if line.strip()]
    assert all(set(line) >= {"time", "level", "logger", "pid"} for line in lines)
    loggers = {line["logger"] for line in lines}
    assert {"gunicorn.error", "llmao_server.access"} <= loggers
    assert all("message" in line for line in lines if line["logger"] != "llmao_server.access")
    (access,) = [line for line in lines if line.get("path") == "/vllm/config"]
    assert access["logger"] == "llmao_server.access"
    assert access.items() >= {"method": "GET", "path": "/vllm/config", "status": 200,
                              "box": KNOWN, "via": "header", "peer": "127.0.0.1"}.items()
    assert 0 < access["duration_ms"] < 10_000
    assert len({line["pid"] for line in lines}) >= 2  # the arbiter and a worker
    assert not [secret for secret in SECRETS if secret in server.log()]
