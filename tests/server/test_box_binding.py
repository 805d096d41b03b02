"""Per-box identity (docs/box-identity.md): a box name is bound to the box that first fetched it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from llmao_server.binding_cache import BindingCache
from llmao_server.boxes.bindings import TOKEN_HEADER, token_hash
from llmao_server.state import app_state
from llmao_server.store import SqliteStore, StoreError
from tests.server.binding_steps import bind, confirm
from tests.server.binding_steps import release as release_in
from tests.server.fleet_pair import ADMIN_TOKEN, KNOWN, OTHER_KNOWN, box_headers, config


def fetch(client: FlaskClient, token: str | None = None, host: str = KNOWN,
          **headers: str) -> tuple[int, str | None, dict]:
    sent = box_headers(host)
    if token is not None:
        sent[TOKEN_HEADER] = token
    sent.update(headers)
    answer = client.get("/vllm/config", headers=sent)
    return answer.status_code, answer.headers.get(TOKEN_HEADER), answer.json or {}


def post(client: FlaskClient, path: str, body: dict, token: str | None = None) -> int:
    sent = box_headers()
    if token is not None:
        sent[TOKEN_HEADER] = token
    return client.post(path, json=body, headers=sent).status_code


def release(client: FlaskClient, box: str = KNOWN) -> dict:
    answer = client.delete(f"/admin/api/boxes/{box}/binding",
                           headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert answer.status_code == 200
    return answer.json


def test_the_first_fetch_hands_out_a_token_and_the_payload_is_unchanged(
        make_app: Callable[..., Flask]) -> None:
    bound = make_app().test_client()
    plain = make_app(config(binding="off"), folder="off", state="off.sqlite3").test_client()
    status, token, payload = fetch(bound)
    assert status == 200 and token is not None and len(token) >= 32
    assert token.replace("-", "").replace("_", "").isalnum()
    assert payload == fetch(plain)[2]
    assert fetch(plain)[1] is None


def test_pending_then_confirmed_then_refused_without_the_token(client: FlaskClient) -> None:
    _, token, _ = fetch(client)
    status, again, _ = fetch(client, token)
    assert (status, again) == (200, None)  # presented: confirmed, no new token
    status, none, body = fetch(client)
    assert (status, none) == (403, None)
    assert body["error"]["code"] == "box_token_required"
    assert KNOWN in body["error"]["message"] and "release" in body["error"]["message"]
    status, _, body = fetch(client, "x" * 43)
    assert (status, body["error"]["code"]) == (403, "box_token_mismatch")
    assert "sk-vllm" not in str(body)
    assert fetch(client, token)[0] == 200


def test_a_lost_first_answer_never_strands_the_box(client: FlaskClient) -> None:
    _, lost, _ = fetch(client)
    _, kept, _ = fetch(client)
    assert lost != kept
    assert fetch(client, lost)[0] == 403  # the void one
    assert fetch(client, kept)[0] == 200


def test_every_box_route_checks_the_token(client: FlaskClient) -> None:
    _, token, _ = fetch(client)
    fetch(client, token)
    applied = {"revision": "r", "applied_at": "2026-01-01T00:00:00Z", "servers": []}
    ask = {"revision": "r", "servers": ["gemma"]}
    assert post(client, "/vllm/applied", applied) == 403
    assert post(client, "/vllm/turn", ask) == 403
    assert post(client, "/vllm/applied", applied, token) == 200
    assert post(client, "/vllm/turn", ask, token) == 409  # past the gate: a stale revision
    head = client.head("/vllm/config", headers=box_headers())
    assert head.status_code == 403


def test_304_works_with_the_token(client: FlaskClient) -> None:
    _, token, _ = fetch(client)
    etag = client.get("/vllm/config",
                      headers={**box_headers(), TOKEN_HEADER: token}).headers["ETag"]
    status, issued, _ = fetch(client, token, **{"If-None-Match": etag})
    assert (status, issued) == (304, None)
    assert fetch(client, None, **{"If-None-Match": etag})[0] == 403


def test_only_a_hash_is_kept_with_the_peer_time_and_instance(client: FlaskClient,
                                                             app: Flask) -> None:
    before = time.time()
    _, token, _ = fetch(client, None, **{"X-LLMAO-Box-Instance": "12345"})
    fetch(client, token)
    [binding] = app_state(app).store.bindings_since(0)
    assert binding.box == KNOWN and binding.confirmed
    assert binding.token_hash == token_hash(token) and token not in repr(binding)
    assert binding.peer == "127.0.0.1" and binding.instance == "12345"
    assert binding.bound_at >= before
    state_file = app_state(app).store.path
    with open(state_file, "rb") as db:
        assert token.encode() not in db.read()


def test_wrong_tokens_count_in_the_attempt_limit(client: FlaskClient) -> None:
    _, token, _ = fetch(client)
    fetch(client, token)
    codes = [fetch(client, f"guess-{n}")[0] for n in range(7)]
    assert codes[:5] == [403] * 5 and codes[5:] == [429, 429]
    answer = client.get("/vllm/config", headers={**box_headers(), TOKEN_HEADER: "guess"})
    assert int(answer.headers["Retry-After"]) > 0
    assert fetch(client, token)[0] == 200  # the right one never reaches the limit


def test_an_admin_release_lets_a_new_box_bind(client: FlaskClient) -> None:
    _, old, _ = fetch(client)
    fetch(client, old)
    answer = release(client)
    assert answer["released"] and answer["binding"]["state"] == "confirmed"
    assert "token" not in str(answer).lower().replace("box_token", "")
    status, new, _ = fetch(client)
    assert status == 200 and new not in (None, old)
    assert fetch(client, new)[0] == 200
    assert fetch(client, old)[0] == 403
    assert release(client, OTHER_KNOWN)["released"] is False


def test_a_release_needs_the_admin_bearer(client: FlaskClient) -> None:
    assert client.delete(f"/admin/api/boxes/{KNOWN}/binding").status_code == 401


def test_conflicts_are_counted_for_bound_names_only(client: FlaskClient, app: Flask) -> None:
    _, token, _ = fetch(client)
    fetch(client, token)
    fetch(client)
    fetch(client)
    [conflict] = app_state(app).store.binding_conflicts()
    assert (conflict.box, conflict.count, conflict.last_peer) == (KNOWN, 2, "127.0.0.1")
    release(client)
    assert app_state(app).store.binding_conflicts() == []


def test_every_worker_sees_a_binding_made_by_another(make_app: Callable[..., Flask]) -> None:
    first, second = make_app().test_client(), make_app().test_client()
    _, token, _ = fetch(first)
    assert fetch(second, token)[0] == 200  # confirmed through the other worker
    assert fetch(first)[0] == 403
    release(second)
    assert fetch(first)[0] == 200


def test_a_token_a_worker_remembers_is_forgotten_when_its_binding_changes(
        make_app: Callable[..., Flask]) -> None:
    """A confirmed token, once checked, is admitted from the worker's memory; released by
    another worker, it no longer is, and the name binds again."""
    first, second = make_app(), make_app()
    _, token, _ = fetch(first.test_client())
    assert fetch(first.test_client(), token)[:2] == (200, None)  # confirms
    assert not app_state(first).bindings.admits(KNOWN, token)
    assert fetch(first.test_client(), token)[:2] == (200, None)  # checked, then remembered
    assert app_state(first).bindings.admits(KNOWN, token)
    assert fetch(first.test_client(), token)[:2] == (200, None)
    release(second.test_client())
    app_state(first).bindings.refresh()  # what its refresher does within a second
    assert not app_state(first).bindings.admits(KNOWN, token)
    status, new, _ = fetch(first.test_client(), token)
    assert status == 200 and new not in (None, token)


def test_only_a_checked_token_of_the_binding_held_is_admitted(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "state.sqlite3"))
    cache = BindingCache(store, interval_s=60)
    token, other = "t" * 43, "u" * 43
    try:
        bind(store, KNOWN, token_hash(token), None, None, 1.0)
        pending = cache.held(KNOWN)
        cache.admit(KNOWN, token, pending)
        assert not cache.admits(KNOWN, token)  # a pending binding is always asked of the store
        confirm(store, KNOWN, token_hash(token), None, None, 2.0)
        cache.refresh()
        cache.admit(KNOWN, token, pending)  # no longer the binding held
        assert not cache.admits(KNOWN, token)
        cache.admit(KNOWN, token, cache.held(KNOWN))
        assert cache.admits(KNOWN, token)
        assert not cache.admits(KNOWN, other) and not cache.admits(OTHER_KNOWN, token)
        release_in(store, KNOWN)
        cache.refresh()
        assert not cache.admits(KNOWN, token) and not cache._admitted
    finally:
        cache.close()
        store.close()


@pytest.mark.parametrize("binding", ["off", "OFF", "", 1, "first-fetch"])
def test_fleet_binding_is_checked(make_app: Callable[..., Flask], binding: object) -> None:
    if binding == "off":
        client = make_app(config(binding=binding)).test_client()
        _, token, _ = fetch(client)
        assert token is None and fetch(client)[0] == 200 and fetch(client, "any")[0] == 200
        return
    with pytest.raises(ConfigError, match="fleet.binding"):
        make_app(config(binding=binding))


def test_each_worker_refreshes_its_bindings_in_the_background(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "state.sqlite3"))
    cache = BindingCache(store, interval_s=0.02)
    try:
        assert cache.held(KNOWN) is None  # loads, and starts the refresher
        bind(store, KNOWN, token_hash("t" * 43), None, None, 1.0)
        deadline = time.monotonic() + 5
        while cache.held(KNOWN) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cache.held(KNOWN).token_hash == token_hash("t" * 43)
        cache.close()
        release_in(store, KNOWN)
        time.sleep(0.1)
        assert cache._bindings[KNOWN].bound  # stopped: no more reads of the store
    finally:
        cache.close()
        store.close()


def test_a_store_that_cannot_be_written_still_serves_and_still_refuses(
        client: FlaskClient, app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    _, token, _ = fetch(client)
    fetch(client, token)
    store = app_state(app).store

    def fails(*args: object) -> None:
        raise StoreError("the state store cannot be written (OperationalError)")

    for write in ("decide_binding", "note_binding_conflict", "claim_attempt",
                  "release_attempt"):
        monkeypatch.setattr(store, write, fails)
    assert fetch(client, token)[:2] == (200, None)  # from memory
    assert fetch(client, host=OTHER_KNOWN)[:2] == (200, None)  # served unbound, as pending
    assert fetch(client)[0] == 403  # the memory still knows whose KNOWN is
    assert fetch(client, "z" * 43)[0] == 503  # a token it cannot count is not looked at
