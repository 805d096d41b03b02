"""The admin API reconcile uses: the admin token gate, observations, and the pass it records."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from llmao_server.admin_api import MAX_VERDICTS, VERDICTS_MAX_BYTES
from llmao_server.admin_attempts import peer_scope
from llmao_server.state import ServerState
from llmao_server.store import AppliedReport, AppliedServer, Approval
from tests.server.fleet_pair import ADMIN_TOKEN, KNOWN, LEGACY, OTHER_KNOWN, UNKNOWN, config

OBSERVATIONS = "/admin/api/observations"
VERDICTS = "/admin/api/verdicts"
GEMMA = f"llmao:{KNOWN}:8001:gemma"
# Passes are refused unless near the server's clock: a time of this run, on a half second.
PASS_AT = float(int(time.time())) - 59.5


def admin(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def a_pass(**changes) -> dict:
    document = {
        "pass_at": PASS_AT,
        "verdicts": {GEMMA: {"id": GEMMA, "box": KNOWN, "name": "gemma", "state": "Healthy",
                             "reason": "serving its model with our bearer", "in_litellm": True,
                             "change": "register", "public": f"{KNOWN}:8001",
                             "provider": "local",
                             "memory": {"state": "Healthy", "consecutive_failures": 0,
                                        "rejected_passes": 0,
                                        "last_healthy_at": PASS_AT}}},
        "drift": [{"kind": "revision_behind", "box": KNOWN, "applied": "0" * 16,
                   "intended": "1" * 16, "what": "applied rev 0, intended rev 1"}],
    }
    return {**document, **changes}


# --- the gate ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), [("GET", OBSERVATIONS), ("POST", VERDICTS)])
@pytest.mark.parametrize(("headers", "status", "code"), [
    ({}, 401, "admin_token_required"),
    ({"Authorization": ADMIN_TOKEN}, 401, "admin_token_required"),
    ({"Authorization": f"Basic {ADMIN_TOKEN}"}, 401, "admin_token_required"),
    ({"Authorization": "Bearer "}, 401, "admin_token_required"),
    (admin(ADMIN_TOKEN[:-1]), 403, "admin_token_wrong"),
    (admin(ADMIN_TOKEN + "x"), 403, "admin_token_wrong"),
])
def test_the_admin_token_is_required(client: FlaskClient, method, path, headers, status, code):
    answer = client.open(path, method=method, headers=headers, json=a_pass())
    assert answer.status_code == status
    assert answer.json["error"]["code"] == code
    assert ADMIN_TOKEN not in answer.get_data(as_text=True)


@pytest.mark.parametrize("token", [None, "", "CHANGE_ME", "CHANGE_ME_admin"])
def test_no_configured_token_closes_the_api(make_app: Callable[..., Flask], token):
    document = config()
    if token is None:
        del document["admin"]
    else:
        document["admin"] = {"token": token}
    client = make_app(document).test_client()
    for headers in ({}, admin(), admin(token or "x")):
        answer = client.get(OBSERVATIONS, headers=headers)
        assert answer.status_code == 503
        assert answer.json["error"]["code"] == "admin_token_not_configured"


# --- observations ------------------------------------------------------------------------------


def test_observations_of_a_fresh_server(client: FlaskClient):
    answer = client.get(OBSERVATIONS, headers=admin())
    assert answer.status_code == 200
    assert answer.headers["Cache-Control"] == "no-store"
    document = answer.json
    assert isinstance(document["now"], float)
    assert document["boxes"] == {box: {"last_fetch": None, "applied": None}
                                 for box in (KNOWN, OTHER_KNOWN, LEGACY)}
    assert (document["verdicts"], document["drift"], document["pass_at"]) == ({}, [], None)
    assert document["approved"] == {}


def test_observations_carry_fetches_and_applied_revisions(client: FlaskClient,
                                                          state: ServerState):
    state.store.note_fetches({KNOWN: 1000.5, UNKNOWN: 999.0})
    state.store.record_applied(AppliedReport(KNOWN, "0123456789abcdef", "2026-01-31T12:00:00Z",
                                             (AppliedServer("gemma", 8001, "gemma"),), 1001.0))
    boxes = client.get(OBSERVATIONS, headers=admin()).json["boxes"]
    assert boxes[KNOWN] == {"last_fetch": 1000.5, "applied": {
        "revision": "0123456789abcdef", "applied_at": "2026-01-31T12:00:00Z",
        "reported_at": 1001.0}}
    assert boxes[OTHER_KNOWN] == {"last_fetch": None, "applied": None}
    assert UNKNOWN not in boxes  # only intended boxes are reconcile's business


def test_observations_carry_the_approvals_in_force(client: FlaskClient, state: ServerState):
    state.approve(UNKNOWN, ["qwen", "gemma"], "admin", 1000.0)
    state.store.note_fetches({UNKNOWN: 1002.0})
    # Stored before the box joined fleet.hosts: its rows decide, the approval is not in force.
    state.store.approve(Approval(OTHER_KNOWN, ("gemma",), "admin", 1001.0))
    document = client.get(OBSERVATIONS, headers=admin()).json
    assert document["approved"] == {UNKNOWN: ["qwen", "gemma"]}
    assert document["boxes"][UNKNOWN] == {"last_fetch": 1002.0, "applied": None}


# --- verdicts ----------------------------------------------------------------------------------


def test_a_pass_is_recorded_then_replaced(client: FlaskClient, state: ServerState):
    answer = client.post(VERDICTS, headers=admin(), json=a_pass())
    assert answer.status_code == 200
    assert answer.json == {"recorded": 1, "pass_at": PASS_AT}
    document = client.get(OBSERVATIONS, headers=admin()).json
    assert document["verdicts"] == a_pass()["verdicts"]
    assert document["drift"] == a_pass()["drift"]
    assert document["pass_at"] == PASS_AT
    other = f"llmao:{OTHER_KNOWN}:8001:qwen"
    later = a_pass(pass_at=PASS_AT + 59.5, drift=[],
                   verdicts={other: {"state": "Loading", "memory": {"state": "Loading"}}})
    assert client.post(VERDICTS, headers=admin(), json=later).status_code == 200
    document = client.get(OBSERVATIONS, headers=admin()).json
    assert set(document["verdicts"]) == {other}
    assert (document["drift"], document["pass_at"]) == ([], PASS_AT + 59.5)
    assert state.store.last_pass().recorded_at >= PASS_AT + 59.5


@pytest.mark.parametrize(("body", "text"), [
    (b"not json", "the body must be JSON"),
    (json.dumps([]).encode(), "a JSON object"),
    (json.dumps(a_pass(pass_at="now")).encode(), "pass_at must be a time"),
    (json.dumps(a_pass(pass_at=True)).encode(), "pass_at must be a time"),
    (json.dumps(a_pass(verdicts=[])).encode(), "verdicts must be an object"),
    (json.dumps(a_pass(drift={})).encode(), "drift must be a list"),
    (json.dumps(a_pass(drift=["x"])).encode(), "every drift item must be an object"),
    (json.dumps(a_pass(verdicts={GEMMA: "Healthy"})).encode(), "must be an object"),
    (json.dumps(a_pass(verdicts={GEMMA: {"state": "Sleepy"}})).encode(), ".state must be one of"),
    (json.dumps(a_pass(verdicts={GEMMA: {"state": "Healthy", "memory": 3}})).encode(),
     ".memory must be an object"),
    (json.dumps(a_pass(verdicts={"x" * 301: {"state": "Healthy"}})).encode(),
     "a server id must be 1 to 300 characters"),
])
def test_a_bad_pass_is_refused_and_nothing_kept(client: FlaskClient, state: ServerState, body,
                                               text):
    answer = client.post(VERDICTS, headers={**admin(), "Content-Type": "application/json"},
                         data=body)
    assert answer.status_code == 400
    assert answer.json["error"]["code"] == "bad_verdicts"
    assert text in answer.json["error"]["message"]
    assert state.store.last_pass() is None


def test_the_pass_is_bounded(client: FlaskClient, state: ServerState):
    too_many = {f"llmao:b:{n}:x": {"state": "Healthy"} for n in range(MAX_VERDICTS + 1)}
    answer = client.post(VERDICTS, headers=admin(), json=a_pass(verdicts=too_many))
    assert answer.status_code == 400
    huge = b'{"pass_at": 1, "verdicts": {}, "drift": [], "pad": "' + \
        b"x" * VERDICTS_MAX_BYTES + b'"}'
    answer = client.post(VERDICTS, headers={**admin(), "Content-Type": "application/json"},
                         data=huge)
    assert answer.status_code == 413
    assert state.store.last_pass() is None


def test_reconciles_reader_takes_the_answer(client: FlaskClient, state: ServerState):
    """What the server answers is what reconcile's client reads (the two sides of one API)."""
    from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import State
    from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
        parse_observations,
    )

    state.store.note_fetches({KNOWN: 1000.5})
    client.post(VERDICTS, headers=admin(), json=a_pass())
    seen = parse_observations(client.get(OBSERVATIONS, headers=admin()).json)
    assert seen.last_fetches[KNOWN] == 1000.5 and seen.last_fetches[LEGACY] is None
    assert seen.memories[GEMMA].state is State.HEALTHY
    assert seen.pass_at == PASS_AT


@pytest.mark.parametrize(("address", "scope"), [
    ("192.0.2.7", "192.0.2.7"),
    ("::ffff:192.0.2.7", "192.0.2.7"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
    (None, "unknown"),
])
def test_an_address_counts_against_its_peer_budget(address: str | None, scope: str) -> None:
    """An IPv6 host usually holds a whole /64: counting each address apart would let it
    try without limit."""
    assert peer_scope(address) == scope
