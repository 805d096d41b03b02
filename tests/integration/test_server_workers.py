"""The real ``llmao-server``: two gunicorn workers behave as one server, over HTTP and HTTPS.

Each test starts the installed entry point on a free loopback port, talks to it
over real sockets, reads the state file it writes, and stops it by its PID.
Which worker answered a request is read from the pid in its log line.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmao_server.logs import GATHER_S
from llmao_server.store import Approval, SqliteStore
from tests.server.fleet_pair import (
    ADMIN_TOKEN,
    SECRETS,
    TOKEN_HEADER,
    UNKNOWN,
    box_headers,
    config,
    write_pair,
)

SERVER = Path(sys.executable).with_name("llmao-server")
START_TIMEOUT_S = 30.0
LINE = re.compile(r"\[(?P<pid>\d+)\] INFO llmao_server\.access: GET /vllm/config "
                  r"(?P<status>\d{3}) host='(?P<host>[^']*)'")
KNOWN_BOXES = [f"10.20.0.{index}" for index in range(1, 41)]


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    log: Path
    state: Path
    tls: ssl.SSLContext | None

    def connect(self) -> http.client.HTTPConnection:
        if self.tls is None:
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=10, context=self.tls)

    def fetch(self, box: str) -> int:
        """One GET /vllm/config on a fresh connection, as a booting box makes it."""
        connection = self.connect()
        try:
            connection.request("GET", "/vllm/config", headers=box_headers(host=box))
            answer = connection.getresponse()
            answer.read()
            return answer.status
        finally:
            connection.close()

    def stop(self) -> int:
        os.kill(self.process.pid, signal.SIGTERM)
        return self.process.wait(30)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(tmp_path: Path, tls: tuple[Path, Path, Path] | None = None,
          boxes: list[str] = KNOWN_BOXES, rollout: dict | None = None) -> Server:
    """Run llmao-server for ``boxes`` with HOME in ``tmp_path`` (and no XDG runtime dir),
    with config.yaml's ``rollout`` section when given."""
    hosts = {box: [["gemma", 8001], ["qwen", 8002]] for box in boxes}
    document = config(hosts=hosts)
    if rollout is not None:
        document["rollout"] = rollout
    config_path, models_path = write_pair(tmp_path / "fleet", document)
    port, state, log = free_port(), tmp_path / "state.sqlite3", tmp_path / "server.log"
    environment = {key: value for key, value in os.environ.items() if key != "XDG_RUNTIME_DIR"}
    environment["HOME"] = str(tmp_path / "home")
    command = [str(SERVER), "--config", config_path, "--models", models_path,
               "--bind", f"127.0.0.1:{port}", "--workers", "2", "--state", str(state)]
    context = None
    if tls is not None:
        ca, cert, key = tls
        command += ["--certfile", str(cert), "--keyfile", str(key)]
        context = ssl.create_default_context(cafile=str(ca))
    with open(log, "wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT,
                                   env=environment)
    server = Server(process, port, log, state, context)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not healthy(server):
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                server.stop()
            pytest.fail(f"llmao-server did not start:\n{server.log_text()}")
        time.sleep(0.1)
    return server


def healthy(server: Server) -> bool:
    try:
        connection = server.connect()
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A throwaway CA and a certificate it signed for 127.0.0.1: (ca, cert, key)."""
    folder = tmp_path_factory.mktemp("tls")
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    cert, key, request = folder / "server.pem", folder / "server.key", folder / "server.csr"
    extensions = folder / "server.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for command in (
        ["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2",
         "-subj", "/CN=llmao test CA"],
        ["req", *ec, "-keyout", key, "-out", request, "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", "2", "-extfile", extensions],
    ):
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True)
    return ca, cert, key


@pytest.fixture(params=["http", "https"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    tls = request.getfixturevalue("certificates") if request.param == "https" else None
    running = start(tmp_path, tls)
    yield running
    if running.process.poll() is None:
        running.stop()
    assert not [s for s in SECRETS if s in running.log_text()]
    assert "sk-vllm-" not in running.log_text()


def answering_pids(server: Server) -> dict[str, str]:
    """Box name → pid of the worker that logged its fetch."""
    return {match["host"]: match["pid"] for match in LINE.finditer(server.log_text())}


def logged_fetches(server: Server, fetched: list[str]) -> dict[str, str]:
    """:func:`answering_pids` once every name in ``fetched`` is logged (at most 5 s)."""
    deadline = time.monotonic() + 5
    pids = answering_pids(server)
    while not set(fetched) <= set(pids) and time.monotonic() < deadline:
        time.sleep(GATHER_S)
        pids = answering_pids(server)
    return pids


def fetch_until_both_workers_answered(server: Server,
                                      boxes: list[str]) -> dict[str, str]:
    """Fetch ``boxes`` a few at a time until the log shows two workers; name → pid.

    A worker gathers its access lines for up to ``GATHER_S`` before writing them, so each
    batch's lines are awaited (all of them, not only the first worker's) before judging."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        for start_at in range(0, len(boxes), 8):
            batch = boxes[start_at:start_at + 8]
            list(pool.map(server.fetch, batch))
            pids = logged_fetches(server, boxes[:start_at + 8])
            if len(set(pids.values())) >= 2:
                return pids
    pytest.fail(f"one worker answered every request:\n{server.log_text()}")


