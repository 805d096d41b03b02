"""The admin API reconcile uses: the admin token gate, observations, and the pass it records."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import parse_observations
from llmao_server.admin.json_body import BODY_MAX_BYTES
from llmao_server.admin.reconcile_pass import MAX_VERDICTS
from llmao_server.admin_attempts import peer_scope
from llmao_server.state import ServerState
from llmao_server.store import AppliedCard, AppliedReport, AppliedServer, Approval
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


def test_observations_carry_how_many_cards_a_box_reported(client: FlaskClient,
                                                          state: ServerState):
    cards = (AppliedCard(0, "NVIDIA L4", 23034), AppliedCard(1, "NVIDIA L4", 23034))
    state.store.record_applied(AppliedReport(KNOWN, "0123456789abcdef", "2026-01-31T12:00:00Z",
                                             (AppliedServer("gemma", 8001, "gemma"),), 1001.0,
                                             cards, (("gemma", (0, 1)),)))
    applied = client.get(OBSERVATIONS, headers=admin()).json["boxes"][KNOWN]["applied"]
    assert applied["cards"] == 2
    assert parse_observations(client.get(OBSERVATIONS, headers=admin()).json).cards == {
        KNOWN: 2}


def test_observations_carry_the_approvals_in_force(client: FlaskClient, state: ServerState):
    state.approve(UNKNOWN, ["qwen", "gemma"], "admin", 1000.0)
    state.store.note_fetches({UNKNOWN: 1002.0})
    # Stored before the box joined fleet.hosts: its rows decide, the approval is not in force.
    state.store.approve(Approval(OTHER_KNOWN, ("gemma",), "admin", 1001.0))
    document = client.get(OBSERVATIONS, headers=admin()).json
    assert document["approved"] == {UNKNOWN: ["qwen", "gemma"]}
    assert document["boxes"][UNKNOWN] == {"last_fetch": 1002.0, "applied": None}


def test_the_fleet_in_force_is_made_once_per_approval_set(state: ServerState):
    # Read by a box's turn ask, /metrics and the scrape targets: one rule, made again only
    # when the approvals change.
    assert state.fleet_in_force() is state.fleet_in_force() is state.fleet
    state.store.approve(Approval(OTHER_KNOWN, ("gemma",), "admin", 1001.0))
    assert state.fleet_in_force() is state.fleet
    state.approve(UNKNOWN, ["qwen", "gemma"], "admin", 1000.0)
    in_force = state.fleet_in_force()
    assert in_force is state.fleet_in_force()
    assert list(in_force.assignments) == [*state.fleet.assignments, UNKNOWN]
    assert in_force.assignments[OTHER_KNOWN] == state.fleet.assignments[OTHER_KNOWN]



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
    (json.dumps(a_pass(pass_at=10**400)).encode(), "pass_at must be a time"),
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
        b"x" * BODY_MAX_BYTES + b'"}'
    answer = client.post(VERDICTS, headers={**admin(), "Content-Type": "application/json"},
                         data=huge)
    assert answer.status_code == 413
    assert state.store.last_pass() is None


@pytest.mark.parametrize("figures", [
    {"verdicts": {GEMMA: {"state": "Healthy", "metrics": {"kv_cache_tokens": 10**401}}}},
    {"verdicts": {GEMMA: {"state": "Healthy", "cost_per_hour": 10**401}}},
    {"models": {"gemma": {"capacity": 10**401}}},
    {"models": {"gemma": {"cost_per_hour": 1.7e308}}},
])
def test_a_figure_out_of_bounds_is_refused_not_a_crash(client: FlaskClient, state: ServerState,
                                                        figures):
    # A 401-digit figure raised "int too large to convert to float": 500 (issue 18, item 3).
    answer = client.post(VERDICTS, headers=admin(), json=a_pass(**figures))
    assert answer.status_code == 400
    assert answer.json["error"]["code"] == "bad_verdicts"
    assert state.store.last_pass() is None


def test_reconciles_reader_takes_the_answer(client: FlaskClient, state: ServerState):
    """What the server answers is what reconcile's client reads (the two sides of one API)."""
    from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import State

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


# --- the pass lease ----------------------------------------------------------------------------

LEASE = "/admin/api/pass-lease"
MINE, THEIRS = "m" * 32, "t" * 32


def claim(client: FlaskClient, lease_id: str, holder: str = "ctl-1 pid 10",
          ttl_s: float = 60) -> dict:
    answer = client.post(LEASE, json={"lease_id": lease_id, "holder": holder, "ttl_s": ttl_s},
                         headers=admin())
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return answer.json


