"""``POST /admin/api/pools`` and the pools' series of ``GET /metrics`` (docs/pools.md): a pool
pass's report is checked, kept, counted once, and shown as the documented series; what is not
a configured pool or not of the report's shape is refused; no secret a reason quotes is kept."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from llmao_server.state import app_state
from tests.server.fleet_pair import ADMIN_TOKEN, CONFIG, FLEET_KEY
from tests.server.test_fleet_metrics import samples

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
POOLS = "/admin/api/pools"


def pool_config(*names: str) -> dict:
    """The test fleet with pools (``chat`` alone by default) on a Vast account."""
    document = copy.deepcopy(CONFIG)
    document["providers"] = {"vast": {"api_key": "vast-key-" + "k" * 30}}
    document["pools"] = {name: {
        "provider": "vast", "boxes": {"min": 1, "max": 3}, "serve": [["gemma", 8001]],
        "offer": {"gpu_names": ["RTX 4090"], "max_usd_per_hour": 0.6}}
        for name in names or ("chat",)}
    document["budget"] = {"max_usd_per_hour": 1.5}
    return document


@pytest.fixture
def pool_client(make_app: Callable[..., Flask]) -> FlaskClient:
    return make_app(pool_config()).test_client()


def pool_pass(at: float, decisions: list[dict], **changes) -> dict:
    pool = {"provider": "vast", "min_boxes": 1, "max_boxes": 3, "spend_usd_per_hour": 0.95,
            "members": [
                {"box": "chat-aaaaaaaa", "instance_id": "5001", "state": "running",
                 "status": "running", "usd_per_hour": 0.45},
                {"box": "chat-bbbbbbbb", "instance_id": None, "state": "renting",
                 "status": "not listed yet", "usd_per_hour": 0.5}],
            "decisions": decisions, **changes}
    return {"at": at, "budget_usd_per_hour": 1.5, "pools": {"chat": pool}}


def decision(kind: str, why: str, error: str | None = None) -> dict:
    return {"kind": kind, "box": "chat-bbbbbbbb", "instance_id": None, "usd_per_hour": 0.5,
            "why": why, "error": error, "at": time.time()}


def chat(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({"pool": "chat", **labels}.items()))


def test_a_pool_pass_is_kept_and_shown_in_metrics(pool_client: FlaskClient) -> None:
    assert not any(name.startswith("llmao_pool") for name, _ in
                   samples(pool_client.get("/metrics")))
    first = pool_pass(time.time() - 60, [
        decision("rent", "saturated for 3 passes"),
        decision("rent_failed", "replace chat-cccccccc: stopped: 429", "throttled"),
        decision("rent_failed", "below boxes.min: llmao refused", "something new"),
        decision("refuse", "saturated for 3 passes: the cheapest offer would take the spend "
                           "past budget.max_usd_per_hour 1.5")])
    answer = pool_client.post(POOLS, json=first, headers=ADMIN)
    assert answer.status_code == 200 and answer.json == {"recorded": True, "pools": 1}
    assert pool_client.post(POOLS, json=first, headers=ADMIN).json["recorded"] is False
    second = pool_pass(time.time(), [decision("rent", "replace chat-cccccccc: stopped"),
                                     decision("return", "chat-cccccccc is stopped")])
    pool_client.post(POOLS, json=second, headers=ADMIN)
    seen = samples(pool_client.get("/metrics"))
    assert seen[chat("llmao_pool_boxes", state="running")] == 1
    assert seen[chat("llmao_pool_boxes", state="renting")] == 1
    assert seen[chat("llmao_pool_boxes", state="stopped")] == 0
    assert seen[chat("llmao_pool_min_boxes")] == 1 and seen[chat("llmao_pool_max_boxes")] == 3
    assert seen[chat("llmao_pool_spend_usd_per_hour")] == 0.95
    assert seen[("llmao_budget_usd_per_hour", ())] == 1.5
    assert seen[chat("llmao_pool_rents_total")] == 2
    assert seen[chat("llmao_pool_replacements_total")] == 1
    assert seen[chat("llmao_pool_returns_total")] == 1
    assert seen[chat("llmao_pool_failed_rents_total", reason="throttled")] == 1
    assert seen[chat("llmao_pool_failed_rents_total", reason="llmao")] == 1
    assert seen[chat("llmao_pool_failed_rents_total", reason="provider")] == 0
    (kept,) = app_state(pool_client.application).store.pools()
    assert [d["kind"] for d in kept.decisions] == ["return", "rent", "refuse", "rent_failed",
                                                   "rent_failed", "rent"]


def test_a_secret_in_a_reason_is_not_kept(pool_client: FlaskClient) -> None:
    pool_client.post(POOLS, json=pool_pass(time.time(), [
        decision("rent_failed", f"the provider echoed {FLEET_KEY}", "refused")]), headers=ADMIN)
    (kept,) = app_state(pool_client.application).store.pools()
    assert FLEET_KEY not in str(kept.decisions) and "<redacted>" in kept.decisions[0]["why"]


@pytest.mark.parametrize("change", [
    {"pools": {"other": {}}},
    {"at": 1.0},
    {"budget_usd_per_hour": -1},
    {"chat": {"min_boxes": 4}},
    {"chat": {"members": [{"box": "x", "state": "booting"}]}},
    {"chat": {"decisions": [{"kind": "destroy-all"}]}},
    {"chat": {"decisions": [{"kind": "rent"}] * 201}},
    {"chat": {"spend_usd_per_hour": "cheap"}},
])
def test_what_is_not_a_pool_pass_is_refused(pool_client: FlaskClient, change: dict) -> None:
    document = pool_pass(time.time(), [])
    document["pools"]["chat"].update(change.get("chat", {}))
    document.update({key: value for key, value in change.items() if key != "chat"})
    answer = pool_client.post(POOLS, json=document, headers=ADMIN)
    assert answer.status_code == 400 and answer.json["error"]["code"] == "bad_pools"
    assert app_state(pool_client.application).store.pools() == []


def test_the_route_needs_the_admin_token(pool_client: FlaskClient) -> None:
    answer = pool_client.post(POOLS, json=pool_pass(time.time(), []))
    assert answer.status_code == 401


def test_a_pool_members_fetch_reaches_the_observations(pool_client: FlaskClient) -> None:
    """A pool member is a served box: reconcile reads its fetch time (Loading, then Stalled
    when it stops answering) like any box's, or a stalled member would never be replaced."""
    member = "chat-cccccccc"
    enrolled = pool_client.post(f"/admin/api/boxes/{member}/enroll", headers=ADMIN,
                                json={"ttl_s": 3600, "pool": "chat"})
    assert enrolled.status_code == 200, enrolled.json
    fetched = pool_client.get("/vllm/config", headers={
        "Authorization": f"Bearer {FLEET_KEY}", "X-LLMAO-Host": member,
        "X-LLMAO-Bootstrap-Token": enrolled.json["bootstrap_token"]})
    assert fetched.status_code == 200
    with pool_client.application.app_context():
        app_state().store.note_fetches({member: 1000.5})
    boxes = pool_client.get("/admin/api/observations", headers=ADMIN).json["boxes"]
    assert boxes[member] == {"last_fetch": 1000.5, "applied": None}
