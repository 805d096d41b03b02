"""The PostgreSQL store against a real server: what SQLite cannot show.

The shared contract runs in ``tests/server/test_store.py`` for both stores.
Here: a ``postgresql://`` URL selects it, a bad one is refused without its
password, instances starting at once create the schema once, a restarted
database is reconnected to, and two real ``llmao-server`` instances on one
database behave as one server for boxes (the dashboard's side of it is in
``tests/dashboard/test_two_instances.py``).
"""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Phase
from llmao_server.store import Approval, StoreError, UnknownBox, open_store
from llmao_server.store.postgres import PostgresStore, shown_url
from rig.boxes import free_port
from rig.postgres import PostgresCluster, session_cluster
from rig.processes import run_forked
from tests.dashboard.live_server import fetch_config, start_server
from tests.llmao_process import LlmaoServer
from tests.server.fleet_pair import (
    CONFIG,
    KNOWN,
    SECRETS,
    TOKEN_HEADER,
    UNKNOWN,
    box_headers,
)


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> PostgresCluster:
    return session_cluster(request.config)


@pytest.fixture
def database(cluster: PostgresCluster) -> str:
    return cluster.new_database()


def test_a_postgresql_url_opens_the_postgresql_store(database: str) -> None:
    store = open_store(database)
    try:
        assert isinstance(store, PostgresStore)
        store.note_fetches({KNOWN: 5.0})
        assert store.fetch_times() == {KNOWN: 5.0}
    finally:
        store.close()


@pytest.mark.parametrize("how", ["wrong password", "nothing listening", "no such database"])
def test_a_store_that_cannot_be_opened_is_refused_without_its_password(
        cluster: PostgresCluster, how: str) -> None:
    password = "pg-secret-" + "7" * 12
    url = {
        "wrong password": f"postgresql://llmao:{password}@127.0.0.1:{cluster.port}/postgres",
        "nothing listening": f"postgresql://llmao:{password}@127.0.0.1:{free_port()}/llmao",
        "no such database": cluster.url("missing_db").replace(cluster.password, password),
    }[how]
    with pytest.raises(StoreError) as refused:
        open_store(url)
    message = str(refused.value)
    assert message.startswith("cannot open the state store postgresql://llmao@127.0.0.1:")
    assert password not in message


def test_the_shown_url_drops_only_the_password() -> None:
    assert shown_url("postgresql://u:p%40ss@db.example:5432/x?sslmode=require") == \
        "postgresql://u@db.example:5432/x?sslmode=require"
    assert shown_url("postgresql://db.example/x") == "postgresql://db.example/x"


def _open_and_note(url: str, name: str) -> None:
    store = open_store(url)
    store.note_unknown([UnknownBox(name, 1.0, 1.0, 1)])
    store.close()


def test_instances_starting_together_create_the_schema_once(database: str) -> None:
    codes = run_forked(_open_and_note, [(database, f"n{i}") for i in range(6)], 60)
    assert codes == [0] * 6
    store = open_store(database)
    assert sorted(u.name for u in store.unknown_boxes()) == [f"n{i}" for i in range(6)]
    store.close()


def test_a_connection_the_database_dropped_is_replaced(cluster: PostgresCluster,
                                                       database: str) -> None:
    store = open_store(database)
    store.approve(Approval(UNKNOWN, ("gemma",), "alice", 1.0))
    name = database.rsplit("/", 1)[1]
    cluster.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                 f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")
    with pytest.raises(Exception):  # noqa: B017 - the call that finds the connection dead
        store.approval(UNKNOWN)
    assert store.approval(UNKNOWN) == Approval(UNKNOWN, ("gemma",), "alice", 1.0)
    store.close()


# ------------------------------------------------------- two llmao-server instances