def test_two_workers_share_fetch_times_and_the_unknown_list(server: Server) -> None:
    unknown = [f"192.0.2.{index}" for index in range(1, 41)]
    names = [name for pair in zip(KNOWN_BOXES, unknown, strict=True) for name in pair]
    pids = fetch_until_both_workers_answered(server, names)
    fetched = {name for name in pids if name in KNOWN_BOXES}
    refused = set(pids) - fetched
    store = SqliteStore(str(server.state))

    def shared_state() -> tuple[set[str], set[str]]:
        return set(store.fetch_times()), {u.name for u in store.unknown_boxes()}

    deadline = time.monotonic() + 5
    while not (fetched <= shared_state()[0] and refused <= shared_state()[1]):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    recorded, remembered = shared_state()
    for pid in set(pids.values()):
        assert {name for name in fetched if pids[name] == pid} <= recorded
        assert {name for name in refused if pids[name] == pid} <= remembered


def test_a_boot_storm_is_answered_and_recorded_whole(tmp_path: Path) -> None:
    """A boot storm: 1,000 boxes (and 100 strangers) at once; no error, nothing lost."""
    boxes = [f"10.30.{index // 250}.{index % 250 + 1}" for index in range(1000)]
    strangers = [f"192.0.2.{index}" for index in range(1, 101)]
    running = start(tmp_path, boxes=boxes)
    try:
        with ThreadPoolExecutor(max_workers=32) as pool:
            statuses = dict(zip(boxes + strangers, pool.map(running.fetch, boxes + strangers),
                                strict=True))
        assert {statuses[box] for box in boxes} == {200}
        assert {statuses[name] for name in strangers} == {404}
        store = SqliteStore(str(running.state))
        deadline = time.monotonic() + 10
        # Each worker writes what it holds every half second: wait for the last writes.
        while ((len(store.fetch_times()) < len(boxes) or len(store.unknown_boxes()) < 50)
               and time.monotonic() < deadline):
            time.sleep(0.1)
        assert set(store.fetch_times()) == set(boxes)
        assert len(store.unknown_boxes()) == 50
    finally:
        running.stop()


def test_no_gunicorn_control_socket_is_opened(server: Server, tmp_path: Path) -> None:
    """gunicorn opens it after the workers, so look once the server has run and stopped."""
    assert server.fetch(KNOWN_BOXES[0]) == 200
    assert server.stop() == 0
    assert not (tmp_path / "home" / ".gunicorn").exists()
    assert "Control socket" not in server.log_text()


def test_a_clean_stop_loses_no_fetch_time(server: Server) -> None:
    assert server.fetch(KNOWN_BOXES[0]) == 200
    assert server.fetch(UNKNOWN) == 404
    assert server.stop() == 0
    store = SqliteStore(str(server.state))
    assert KNOWN_BOXES[0] in store.fetch_times()
    assert UNKNOWN in {u.name for u in store.unknown_boxes()}


def test_approvals_do_not_survive_a_restart(tmp_path: Path) -> None:
    SqliteStore(str(tmp_path / "state.sqlite3")).approve(
        Approval(UNKNOWN, ("gemma",), "admin", time.time()))
    running = start(tmp_path)
    try:
        assert running.fetch(UNKNOWN) == 404
    finally:
        running.stop()


def test_https_is_verified_against_its_own_ca(tmp_path: Path,
                                              certificates: tuple[Path, Path, Path]) -> None:
    running = start(tmp_path, certificates)
    try:
        assert running.fetch(KNOWN_BOXES[0]) == 200
        stranger = http.client.HTTPSConnection("127.0.0.1", running.port, timeout=10,
                                               context=ssl.create_default_context())
        with pytest.raises(ssl.SSLCertVerificationError):
            stranger.request("GET", "/healthz")
    finally:
        running.stop()


def test_a_bad_config_exits_non_zero_with_the_message_and_no_traceback(tmp_path: Path) -> None:
    files = write_pair(tmp_path, config(hosts={"203.0.113.10": [["gpt", 8001]]}))
    port = free_port()
    done = start_once(files, f"127.0.0.1:{port}")
    assert done.returncode != 0
    assert "fleet.hosts.203.0.113.10[0]: model 'gpt' is a commercial route" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not listening(port)


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]"])
def test_plain_http_on_a_non_loopback_bind_is_refused(tmp_path: Path, host: str) -> None:
    port = free_port()
    done = start_once(write_pair(tmp_path), f"{host}:{port}")
    assert done.returncode != 0
    assert "--certfile and --keyfile" in done.stderr
    assert not listening(port)


