"""POST /vllm/applied: same gate as the config, a checked body, the revision kept."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from flask.testing import FlaskClient

from llmao_server.state import ServerState
from llmao_server.store import AppliedCard, AppliedReport, AppliedServer
from tests.server.fleet_pair import KNOWN, UNKNOWN, bound_headers


def report(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "revision": "0123456789abcdef",
        "applied_at": "2026-11-30T12:00:00Z",
        "servers": [{"name": "gemma", "port": 8001, "served_model_name": "gemma"},
                    {"name": "qwen", "port": 8002, "served_model_name": "qwen-served"}],
    }
    body.update(changes)
    return body


def post(client: FlaskClient, body: Any, **header_options: Any):
    return client.post("/vllm/applied", data=json.dumps(body),
                       headers={**bound_headers(client, **header_options),
                                "Content-Type": "application/json"})


def test_a_report_of_the_intended_revision_is_current_and_kept(client: FlaskClient,
                                                               state: ServerState) -> None:
    intended = state.fleet.assignment(KNOWN).revision
    before = time.time()
    answer = post(client, report(revision=intended))
    assert answer.status_code == 200
    assert answer.json == {"host": KNOWN, "revision": intended,
                           "intended_revision": intended, "current": True}
    kept = state.store.applied_reports()[KNOWN]
    assert kept.revision == intended
    assert kept.applied_at == "2026-11-30T12:00:00Z"
    assert kept.servers == (AppliedServer("gemma", 8001, "gemma"),
                            AppliedServer("qwen", 8002, "qwen-served"))
    assert before <= kept.reported_at <= time.time()


def test_an_older_revision_is_kept_and_reported_behind(client: FlaskClient,
                                                       state: ServerState) -> None:
    answer = post(client, report(revision="old-revision"))
    assert answer.json["current"] is False
    assert answer.json["intended_revision"] == state.fleet.assignment(KNOWN).revision
    assert state.store.applied_reports()[KNOWN].revision == "old-revision"


def test_an_approved_box_reports_against_its_approved_assignment(
        client: FlaskClient, state: ServerState) -> None:
    intended = state.approve(UNKNOWN, ["gemma"], "admin", time.time()).revision
    answer = post(client, report(revision=intended, servers=[]), host=UNKNOWN)
    assert answer.json == {"host": UNKNOWN, "revision": intended,
                           "intended_revision": intended, "current": True}


@pytest.mark.parametrize(("options", "status"), [
    ({"key": None}, 403), ({"key": "wrong"}, 403), ({"host": UNKNOWN}, 404), ({"host": ""}, 404),
])
def test_the_gate_and_the_box_name_are_those_of_the_config(
        client: FlaskClient, state: ServerState, options: dict[str, Any], status: int) -> None:
    assert post(client, report(), **options).status_code == status
    assert state.store.applied_reports() == {}


@pytest.mark.parametrize("body", [
    [],
    "text",
    None,
    report(revision=None),
    report(revision=""),
    report(revision=7),
    report(revision="r" * 201),
    report(revision="r" * 129),
    report(revision="bad\nrevision"),
    report(applied_at=None),
    report(applied_at="yesterday"),
    report(applied_at="2026-13-01T00:00:00Z"),
    report(servers=None),
    report(servers={"name": "gemma"}),
    report(servers=[{"name": "a", "port": 8001, "served_model_name": "a"}] * 4),
    report(servers=["gemma"]),
    report(servers=[{"port": 8001, "served_model_name": "gemma"}]),
    report(servers=[{"name": "gemma", "served_model_name": "gemma"}]),
    report(servers=[{"name": "gemma", "port": "8001", "served_model_name": "gemma"}]),
    report(servers=[{"name": "gemma", "port": True, "served_model_name": "gemma"}]),
    report(servers=[{"name": "gemma", "port": 0, "served_model_name": "gemma"}]),
    report(servers=[{"name": "gemma", "port": 65536, "served_model_name": "gemma"}]),
    report(servers=[{"name": "gemma", "port": 8001, "served_model_name": ""}]),
    *(report(cards=cards) for cards in [
        {"index": 0}, [0], [{"index": 0, "name": "A100"}],
        [{"index": -1, "name": "A100", "memory_total_mib": 81920}],
        [{"index": 64, "name": "A100", "memory_total_mib": 81920}],
        [{"index": True, "name": "A100", "memory_total_mib": 81920}],
        [{"index": 0, "name": "A100", "memory_total_mib": 10**8}],
        [{"index": 0, "name": "A100", "memory_total_mib": 1.5}],
        [{"index": 0, "name": "x" * 65, "memory_total_mib": 1}],
        [{"index": 0, "name": "bad\nname", "memory_total_mib": 1}],
        [{"index": 0, "name": "A100", "memory_total_mib": 1}] * 2,
        [{"index": i, "name": "A", "memory_total_mib": 1} for i in range(65)]]),
    *(report(cards=[{"index": 0, "name": "A", "memory_total_mib": 1},
                    {"index": 1, "name": "A", "memory_total_mib": 1}], placement=placement)
      for placement in [[["gemma", [0]]], {"gemma": 0}, {"gemma": []}, {"gemma": [0, 0]},
                        {"gemma": [2]}, {"gemma": ["0"]}, {"llama": [0]},
                        {"gemma": [0], "qwen": [1], "x": [0], "y": [1]}]),
    report(placement={"gemma": [0]}),
])
def test_a_bad_body_is_400_with_a_json_error_and_nothing_kept(
        client: FlaskClient, state: ServerState, body: Any) -> None:
    answer = post(client, body)
    assert answer.status_code == 400
    assert answer.json["error"]["code"] == "bad_applied_report"
    assert answer.json["error"]["type"] == "invalid_request_error"
    assert state.store.applied_reports() == {}


@pytest.mark.parametrize("data", [b"", b"{not json", b"\xff\xfe", b"[" * 8000 + b"]" * 8000])
def test_a_body_that_is_not_json_is_400(client: FlaskClient, data: bytes) -> None:
    answer = client.post("/vllm/applied", data=data, headers=bound_headers(client))
    assert answer.status_code == 400
    assert answer.json["error"]["code"] == "bad_applied_report"


def test_a_body_beyond_the_limit_is_413_and_not_read(client: FlaskClient,
                                                     state: ServerState) -> None:
    answer = post(client, report(padding="x" * 20_000))
    assert answer.status_code == 413
    assert answer.json["error"]["type"] == "invalid_request_error"
    assert state.store.applied_reports() == {}


def test_extra_keys_are_ignored(client: FlaskClient, state: ServerState) -> None:
    assert post(client, report(note="from a newer box program")).status_code == 200
    assert isinstance(state.store.applied_reports()[KNOWN], AppliedReport)


def test_cards_and_placement_are_kept_in_index_order(client: FlaskClient,
                                                     state: ServerState) -> None:
    cards = [{"index": 1, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920},
             {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920}]
    assert post(client, report(cards=cards, placement={"gemma": [1, 0], "qwen": [0]})
                ).status_code == 200
    kept = state.store.applied_reports()[KNOWN]
    assert kept.cards == (AppliedCard(0, "NVIDIA A100-SXM4-80GB", 81920),
                          AppliedCard(1, "NVIDIA A100-SXM4-80GB", 81920))
    assert kept.placement == (("gemma", (0, 1)), ("qwen", (0,)))
    assert post(client, report()).status_code == 200
    assert state.store.applied_reports()[KNOWN].cards == ()
