"""Rollout turns through the API: a box's ``POST /vllm/turn``, the push path's take,
reconcile's updates, the observations, and the audit lines of each step."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from llmao_server.boxes.turns import ASK_BURST
from llmao_server.state import ServerState, app_state
from llmao_server.store import ReconcilePass
from tests.server.fleet_pair import (
    KNOWN,
    LEGACY,
    OTHER_KNOWN,
    UNKNOWN,
    bound_headers,
    box_headers,
    config,
)
from tests.server.test_admin_api import admin

TURN = "/vllm/turn"
TAKE = "/admin/api/turns/take"
UPDATES = "/admin/api/turns"
AUDIT_LOGGER = "llmao_server.audit"
GEMMA_KNOWN = f"llmao:{KNOWN}:8001:gemma"
GEMMA_LEGACY = f"llmao:{LEGACY}:8000:gemma"


def following(drain_s: float = 0, max_unavailable: int = 1) -> dict:
    document = config()
    document["rollout"] = {"follow_s": 10, "drain_s": drain_s,
                           "max_unavailable": max_unavailable}
    return document


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    return make_app(following())


def revision(state: ServerState, box: str = KNOWN) -> str:
    return state.fleet.assignment(box).revision


def ask(client: FlaskClient, state: ServerState, box: str = KNOWN,
        servers: tuple[str, ...] = ("gemma",), rev: str | None = None):
    return client.post(TURN, headers=bound_headers(client, host=box),
                       json={"revision": rev or revision(state, box), "servers": list(servers)})


def update(client: FlaskClient, state: ServerState, phase: str, box: str = KNOWN,
           why: str = ""):
    return client.post(UPDATES, headers=admin(), json={"updates": [
        {"box": box, "revision": revision(state, box), "phase": phase, "why": why}]})


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The audit lines of the ``caplog.at_level`` block the test is in (or just left)."""
    return [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER
            and "action=box_binding" not in r.getMessage()]


@pytest.fixture(autouse=True)
def fresh_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)


@pytest.fixture
def granted(client: FlaskClient, state: ServerState, caplog: pytest.LogCaptureFixture) -> None:
    """The known box has asked for its turn and been granted it; its audit line is cleared."""
    ask(client, state)
    caplog.clear()