def start_once(files: tuple[str, str], bind: str) -> subprocess.CompletedProcess[str]:
    """Run llmao-server on ``files`` and ``bind`` to its end: for the starts it must refuse."""
    config_path, models_path = files
    return subprocess.run([str(SERVER), "--config", config_path, "--models", models_path,
                           "--bind", bind], capture_output=True, text=True, timeout=60)


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


TURN_LINE = re.compile(r"\[(?P<pid>\d+)\] INFO llmao_server\.access: POST /vllm/turn 200 ")


def first_fetch(server: Server, box: str) -> tuple[str, str]:
    """The box's first fetch: its intended revision (the ETag) and the box token the fetch
    bound its name to, which its later calls present."""
    connection = server.connect()
    try:
        connection.request("GET", "/vllm/config", headers=box_headers(host=box))
        answer = connection.getresponse()
        answer.read()
        return answer.headers["ETag"].strip('"'), answer.headers[TOKEN_HEADER]
    finally:
        connection.close()


def ask_turn(connection: http.client.HTTPConnection, box: str, fetched: tuple[str, str],
             start_together: threading.Barrier) -> dict:
    """Ask on a connection already open (accepted by whichever worker took it), all at once,
    as the bound box: the revision its fetch gave, with its box token."""
    revision, token = fetched
    start_together.wait(30)
    connection.request("POST", "/vllm/turn", headers={
        **box_headers(host=box), TOKEN_HEADER: token, "Content-Type": "application/json"},
        body=json.dumps({"revision": revision, "servers": ["gemma"]}))
    answer = connection.getresponse()
    assert answer.status == 200
    return json.loads(answer.read())


def ask_round(server: Server, fetched: dict[str, tuple[str, str]]) -> list[dict]:
    """Every box opens its connection, then all ask at once; their answers."""
    connections = {box: server.connect() for box in fetched}
    for connection in connections.values():
        connection.connect()
    start_together = threading.Barrier(len(fetched))
    try:
        with ThreadPoolExecutor(max_workers=len(fetched)) as pool:
            return list(pool.map(lambda box: ask_turn(connections[box], box, fetched[box],
                                                      start_together), fetched))
    finally:
        for connection in connections.values():
            connection.close()


def logged_turn_pids(server: Server, count: int) -> list[str]:
    """The worker pid of each ``POST /vllm/turn`` access line, once ``count`` are written (a
    worker gathers its lines for up to ``GATHER_S``; at most 5 s)."""
    deadline = time.monotonic() + 5
    pids = [match["pid"] for match in TURN_LINE.finditer(server.log_text())]
    while len(pids) < count and time.monotonic() < deadline:
        time.sleep(GATHER_S)
        pids = [match["pid"] for match in TURN_LINE.finditer(server.log_text())]
    return pids


def end_turn(server: Server, box: str, revision: str) -> None:
    """Reconcile's part, through the admin API: the turn drains, then is done."""
    for phase in ("drained", "done"):
        connection = server.connect()
        try:
            connection.request("POST", "/admin/api/turns", headers={
                "Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
                body=json.dumps({"updates": [{"box": box, "revision": revision,
                                              "phase": phase, "why": ""}]}))
            answer = connection.getresponse()
            assert answer.status == 200 and json.loads(answer.read())["refused"] == []
        finally:
            connection.close()


def test_boxes_asking_at_once_across_workers_get_one_turn(tmp_path: Path) -> None:
    """Every box of one model asks for a turn at the same moment, max_unavailable 1: the two
    workers decide in the store's one transaction, so exactly one box is granted. Each round
    ends the granted turn, so the next is a race again; rounds go on until both workers
    answered within one (at most ten)."""
    fleet = [f"10.40.{index // 250}.{index % 250 + 1}" for index in range(1000)]
    running = start(tmp_path, boxes=fleet,
                    rollout={"follow_s": 10, "max_unavailable": 1, "drain_s": 5})
    try:
        # A large fleet: deciding takes a few milliseconds, the window a lock must close.
        boxes = fleet[:32]
        fetched = {box: first_fetch(running, box) for box in boxes}
        for done in range(1, 11):
            answers = ask_round(running, fetched)
            granted = [answer["host"] for answer in answers if answer["granted"]]
            assert len(granted) == 1, answers
            assert all("are changing, max_unavailable is 1" in answer["why"]
                       for answer in answers if not answer["granted"])
            (turn,) = [t for t in SqliteStore(str(running.state)).turns() if t.active]
            assert (turn.box, turn.revision) == (granted[0], fetched[granted[0]][0])
            end_turn(running, turn.box, turn.revision)
            pids = logged_turn_pids(running, done * len(boxes))
            if len(set(pids[-len(boxes):])) == 2:
                break
        else:
            pytest.fail("one worker answered every round")
    finally:
        running.stop()
