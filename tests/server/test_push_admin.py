"""The push path speaks as the controller: it reports what it applied on a box and reads that
box's turn through the admin API, never through the box API with the fleet key."""

from __future__ import annotations

import time

from flask import Flask
from flask.testing import FlaskClient

from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import box_path
from llmao_server.state import app_state
from tests.server.fleet_pair import KNOWN, UNKNOWN, box_headers
from tests.server.test_admin_api import admin

TOKEN_HEADER = "X-LLMAO-Box-Token"


def report(revision: str) -> dict:
    return {"revision": revision, "applied_at": "2026-01-02T03:04:05Z",
            "servers": [{"name": "gemma", "port": 8001, "served_model_name": "gemma"}]}


def test_a_pushed_box_reports_applied_as_the_controller_even_when_bound(
        client: FlaskClient, app: Flask) -> None:
    state = app_state(app)
    token = client.get("/vllm/config", headers=box_headers()).headers[TOKEN_HEADER]
    client.get("/vllm/config", headers={**box_headers(), TOKEN_HEADER: token})
    intended = state.fleet.assignment(KNOWN).revision
    before = time.time()
    answer = client.post(box_path(KNOWN, "applied"), headers=admin(), json=report(intended))
    assert answer.status_code == 200, answer.json
    assert answer.json == {"host": KNOWN, "revision": intended, "intended_revision": intended,
                           "current": True}
    assert state.store.applied_reports()[KNOWN].revision == intended
    # The Loading window starts now, and is in the store with the record, no flush needed:
    # a pass that reads the revision as applied reads the window too.
    assert state.store.fetch_times()[KNOWN] >= before
    assert state.store.binding_conflicts() == []


def test_a_revision_llmao_does_not_intend_is_refused_and_not_kept(client: FlaskClient,
                                                                   app: Flask) -> None:
    answer = client.post(box_path(KNOWN, "applied"), headers=admin(), json=report("0" * 16))
    assert answer.status_code == 409
    assert "reload llmao" in answer.json["error"]["message"]
    assert app_state(app).store.applied_reports() == {}


def test_the_push_paths_box_routes_need_the_admin_token(client: FlaskClient) -> None:
    for method, path in (("POST", box_path(KNOWN, "applied")), ("GET", box_path(KNOWN, "turn"))):
        assert client.open(path, method=method, headers=box_headers(),
                           json={}).status_code == 403


def test_one_boxs_turn_is_read_by_name(client: FlaskClient, app: Flask) -> None:
    answer = client.get(box_path(KNOWN, "turn"), headers=admin())
    assert answer.status_code == 200
    assert answer.json == {"box": KNOWN, "turn": None,
                           "revision": app_state(app).fleet.assignment(KNOWN).revision}
    assert client.get(box_path(UNKNOWN, "turn"), headers=admin()).status_code == 404