def test_a_box_gets_its_turn_and_asking_again_is_polling(
        client: FlaskClient, state: ServerState, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        first, again = ask(client, state), ask(client, state)
    assert first.status_code == 200
    assert first.json == {"host": KNOWN, "revision": revision(state), "granted": True,
                          "phase": "draining", "apply": False, "drain_s": 0.0, "why": ""}
    assert again.json == first.json
    lines = audit_lines(caplog)
    assert len(lines) == 1
    assert "action=turn outcome=granted" in lines[0]
    assert f"who='box {KNOWN}'" in lines[0] and GEMMA_KNOWN in lines[0]


def test_another_box_of_the_model_waits_and_is_audited_once(
        client: FlaskClient, state: ServerState, caplog: pytest.LogCaptureFixture,
        granted: None) -> None:
    with caplog.at_level(logging.INFO):
        waits = [ask(client, state, LEGACY) for _ in range(3)]
    assert all(answer.status_code == 200 for answer in waits)
    assert waits[0].json["granted"] is False and waits[0].json["phase"] is None
    assert waits[0].json["apply"] is False
    assert "gemma: other servers of it are changing, max_unavailable is 1" in waits[0].json["why"]
    lines = audit_lines(caplog)
    assert len(lines) == 1 and "action=turn outcome=waiting" in lines[0]
    # Another model's server is not held back.
    assert ask(client, state, OTHER_KNOWN, ("qwen",)).json["granted"] is True


def test_a_turn_runs_through_reconcile_updates_to_apply_and_done(
        client: FlaskClient, state: ServerState, caplog: pytest.LogCaptureFixture,
        granted: None) -> None:
    with caplog.at_level(logging.INFO):
        moved = update(client, state, "drained")
    assert moved.status_code == 200 and moved.json["refused"] == []
    (turn,) = moved.json["turns"]
    assert (turn["box"], turn["phase"], turn["servers"]) == (KNOWN, "drained", [GEMMA_KNOWN])
    assert "action=turn-update outcome=ok" in audit_lines(caplog)[0]
    polled = ask(client, state).json
    assert (polled["granted"], polled["phase"], polled["apply"]) == (True, "drained", True)
    assert update(client, state, "done").json["turns"][0]["phase"] == "done"
    observed = client.get("/admin/api/observations", headers=admin()).json
    assert [(t["box"], t["phase"]) for t in observed["turns"]] == [(KNOWN, "done")]
    # Its turn over, the other box's gemma may go.
    assert ask(client, state, LEGACY).json["granted"] is True


def test_a_server_healthy_only_through_a_failed_probe_is_not_the_last_healthy_one(
        client: FlaskClient, state: ServerState) -> None:
    """The other box's server kept its Healthy state through one failed probe: it may be down,
    so this box's restart cannot lean on it."""
    now = time.time()
    failing = {"state": "Healthy", "memory": {"state": "Healthy", "consecutive_failures": 1}}
    state.store.record_pass(ReconcilePass(now, {
        GEMMA_KNOWN: {"state": "Healthy", "memory": {"consecutive_failures": 0}},
        GEMMA_LEGACY: failing}, (), now))
    answer = ask(client, state).json
    assert answer["granted"] is False and "never the last healthy" in answer["why"]


def test_apply_waits_for_drain_s_on_the_server_clock(make_app: Callable[..., Flask]) -> None:
    app = make_app(following(drain_s=3600))
    client, state = app.test_client(), app_state(app)
    ask(client, state)
    update(client, state, "drained")
    answer = ask(client, state).json
    assert (answer["phase"], answer["apply"], answer["drain_s"]) == ("drained", False, 3600.0)


def test_moves_the_turn_may_not_make_are_refused_and_listed(
        client: FlaskClient, state: ServerState, caplog: pytest.LogCaptureFixture,
        granted: None) -> None:
    with caplog.at_level(logging.INFO):
        answer = update(client, state, "done")
        unknown = update(client, state, "drained", box=OTHER_KNOWN)
    assert answer.status_code == 200
    assert answer.json["refused"] == [{"box": KNOWN, "revision": revision(state),
                                       "phase": "done",
                                       "why": f"the turn of {KNOWN} for revision "
                                              f"{revision(state)} is draining; it cannot "
                                              "become done"}]
    assert answer.json["turns"][0]["phase"] == "draining"
    assert "has no turn for revision" in unknown.json["refused"][0]["why"]
    assert all("outcome=refused" in line for line in audit_lines(caplog))


def test_a_failed_turn_pauses_the_model_and_says_why(client: FlaskClient,
                                                     state: ServerState) -> None:
    ask(client, state)
    update(client, state, "failed", why="gemma Stalled: not answering after the grace")
    answer = ask(client, state, LEGACY).json
    assert answer["granted"] is False
    assert answer["why"].startswith("rollout of gemma paused: a change of another box failed")
    # Another box's name, revision and probe reason are not told to a fleet-key holder.
    assert KNOWN not in answer["why"] and revision(state) not in answer["why"]
    assert "Stalled" not in answer["why"]
    # The failed box itself sees its turn failed, and why.
    own = ask(client, state).json
    assert (own["granted"], own["phase"]) == (False, "failed")
    assert "gemma Stalled: not answering after the grace" in own["why"]


def test_never_the_last_healthy_server(client: FlaskClient, state: ServerState) -> None:
    now = time.time()
    state.store.record_pass(ReconcilePass(now, {
        GEMMA_KNOWN: {"state": "Healthy"}, GEMMA_LEGACY: {"state": "Unhealthy"}}, (), now))
    answer = ask(client, state).json
    assert answer["granted"] is False and "never the last healthy" in answer["why"]
    assert ask(client, state, LEGACY).json["granted"] is True


def test_only_servers_that_go_are_granted_nothing_and_nothing_is_kept(
        client: FlaskClient, state: ServerState) -> None:
    answer = ask(client, state, servers=("gone",)).json
    assert (answer["granted"], answer["phase"], answer["apply"]) == (True, None, True)
    assert state.store.turns() == []


def test_an_empty_ask_is_refused(client: FlaskClient, state: ServerState) -> None:
    answer = ask(client, state, servers=())
    assert answer.status_code == 400 and answer.json["error"]["code"] == "bad_turn"
    assert state.store.turns() == []


@pytest.mark.parametrize("first", [(), ("gone",)], ids=["empty", "servers that go"])
def test_an_ask_made_first_for_nothing_never_lets_the_real_ask_past_the_rules(
        client: FlaskClient, state: ServerState, first: tuple[str, ...]) -> None:
    """A fleet-key holder asks as LEGACY for nothing while KNOWN's gemma changes: LEGACY's
    own ask for its gemma must still wait for max_unavailable."""
    assert ask(client, state).json["granted"] is True
    ask(client, state, LEGACY, servers=first)
    answer = ask(client, state, LEGACY).json
    assert (answer["granted"], answer["apply"]) == (False, False)
    assert "max_unavailable is 1" in answer["why"]


def test_a_box_that_applied_the_revision_is_granted_no_turn(client: FlaskClient,
                                                             state: ServerState) -> None:
    report = {"revision": revision(state), "applied_at": "2026-01-31T12:00:00Z", "servers": []}
    reported = client.post("/vllm/applied", headers=bound_headers(client), json=report)
    assert reported.status_code == 200
    answer = ask(client, state).json
    assert (answer["granted"], answer["apply"], answer["phase"]) == (False, False, None)
    assert "already applied" in answer["why"]
    assert state.store.turns() == []


def test_asking_too_often_is_429_with_retry_after(client: FlaskClient,
                                                  state: ServerState) -> None:
    answers = [ask(client, state) for _ in range(ASK_BURST + 1)]
    assert [a.status_code for a in answers] == [200] * ASK_BURST + [429]
    assert answers[-1].json["error"]["code"] == "turn_asked_too_often"
    assert int(answers[-1].headers["Retry-After"]) >= 1
    # Another box has its own budget.
    assert ask(client, state, LEGACY).status_code == 200


def test_an_ask_decodes_a_stored_pass_once(client: FlaskClient, state: ServerState,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    state.store.record_pass(ReconcilePass(now, {GEMMA_KNOWN: {"state": "Healthy"}}, (), now))
    reads = []
    read = state.store.last_pass
    monkeypatch.setattr(state.store, "last_pass", lambda: reads.append(1) or read())
    for box in (KNOWN, LEGACY, KNOWN):
        assert ask(client, state, box).status_code == 200
    assert len(reads) == 1
    state.store.record_pass(ReconcilePass(now + 1, {}, (), now + 1))
    ask(client, state, LEGACY)
    assert len(reads) == 2


def test_a_stale_revision_is_409(client: FlaskClient, state: ServerState) -> None:
    answer = ask(client, state, rev="0123456789abcdef")
    assert answer.status_code == 409
    assert answer.json["error"]["code"] == "stale_revision"
    assert state.store.turns() == []


@pytest.mark.parametrize("body", [
    None, [], {"servers": ["gemma"]}, {"revision": 5, "servers": []},
    {"revision": "", "servers": []}, {"revision": "r" * 65, "servers": []},
    {"revision": "r" * 129, "servers": ["gemma"]},
    {"revision": "r", "servers": "gemma"}, {"revision": "r", "servers": ["a b"]},
    {"revision": "r", "servers": [f"s{i}" for i in range(7)]},
])
def test_a_malformed_ask_is_400(client: FlaskClient, body) -> None:
    answer = client.post(TURN, headers=bound_headers(client), json=body)
    assert answer.status_code == 400 and answer.json["error"]["code"] == "bad_turn"


def test_the_gate_and_the_box_come_first(client: FlaskClient, state: ServerState) -> None:
    body = {"revision": revision(state), "servers": ["gemma"]}
    assert client.post(TURN, headers=box_headers(key="wrong"), json=body).status_code == 403
    assert client.post(TURN, headers=box_headers(host=UNKNOWN), json=body).status_code == 404
    assert client.get(TURN, headers=box_headers()).status_code == 405


def test_the_push_path_takes_a_turn_by_the_same_rule(client: FlaskClient,
                                                     state: ServerState) -> None:
    body = {"box": KNOWN, "revision": revision(state), "servers": ["gemma"]}
    asked = ask(client, state).json  # the box holds its name: the push path leaves it so
    taken = client.post(TAKE, headers=admin(), json=body)
    assert taken.status_code == 200
    assert taken.json == asked
    assert taken.json["granted"] is True
    legacy = {"box": LEGACY, "revision": revision(state, LEGACY), "servers": ["gemma"]}
    assert client.post(TAKE, headers=admin(), json=legacy).json["granted"] is False
    assert client.post(TAKE, headers=admin(), json={**body, "box": UNKNOWN}).status_code == 404
    stale = client.post(TAKE, headers=admin(), json={**body, "revision": "0" * 16})
    assert stale.status_code == 409
    assert client.post(TAKE, json=body).status_code == 401


@pytest.mark.parametrize("body", [
    [], {"updates": {}}, {"updates": [5]}, {"updates": [{"box": KNOWN, "revision": "r"}]},
    {"updates": [{"box": KNOWN, "revision": "r", "phase": "paused"}]},
    {"updates": [{"box": KNOWN, "revision": "r", "phase": ["done"]}]},
    {"updates": [{"box": 1, "revision": "r", "phase": "done"}]},
])
def test_malformed_updates_are_400(client: FlaskClient, body) -> None:
    answer = client.post(UPDATES, headers=admin(), json=body)
    assert answer.status_code == 400 and answer.json["error"]["code"] == "bad_turn"


def test_deciding_an_ask_never_walks_every_server(client: FlaskClient, state: ServerState,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The fleet is walked once per stored pass (the Healthy servers per model), never per
    ask: inside the store's lock only the boxes of the turns are looked at."""
    now = time.time()
    state.store.record_pass(ReconcilePass(now, {GEMMA_KNOWN: {"state": "Healthy"},
                                                GEMMA_LEGACY: {"state": "Healthy"}}, (), now))
    assert ask(client, state).json["granted"] is True  # the pass is read once, here

    def walked(fleet: Fleet):
        raise AssertionError("an ask walked every server of the fleet")

    monkeypatch.setattr(Fleet, "servers", walked)
    for box in (LEGACY, KNOWN, LEGACY):
        assert ask(client, state, box).status_code == 200
