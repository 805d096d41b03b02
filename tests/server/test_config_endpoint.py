"""GET /vllm/config: the gate, the box name, the answer, to the letter of the seed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from llmao_server.state import ServerState, app_state
from tests.server.fleet_pair import (
    FLEET_KEY,
    KNOWN,
    LEGACY,
    OTHER_KNOWN,
    UNKNOWN,
    box_headers,
    config,
)

# ------------------------------------------------------------------- the gate


@pytest.mark.parametrize(("authorization", "code"), [
    (None, "fleet_key_required"),
    ("", "fleet_key_required"),
    (f"Basic {FLEET_KEY}", "fleet_key_required"),
    ("Bearer", "fleet_key_required"),
    ("Bearer ", "fleet_key_required"),
    (FLEET_KEY, "fleet_key_required"),
    ("Bearer wrong-key", "fleet_key_wrong"),
    (f"Bearer {FLEET_KEY}x", "fleet_key_wrong"),
    (f"Bearer {FLEET_KEY[:-1]}", "fleet_key_wrong"),
    (f"Bearer {FLEET_KEY} extra", "fleet_key_wrong"),
])
def test_a_request_without_the_fleet_key_is_forbidden(client: FlaskClient,
                                                      authorization: str | None,
                                                      code: str) -> None:
    headers = box_headers(key=None)
    if authorization is not None:
        headers["Authorization"] = authorization
    answer = client.get("/vllm/config", headers=headers)
    assert answer.status_code == 403
    assert answer.json["error"]["code"] == code
    assert FLEET_KEY not in answer.get_data(as_text=True)


@pytest.mark.parametrize("authorization", [f"bearer {FLEET_KEY}", f"BEARER {FLEET_KEY}",
                                           f"Bearer  {FLEET_KEY} "])
def test_the_scheme_is_case_insensitive_and_spaces_around_the_key_do_not_count(
        client: FlaskClient, authorization: str) -> None:
    headers = {**box_headers(), "Authorization": authorization}
    assert client.get("/vllm/config", headers=headers).status_code == 200


@pytest.mark.parametrize("fleet_key", [None, "", "CHANGE_ME", "CHANGE_ME-before-use"])
@pytest.mark.parametrize("presented", [None, FLEET_KEY, "CHANGE_ME", ""])
def test_no_fleet_key_configured_is_503_whatever_the_request_carries(
        make_app: Callable[..., Flask], fleet_key: str | None, presented: str | None) -> None:
    client = make_app(config(key=fleet_key)).test_client()
    answer = client.get("/vllm/config", headers=box_headers(key=presented))
    assert answer.status_code == 503
    assert answer.json["error"]["code"] == "fleet_key_not_configured"
    assert answer.json["error"]["type"] == "unavailable_error"


# --------------------------------------------------------------- the box name


@pytest.mark.parametrize(("host", "xff", "peer", "served"), [
    (KNOWN, None, "127.0.0.1", KNOWN),
    (f" {KNOWN} ", None, "127.0.0.1", KNOWN),
    (f"::ffff:{KNOWN}", None, "127.0.0.1", KNOWN),
    (KNOWN, UNKNOWN, UNKNOWN, KNOWN),
    (None, KNOWN, "127.0.0.1", KNOWN),
    (None, f"{KNOWN}, 10.0.0.1", "127.0.0.1", KNOWN),
    (None, f"  {KNOWN} ,10.0.0.1,10.0.0.2", "127.0.0.1", KNOWN),
    (None, f"{OTHER_KNOWN},{KNOWN}", KNOWN, OTHER_KNOWN),
    (None, None, KNOWN, KNOWN),
    (None, None, f"::ffff:{KNOWN}", KNOWN),
    (None, "", KNOWN, KNOWN),
    (None, " , 10.0.0.9", KNOWN, KNOWN),
    (None, None, LEGACY, LEGACY),
])
def test_a_known_box_gets_its_assignment_bytes(client: FlaskClient, state: ServerState,
                                               host: str | None, xff: str | None, peer: str,
                                               served: str) -> None:
    answer = client.get("/vllm/config", headers=box_headers(host=host, xff=xff),
                        environ_base={"REMOTE_ADDR": peer})
    assert answer.status_code == 200
    assert answer.get_data() == state.fleet.assignment(served).body
    assert answer.mimetype == "application/json"
    assert answer.headers["Cache-Control"] == "no-store"


def test_the_answer_is_the_seed_shape_with_a_revision(client: FlaskClient) -> None:
    doc = client.get("/vllm/config", headers=box_headers()).json
    assert set(doc) == {"host", "servers", "revision"}
    assert doc["host"] == KNOWN
    assert [(s["name"], s["port"]) for s in doc["servers"]] == [("gemma", 8001), ("qwen", 8002)]
    assert doc["servers"][1]["served_model_name"] == "qwen-served"
    assert all(s["api_key"].startswith("sk-vllm-") for s in doc["servers"])


@pytest.mark.parametrize(("host", "xff", "peer"), [
    (UNKNOWN, None, KNOWN),
    (UNKNOWN, KNOWN, KNOWN),
    ("", None, KNOWN),
    ("   ", KNOWN, KNOWN),
    (None, UNKNOWN, KNOWN),
    (None, f"{UNKNOWN}, {KNOWN}", KNOWN),
    (None, None, UNKNOWN),
])
def test_an_unknown_claim_is_404_with_no_fallback(client: FlaskClient, host: str | None,
                                                  xff: str | None, peer: str) -> None:
    answer = client.get("/vllm/config", headers=box_headers(host=host, xff=xff),
                        environ_base={"REMOTE_ADDR": peer})
    assert answer.status_code == 404
    empty = host is not None and not host.strip()
    assert answer.json["error"]["code"] == ("empty_host" if empty else "unknown_host")
    assert "api_key" not in answer.get_data(as_text=True)


def test_a_very_long_claim_is_shortened_in_the_message(client: FlaskClient) -> None:
    answer = client.get("/vllm/config", headers=box_headers(host="x" * 5000))
    assert answer.status_code == 404
    assert len(answer.json["error"]["message"]) < 300


# ------------------------------------------------------ what the server notes


def test_a_fetch_time_is_noted_and_reaches_the_store(client: FlaskClient,
                                                     state: ServerState) -> None:
    before = time.time()
    client.get("/vllm/config", headers=box_headers())
    after = time.time()
    state.recorder.flush()
    assert before <= state.store.fetch_times()[KNOWN] <= after


def test_the_store_sees_a_fetch_within_about_a_second_without_a_flush(
        client: FlaskClient, state: ServerState) -> None:
    client.get("/vllm/config", headers=box_headers())
    deadline = time.monotonic() + 3
    while KNOWN not in state.store.fetch_times() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert KNOWN in state.store.fetch_times()


def test_refused_requests_note_no_fetch(client: FlaskClient, state: ServerState) -> None:
    client.get("/vllm/config", headers=box_headers(key="wrong"))
    client.get("/vllm/config", headers=box_headers(key=None))
    state.recorder.flush()
    assert state.store.fetch_times() == {}
    assert state.store.unknown_boxes() == []


def test_an_unknown_box_is_remembered_with_first_and_last_seen_and_a_count(
        client: FlaskClient, state: ServerState) -> None:
    start = time.time()
    for _ in range(3):
        client.get("/vllm/config", headers=box_headers(host=UNKNOWN))
    client.get("/vllm/config", headers=box_headers(host=""))
    state.recorder.flush()
    seen = {u.name: u for u in state.store.unknown_boxes()}
    assert set(seen) == {UNKNOWN}  # an empty name is refused, never remembered
    assert seen[UNKNOWN].count == 3
    assert start <= seen[UNKNOWN].first_seen <= seen[UNKNOWN].last_seen <= time.time()
    assert KNOWN not in state.store.fetch_times()


def test_the_unknown_list_keeps_the_newest_fifty(client: FlaskClient,
                                                 state: ServerState) -> None:
    for index in range(60):
        client.get("/vllm/config", headers=box_headers(host=f"10.9.0.{index}"))
    state.recorder.flush()
    names = [u.name for u in state.store.unknown_boxes()]
    assert len(names) == 50
    assert names[0] == "10.9.0.59"
    assert set(names) == {f"10.9.0.{index}" for index in range(10, 60)}


def test_a_name_that_joins_fleet_hosts_leaves_the_unknown_list(
        make_app: Callable[..., Flask]) -> None:
    first = make_app()
    first.test_client().get("/vllm/config", headers=box_headers(host=UNKNOWN))
    first.test_client().get("/vllm/config", headers=box_headers(host="192.0.2.99"))
    app_state(first).close()
    hosts = {**config()["fleet"]["hosts"], UNKNOWN: [["gemma", 8001]]}
    second = make_app(config(hosts=hosts), folder="joined")
    remaining = [u.name for u in app_state(second).store.unknown_boxes()]
    assert remaining == ["192.0.2.99"]
    answer = second.test_client().get("/vllm/config", headers=box_headers(host=UNKNOWN))
    assert answer.status_code == 200


# ---------------------------------------------------------------- approvals


def test_an_approved_box_is_served_its_models_on_8001_and_8002(
        client: FlaskClient, state: ServerState) -> None:
    assert client.get("/vllm/config", headers=box_headers(host=UNKNOWN)).status_code == 404
    state.approve(UNKNOWN, ["qwen", "gemma"], "admin", time.time())
    answer = client.get("/vllm/config", headers=box_headers(host=UNKNOWN))
    assert answer.status_code == 200
    assert answer.get_data() == state.fleet.approved_assignment(UNKNOWN, ["qwen", "gemma"]).body
    servers = answer.json["servers"]
    assert [(s["name"], s["port"]) for s in servers] == [("qwen", 8001), ("gemma", 8002)]
    state.recorder.flush()
    assert UNKNOWN in state.store.fetch_times()


def test_an_approval_is_seen_by_every_app_on_the_same_store(make_app: Callable[..., Flask]) -> None:
    first, second = make_app(), make_app()
    app_state(first).approve(UNKNOWN, ["gemma"], "admin", time.time())
    answer = second.test_client().get("/vllm/config", headers=box_headers(host=UNKNOWN))
    assert answer.status_code == 200
    assert [s["port"] for s in json.loads(answer.get_data())["servers"]] == [8001]


@pytest.mark.parametrize(("box", "models"), [
    (KNOWN, ["gemma"]), (UNKNOWN, []), (UNKNOWN, ["gpt"]), (UNKNOWN, ["nope"]),
    (UNKNOWN, ["gemma", "gemma"]), (UNKNOWN, ["gemma", "qwen", "gemma", "qwen"]), ("", ["gemma"]),
])
def test_an_approval_the_core_refuses_is_not_stored(state: ServerState, box: str,
                                                    models: list[str]) -> None:
    from ansible_collections.llmao.fleet.plugins.module_utils.fleet import ApprovalError

    with pytest.raises(ApprovalError):
        state.approve(box, models, "admin", time.time())
    assert state.store.approvals() == []


def test_healthz_needs_no_key(app: Flask) -> None:
    answer = app.test_client().get("/healthz")
    assert answer.status_code == 200
    assert answer.json == {"status": "ok"}


# ------------------------------------------------- ETag and If-None-Match


def revision_of(state: ServerState, box: str = KNOWN) -> str:
    return state.fleet.assignment(box).revision


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_every_200_carries_the_revision_as_its_etag(client: FlaskClient, state: ServerState,
                                                    method: str) -> None:
    answer = client.open("/vllm/config", method=method, headers=box_headers())
    assert answer.status_code == 200
    assert answer.headers["ETag"] == f'"{revision_of(state)}"'


@pytest.mark.parametrize("if_none_match", [
    '"{rev}"', 'W/"{rev}"', '"other", "{rev}"', ' "{rev}" ', "*",
], ids=["exact", "weak", "in-a-list", "spaces", "star"])
def test_if_none_match_naming_the_revision_is_304_without_a_body(
        client: FlaskClient, state: ServerState, if_none_match: str) -> None:
    headers = {**box_headers(), "If-None-Match": if_none_match.format(rev=revision_of(state))}
    answer = client.get("/vllm/config", headers=headers)
    assert answer.status_code == 304
    assert answer.get_data() == b""
    assert answer.headers["ETag"] == f'"{revision_of(state)}"'
    assert "Content-Type" not in answer.headers


@pytest.mark.parametrize("if_none_match", ['"old-revision"', "", '{rev}', '"{rev}x"'],
                         ids=["old", "empty", "unquoted", "longer"])
def test_if_none_match_naming_another_revision_gets_the_whole_answer(
        client: FlaskClient, state: ServerState, if_none_match: str) -> None:
    headers = {**box_headers(), "If-None-Match": if_none_match.format(rev=revision_of(state))}
    answer = client.get("/vllm/config", headers=headers)
    assert answer.status_code == 200
    assert answer.get_data() == state.fleet.assignment(KNOWN).body


def test_each_box_has_its_own_etag(client: FlaskClient, state: ServerState) -> None:
    """A box cannot get a 304 by naming another box's revision."""
    headers = {**box_headers(host=OTHER_KNOWN),
               "If-None-Match": f'"{revision_of(state, KNOWN)}"'}
    answer = client.get("/vllm/config", headers=headers)
    assert answer.status_code == 200
    assert answer.headers["ETag"] == f'"{revision_of(state, OTHER_KNOWN)}"'