@pytest.fixture
def two_instances(tmp_path: Path, database: str) -> Iterator[tuple[LlmaoServer, LlmaoServer]]:
    """Two ``llmao-server`` processes (two workers each) on one database."""
    started: list[LlmaoServer] = []
    try:
        for name in ("one", "two"):
            started.append(start_server(tmp_path, name, None, database))
        yield started[0], started[1]
    finally:
        for server in started:
            server.stop()
    for server in started:
        assert not [secret for secret in SECRETS if secret in server.log()]
        assert urlsplit(database).password not in server.log()


def wait_for(check: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_two_instances_on_one_database_serve_as_one(
        two_instances: tuple[LlmaoServer, LlmaoServer], database: str) -> None:
    first, second = two_instances
    assert fetch_config(first, KNOWN)[0] == 200
    assert fetch_config(second, UNKNOWN)[0] == 404
    store = open_store(database)
    try:
        assert wait_for(lambda: KNOWN in store.fetch_times()
                        and [u.name for u in store.unknown_boxes()] == [UNKNOWN])
        # An approval in the shared store is honoured by both instances.
        store.approve(Approval(UNKNOWN, ("qwen", "gemma"), "alice", time.time()))
        assert fetch_config(first, UNKNOWN)[0] == 200
        assert fetch_config(second, UNKNOWN)[0] == 200
    finally:
        store.close()


def first_fetch(server: LlmaoServer, box: str) -> tuple[str, str]:
    """The box's first fetch: its intended revision and the box token it was bound to."""
    request = urllib.request.Request(f"{server.url}/vllm/config", headers=box_headers(host=box))
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())["revision"], answer.headers[TOKEN_HEADER]


def ask_turn(server: LlmaoServer, box: str, fetched: tuple[str, str],
             start_together: threading.Barrier) -> dict:
    """``POST /vllm/turn`` as a following, bound box makes it, once every asker is ready."""
    revision, token = fetched
    request = urllib.request.Request(
        f"{server.url}/vllm/turn", method="POST",
        data=json.dumps({"revision": revision, "servers": ["gemma"]}).encode(),
        headers={**box_headers(host=box), TOKEN_HEADER: token,
                 "Content-Type": "application/json"})
    start_together.wait(30)
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def ask_round(servers: list[LlmaoServer], fetched: dict[str, tuple[str, str]]) -> list[dict]:
    """Every box asks at once, each to the next instance in turn; their answers."""
    start_together = threading.Barrier(len(fetched))
    with ThreadPoolExecutor(max_workers=len(fetched)) as pool:
        return list(pool.map(ask_turn, [servers[i % 2] for i in range(len(fetched))],
                             fetched, fetched.values(), [start_together] * len(fetched)))


@pytest.mark.slow
def test_boxes_asking_two_instances_at_once_get_one_turn(tmp_path: Path, database: str) -> None:
    """Boxes of one model ask two instances (two workers each) at the same moment, with
    max_unavailable 1: exactly one is granted, round after round (each round's turn is
    ended before the next). A large fleet makes each decision take a few milliseconds."""
    boxes = [f"10.40.{index // 250}.{index % 250 + 1}" for index in range(1000)]
    document = copy.deepcopy(CONFIG)
    document["fleet"]["hosts"] = {box: [["gemma", 8001]] for box in boxes}
    document["rollout"] = {"follow_s": 10, "max_unavailable": 1}
    servers = [start_server(tmp_path, name, document, database) for name in ("one", "two")]
    store = open_store(database)
    try:
        askers = boxes[:32]
        fetched = {box: first_fetch(servers[0], box) for box in askers}
        for _ in range(3):
            answers = ask_round(servers, fetched)
            granted = [answer["host"] for answer in answers if answer["granted"]]
            assert len(granted) == 1, [answer["why"] for answer in answers]
            revision = fetched[granted[0]][0]
            store.update_turn(granted[0], revision, Phase.DRAINED, "", time.time())
            store.update_turn(granted[0], revision, Phase.DONE, "", time.time())
    finally:
        store.close()
        for server in servers:
            server.stop()
