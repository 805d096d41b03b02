"""The access log: one line per request on every path, its fields, no secret, and off at will.

The box API's lines (claim, peer, ``X-Forwarded-For``) are in ``test_errors_and_log.py``;
the JSON lines of a real ``llmao-server`` in ``tests/integration/test_server_reload.py``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from llmao_server.access_log import ACCESS_LOGGER
from llmao_server.app import create_app
from llmao_server.logs import (
    GATHER_S,
    GATHERED_BYTES,
    GATHERED_FILE_BYTES,
    GATHERED_LINES,
    STDERR_FD,
    JsonFormatter,
    RequestLog,
    gathered_bytes,
)
from llmao_server.state import app_state
from tests.server.fleet_pair import ADMIN_TOKEN, FLEET_KEY, SECRETS, box_headers, write_pair


def access_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == ACCESS_LOGGER]


@pytest.mark.parametrize(("method", "path", "headers", "status"), [
    ("GET", "/healthz", {}, 200),
    ("GET", "/metrics", {"Authorization": f"Bearer {ADMIN_TOKEN}"}, 401),
    ("GET", "/admin/api/fleet", {"Authorization": f"Bearer {ADMIN_TOKEN}"}, 200),
    ("POST", "/healthz", {}, 405),
    ("GET", "/no/such/page", {}, 404),
])
def test_every_path_is_logged_once_with_its_fields(
        client: FlaskClient, caplog: pytest.LogCaptureFixture, method: str, path: str,
        headers: dict[str, str], status: int) -> None:
    with caplog.at_level(logging.INFO):
        answer = client.open(path, method=method, headers=headers,
                             environ_base={"REMOTE_ADDR": "192.0.2.7"})
    (record,) = access_records(caplog)
    fields = record.fields
    assert answer.status_code == fields["status"]
    assert fields.items() >= {"method": method, "path": path, "box": None, "via": None,
                              "peer": "192.0.2.7", "xff": None}.items()
    assert 0 <= fields["duration_ms"] < 10_000
    assert record.getMessage().startswith(f"{method} {path} {fields['status']} peer='192.0.2.7'")
    assert record.getMessage().endswith("ms")


def test_a_box_request_names_its_box_and_how_it_claimed_it(
        client: FlaskClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        client.get("/vllm/config", headers=box_headers(xff="198.51.100.1"))
    (record,) = access_records(caplog)
    assert record.fields.items() >= {"method": "GET", "path": "/vllm/config", "status": 200,
                                     "box": "203.0.113.10", "via": "header",
                                     "xff": "198.51.100.1"}.items()


def test_no_secret_of_a_header_a_query_or_a_path_reaches_the_line(
        client: FlaskClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        client.get(f"/admin/api/fleet?token={ADMIN_TOKEN}",
                   headers={"Authorization": f"Bearer {ADMIN_TOKEN}",
                            "Cookie": f"session={FLEET_KEY}",
                            "X-Forwarded-For": f"Bearer {FLEET_KEY}"})
        client.get(f"/dashboard/{FLEET_KEY}")
    records = access_records(caplog)
    assert len(records) == 2
    text = "\n".join(record.getMessage() + json.dumps(record.fields) for record in records)
    assert not [secret for secret in SECRETS if secret in text]
    assert records[1].fields["path"] == "/dashboard/<redacted>"


def test_the_access_log_can_be_switched_off(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    config_path, models_path = write_pair(tmp_path / "fleet")
    app = create_app({"TESTING": True, "LLMAO_CONFIG": config_path, "LLMAO_MODELS": models_path,
                      "LLMAO_STATE": str(tmp_path / "state.sqlite3"),
                      "LLMAO_ACCESS_LOG": False})
    try:
        with caplog.at_level(logging.INFO):
            assert app.test_client().get("/vllm/config", headers=box_headers()).status_code == 200
            assert app.test_client().get("/healthz").status_code == 200
        assert access_records(caplog) == []
    finally:
        app_state(app).close()


def test_a_json_line_holds_the_fields_and_no_message() -> None:
    record = logging.LogRecord(ACCESS_LOGGER, logging.INFO, __file__, 1, "%s", ("GET /",), None)
    record.fields = {"method": "GET", "path": "/", "status": 200}
    line = json.loads(JsonFormatter().format(record))
    assert line.items() >= record.fields.items() and "message" not in line


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_llmao_servers_own_lines_go_straight_to_stderr(
        client: FlaskClient, capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, log_format: str) -> None:
    """What ``llmao-server`` writes (:func:`~llmao_server.logs.log_to_stderr` set up): one
    ``write`` a line, in the chosen format, the same fields."""
    monkeypatch.setattr(RequestLog, "direct", True)
    monkeypatch.setattr(RequestLog, "json", log_format == "json")
    monkeypatch.setattr(logging.getLogger(ACCESS_LOGGER), "level", logging.INFO)
    capfd.readouterr()
    client.get("/vllm/config", headers=box_headers(), environ_base={"REMOTE_ADDR": "192.0.2.7"})
    (line,) = [line for line in capfd.readouterr().err.splitlines() if ACCESS_LOGGER in line]
    if log_format == "json":
        fields = json.loads(line)
        assert fields.items() >= {"level": "INFO", "logger": ACCESS_LOGGER, "method": "GET",
                                  "path": "/vllm/config", "status": 200, "box": "203.0.113.10",
                                  "via": "header", "peer": "192.0.2.7", "xff": None}.items()
        assert {"time", "pid", "duration_ms"} <= set(fields)
    else:
        assert (f"INFO {ACCESS_LOGGER}: GET /vllm/config 200 host='203.0.113.10' via=header "
                "peer='192.0.2.7' xff=None ") in line


def test_a_worker_gathers_its_lines_and_writes_them_together(
        client: FlaskClient, capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a gunicorn worker (:attr:`RequestLog.later` set), lines wait up to
    :data:`GATHER_S` (or until :data:`GATHERED_LINES` wait) and go out together, whole, at most
    :data:`GATHERED_BYTES` a write."""
    scheduled: list[tuple[float, Callable[[], None]]] = []
    writes: list[bytes] = []
    write = os.write

    def spy(fd: int, data: bytes) -> int:
        if fd == STDERR_FD:
            writes.append(bytes(data))
        return write(fd, data)

    def later(seconds: float, call: Callable[[], None]) -> None:
        scheduled.append((seconds, call))

    monkeypatch.setattr(RequestLog, "direct", True)
    monkeypatch.setattr(RequestLog, "later", later)
    monkeypatch.setattr(RequestLog, "gathered_bytes", GATHERED_BYTES)
    monkeypatch.setattr(logging.getLogger(ACCESS_LOGGER), "level", logging.INFO)
    capfd.readouterr()
    monkeypatch.setattr(os, "write", spy)
    for _ in range(3):
        client.get("/vllm/config", headers=box_headers())
    assert writes == [] and [seconds for seconds, _ in scheduled] == [GATHER_S]
    scheduled[0][1]()
    assert len(writes) == 1 and writes[0].count(b"\n") == 3
    more = 2 * GATHERED_BYTES // (len(writes[0]) // 3)
    for _ in range(more):
        client.get("/vllm/config", headers=box_headers())
    assert len(writes) == 1  # no more than GATHERED_LINES wait: made and written by the timer
    for _, flush in scheduled:
        flush()
    assert len(writes) >= 3  # more than GATHERED_BYTES of lines go in more than one write
    for _ in range(GATHERED_LINES):
        client.get("/vllm/config", headers=box_headers())
    assert len(writes) >= 4  # GATHERED_LINES waiting are written without the timer
    for _, flush in scheduled:
        flush()
    monkeypatch.undo()
    assert all(len(data) <= GATHERED_BYTES and data.endswith(b"\n") for data in writes)
    lines = [line for line in capfd.readouterr().err.splitlines() if ACCESS_LOGGER in line]
    assert len(lines) == 3 + more + GATHERED_LINES
    assert all(re.search(r"INFO llmao_server\.access: GET /vllm/config 200 host='[^']+' "
                         r"via=header peer='[^']*' xff=None \d+\.\d{3}ms$", line)
               for line in lines)


def test_lines_gather_into_larger_writes_to_a_file_than_to_a_pipe(tmp_path: Path) -> None:
    """A pipe keeps a write whole up to PIPE_BUF only; a regular file keeps any write whole."""
    reading, writing = os.pipe()
    try:
        assert gathered_bytes(writing) == GATHERED_BYTES
    finally:
        os.close(reading)
        os.close(writing)
    with open(tmp_path / "server.log", "wb") as log_file:
        assert gathered_bytes(log_file.fileno()) == GATHERED_FILE_BYTES > GATHERED_BYTES
    assert gathered_bytes(writing) == GATHERED_BYTES  # closed: nothing to say it is a file