@pytest.mark.parametrize(("headers", "status"), [
    ({"Authorization": "Bearer wrong"}, 403),
    ({"X-LLMAO-Host": UNKNOWN}, 404),
], ids=["wrong-key", "unknown-box"])
def test_the_gate_comes_before_a_304(client: FlaskClient, state: ServerState,
                                     headers: dict[str, str], status: int) -> None:
    answer = client.get("/vllm/config", headers={
        **box_headers(), **headers, "If-None-Match": f'"{revision_of(state)}"'})
    assert answer.status_code == status
    assert "ETag" not in answer.headers


def test_no_fleet_key_is_503_before_a_304(make_app: Callable[..., Flask]) -> None:
    client = make_app(config(key=None)).test_client()
    answer = client.get("/vllm/config", headers={**box_headers(), "If-None-Match": "*"})
    assert answer.status_code == 503


@pytest.mark.parametrize(("if_none_match", "status"),
                         [('"{rev}"', 304), ('"0123456789abcdef"', 200)],
                         ids=["answered-304", "answered-200"])
def test_a_follow_check_notes_a_check_not_a_fetch(client: FlaskClient, state: ServerState,
                                                   if_none_match: str, status: int) -> None:
    headers = {**box_headers(), "If-None-Match": if_none_match.format(rev=revision_of(state))}
    before = time.time()
    assert client.get("/vllm/config", headers=headers).status_code == status
    state.recorder.flush()
    assert before <= state.store.check_times()[KNOWN] <= time.time()
    assert state.store.fetch_times() == {}


def test_a_fetch_after_checks_is_noted_as_a_fetch(client: FlaskClient,
                                                  state: ServerState) -> None:
    check = {**box_headers(), "If-None-Match": f'"{revision_of(state)}"'}
    client.get("/vllm/config", headers=check)
    before = time.time()
    client.get("/vllm/config", headers=box_headers())
    state.recorder.flush()
    assert before <= state.store.fetch_times()[KNOWN]
    assert state.store.check_times()[KNOWN] < before
