"""Item 7 of issue 10: bounded, quiet logs under attack and under a store fault.

- A request without the key, carrying 7 KB headers (a claimed name, an
  ``X-Forwarded-For``, a path), adds less than 1.5 KB to the real server's log.
- When the store cannot be written (a PostgreSQL database turned read-only, a
  real driver error), known boxes keep getting their assignment, writes answer
  503 in the JSON error shape, and each worker logs one line when the failure
  streak starts and one when it ends, never a traceback per flush.
- The recorder backs off while the store refuses writes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from llmao_server.recorder import FLUSH_INTERVAL_S, MAX_RETRY_INTERVAL_S, FetchRecorder
from llmao_server.redaction import SHOWN_LENGTH
from llmao_server.store import SqliteStore, open_store
from rig.postgres import session_cluster
from tests.llmao_process import LlmaoServer
from tests.reliability.admin_http import WORKERS, request
from tests.server.fleet_pair import FLEET_KEY, KNOWN, TOKEN_HEADER, UNKNOWN, box_headers

SEVEN_KB = 7 * 1024
LOG_BUDGET_PER_REQUEST = 1536
STREAK_S = 4.0  # long enough for several failed flushes in every worker

APPLIED = {"revision": "0123456789abcdef", "applied_at": "2026-11-30T12:00:00Z",
           "servers": [{"name": "gemma", "port": 8001, "served_model_name": "gemma"},
                       {"name": "qwen", "port": 8002, "served_model_name": "qwen-served"}]}


def hostile_requests() -> list[tuple[str, dict[str, str | bytes]]]:
    """Requests without the key (or with it and a stranger's name), each with 7 KB to log."""
    big = "x" * SEVEN_KB
    chain = ", ".join(["203.0.113.99"] * (SEVEN_KB // 14))
    return [
        ("/vllm/config", {"X-LLMAO-Host": big}),
        ("/vllm/config", {"X-Forwarded-For": chain}),
        ("/vllm/config", {"X-LLMAO-Host": big, "X-Forwarded-For": big,
                          "Authorization": "Bearer " + big}),
        ("/vllm/config", {"Authorization": f"Bearer {FLEET_KEY}", "X-LLMAO-Host": big}),
        ("/vllm/" + "p" * 4000, {"X-Forwarded-For": big}),
        ("/vllm/config", {"X-LLMAO-Host": ("\u2028" * 2000).encode()}),
    ]


def test_unkeyed_requests_with_7kb_headers_add_little_to_the_log(
        servers: Callable[..., LlmaoServer], tmp_path: Path) -> None:
    server = servers("attacked", str(tmp_path / "state.sqlite3"))
    rounds = 20
    before = server.log_path.stat().st_size
    statuses = set()
    for _ in range(rounds):
        for path, headers in hostile_requests():
            statuses.add(request(server, "GET", path, headers=headers).status)
    assert statuses == {403, 404}, statuses
    count = rounds * len(hostile_requests())
    deadline = time.monotonic() + 5
    while server.log().count("llmao_server.access") < count and time.monotonic() < deadline:
        time.sleep(0.1)
    grown = server.log_path.stat().st_size - before
    assert server.log().count("llmao_server.access") >= count, "every request is logged"
    assert grown / count < LOG_BUDGET_PER_REQUEST, f"{grown / count:.0f} bytes per request"
    assert "x" * (SHOWN_LENGTH + 1) not in server.log()
    lines = [line for line in server.log().splitlines() if "llmao_server.access" in line]
    assert max(len(line.encode()) for line in lines) < LOG_BUDGET_PER_REQUEST


def test_a_read_only_store_still_serves_known_boxes_and_answers_writes_503(
        servers: Callable[..., LlmaoServer], pytestconfig: pytest.Config) -> None:
    cluster = session_cluster(pytestconfig)
    database = cluster.new_database()
    name = database.rsplit("/", 1)[1]
    server = servers("read-only", database)
    first = request(server, "GET", "/vllm/config", headers=box_headers())
    assert first.status == 200
    # The box's name is bound and confirmed (its token presented once) before the store goes
    # read-only: a box's posts need a confirmed binding.
    bound = {**box_headers(), TOKEN_HEADER: first.headers[TOKEN_HEADER]}
    assert request(server, "GET", "/vllm/config", headers=bound).status == 200

    def cut_connections() -> None:
        cluster.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")

    cluster.psql(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    cut_connections()  # new sessions are read-only: every write fails in the driver
    try:
        streak_ends = time.monotonic() + STREAK_S
        fetched = 0
        while time.monotonic() < streak_ends:
            answer = request(server, "GET", "/vllm/config", headers=bound)
            assert answer.status == 200, answer.text
            assert json.loads(answer.text)["host"] == KNOWN
            fetched += 1
            time.sleep(0.05)
        written = request(server, "POST", "/vllm/applied", body=json.dumps(APPLIED),
                          headers={**bound, "Content-Type": "application/json"})
        assert written.status == 503
        assert json.loads(written.text) == {"error": {
            "message": "the server cannot record this now; try again later",
            "type": "unavailable_error", "code": "store_unavailable"}}
        # A stranger needs a read of the store (its approval): 404, or 503 while the
        # worker's connection is being replaced; never a 500.
        assert request(server, "GET", "/vllm/config",
                       headers=box_headers(host=UNKNOWN)).status in {404, 503}
    finally:
        cluster.psql(f"ALTER DATABASE {name} SET default_transaction_read_only = off")
        cut_connections()

    store = open_store(database)
    deadline = time.monotonic() + MAX_RETRY_INTERVAL_S + 5
    while (KNOWN not in store.fetch_times()
           or server.log().count("takes writes again") < server.log().count("cannot write")):
        assert time.monotonic() < deadline, server.log()[-3000:]
        time.sleep(0.2)
    store.close()
    log = server.log()
    assert 1 <= log.count("cannot write") <= WORKERS, log[-3000:]
    assert "Traceback" not in log
    assert cluster.password not in log
    assert fetched > 10


def test_the_recorder_backs_off_and_logs_once_per_streak(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SqliteStore(str(tmp_path / "state.sqlite3"))
    recorder = FetchRecorder(store, interval_s=FLUSH_INTERVAL_S)
    connection = store._connection()
    connection.execute("PRAGMA query_only = ON")  # SQLite itself refuses every write now
    with caplog.at_level("WARNING", logger="llmao_server.recorder"):
        waits = []
        for when in range(1, 16):
            recorder.note_fetch(KNOWN, float(when))
            recorder.flush()
            waits.append(recorder.next_wait_s())
        assert store.fetch_times() == {}
        connection.execute("PRAGMA query_only = OFF")
        recorder.flush()
    assert store.fetch_times() == {KNOWN: 15.0}
    assert waits[0] == 2 * FLUSH_INTERVAL_S and waits[-1] == MAX_RETRY_INTERVAL_S
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    assert "cannot write 1 fetch or check time(s)" in lines[0] and "Traceback" not in caplog.text
    assert "takes writes again after 15 failed flush(es)" in lines[1]
    recorder.close()


def test_the_back_off_doubles_up_to_its_cap() -> None:
    recorder = FetchRecorder(SqliteStore(":memory:"), interval_s=FLUSH_INTERVAL_S)
    waits = []
    for failures in range(12):
        recorder.failures = failures
        waits.append(recorder.next_wait_s())
    assert waits[:4] == [0.5, 1.0, 2.0, 4.0]
    assert waits[-1] == MAX_RETRY_INTERVAL_S
    assert waits == sorted(waits)