def test_a_pass_takes_the_lease_and_another_is_told_who_holds_it(client: FlaskClient) -> None:
    mine = claim(client, MINE)
    assert (mine["granted"], mine["holder"]) == (True, "ctl-1 pid 10")
    assert mine["expires_at"] - mine["now"] == pytest.approx(60, abs=1)
    theirs = client.post(LEASE, json={"lease_id": THEIRS, "holder": "ctl-2 pid 20",
                                      "ttl_s": 60}, headers=admin())
    assert (theirs.json["granted"], theirs.json["holder"]) == (False, "ctl-1 pid 10")
    assert MINE not in theirs.get_data(as_text=True)
    read = client.get(LEASE, headers=admin()).json
    assert (read["granted"], read["holder"]) == (False, "ctl-1 pid 10")
    assert MINE not in json.dumps(read)


def test_a_released_lease_is_free_for_the_next_pass(client: FlaskClient) -> None:
    claim(client, MINE)
    refused = client.post(f"{LEASE}/release", json={"lease_id": THEIRS}, headers=admin())
    assert refused.json == {"released": False}
    released = client.post(f"{LEASE}/release", json={"lease_id": MINE}, headers=admin())
    assert released.json == {"released": True}
    assert client.get(LEASE, headers=admin()).json["holder"] is None
    assert claim(client, THEIRS, "ctl-2 pid 20")["granted"] is True


def test_an_expired_lease_is_taken_over(client: FlaskClient) -> None:
    claim(client, MINE, ttl_s=1)
    time.sleep(1.1)
    taken = claim(client, THEIRS, "ctl-2 pid 20")
    assert (taken["granted"], taken["holder"]) == (True, "ctl-2 pid 20")
    assert claim(client, MINE)["granted"] is False


@pytest.mark.parametrize("body", [
    [], {"holder": "h", "ttl_s": 60}, {"lease_id": "short", "holder": "h", "ttl_s": 60},
    {"lease_id": MINE, "holder": "", "ttl_s": 60},
    {"lease_id": MINE, "holder": "h\nforged log line", "ttl_s": 60},
    {"lease_id": MINE, "holder": "h" * 201, "ttl_s": 60},
    {"lease_id": MINE, "holder": "h", "ttl_s": 0}, {"lease_id": MINE, "holder": "h", "ttl_s": 1e6},
    {"lease_id": MINE, "holder": "h", "ttl_s": True},
], ids=["not-object", "no-id", "short-id", "empty-holder", "newline", "long-holder", "ttl-0",
        "ttl-huge", "ttl-bool"])
def test_a_malformed_claim_is_400_and_takes_nothing(client: FlaskClient, body: object) -> None:
    answer = client.post(LEASE, json=body, headers=admin())
    assert answer.status_code == 400
    assert answer.json["error"]["code"] == "bad_lease"
    assert client.get(LEASE, headers=admin()).json["holder"] is None


@pytest.mark.parametrize(("method", "path"), [("GET", LEASE), ("POST", LEASE),
                                              ("POST", f"{LEASE}/release")])
def test_the_lease_needs_the_admin_token(client: FlaskClient, method: str, path: str) -> None:
    answer = client.open(path, method=method, json={"lease_id": MINE, "holder": "h",
                                                    "ttl_s": 60},
                         headers=admin("wrong-token"))
    assert answer.status_code == 403
    assert client.get(LEASE, headers=admin()).json["holder"] is None


def test_a_trusted_peers_right_token_gives_back_no_overall_attempt(
        make_app: Callable[..., Flask]) -> None:
    """Issue 18 item 8: reconcile's calls from a trusted controller must not hand a guesser
    spread over many addresses one more try each."""
    document = config()
    document["admin"]["attempts"] = {"per_peer": 5, "overall": 3, "window_s": 600,
                                     "trusted_peers": ["127.0.0.1"]}
    client = make_app(document).test_client()

    def guess(peer: str, token: str = "a-wrong-guess") -> int:
        return client.get(OBSERVATIONS, headers=admin(token),
                          environ_base={"REMOTE_ADDR": peer}).status_code

    assert [guess(f"198.51.100.{n}") for n in range(1, 4)] == [403, 403, 403]
    assert guess("198.51.100.4") == 429  # the overall limit is reached
    for _ in range(3):
        assert guess("127.0.0.1", ADMIN_TOKEN) == 200  # the controller is never stopped
    assert guess("198.51.100.5") == 429  # and gave the guessers nothing back
