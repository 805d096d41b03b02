"""The short path of ``GET /vllm/config`` (``BoxApi.confirmed_fetch``): the fetch a boot storm is
made of, and the check a following box repeats (answered 304), are answered without a request
object, exactly as the full path answers them, and every other request still takes the full
path, which alone refuses."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from llmao_server.access_log import ACCESS_LOGGER
from llmao_server.boxes import box_api
from llmao_server.boxes.bindings import TOKEN_HEADER
from llmao_server.boxes.box_api import BoxApi
from llmao_server.state import ServerState
from tests.server.fleet_pair import FLEET_KEY, KNOWN, box_headers, config


@pytest.fixture
def full_requests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The claimed names of the requests that took the full path (built a ``BoxRequest``)."""
    made: list[str] = []
    full = box_api.BoxRequest

    def counted(environ: dict[str, Any]) -> box_api.BoxRequest:
        request = full(environ)
        made.append(request.claim[0])
        return request

    monkeypatch.setattr(box_api, "BoxRequest", counted)
    return made


def confirmed_token(client: FlaskClient) -> str:
    """Bind ``KNOWN`` (a first fetch) and confirm its binding (a fetch presenting the token)."""
    token = client.get("/vllm/config", headers=box_headers()).headers[TOKEN_HEADER]
    answer = client.get("/vllm/config", headers={**box_headers(), TOKEN_HEADER: token})
    assert answer.status_code == 200
    return token


def answer_and_line(client: FlaskClient, caplog: pytest.LogCaptureFixture,
                    headers: dict[str, str], base_url: str) -> tuple[Any, ...]:
    """Status, headers, body and access line fields (but the duration) of one fetch."""
    caplog.clear()
    with caplog.at_level(logging.INFO, ACCESS_LOGGER):
        answer = client.get("/vllm/config", headers=headers, base_url=base_url,
                            environ_base={"REMOTE_ADDR": "192.0.2.7"})
    (record,) = [record for record in caplog.records if record.name == ACCESS_LOGGER]
    fields = {key: value for key, value in record.fields.items() if key != "duration_ms"}
    return answer.status_code, answer.headers.to_wsgi_list(), answer.get_data(), fields


def test_a_confirmed_fetch_builds_no_request_and_is_noted(
        client: FlaskClient, state: ServerState, full_requests: list[str]) -> None:
    token = confirmed_token(client)
    full_requests.clear()
    for _ in range(2):  # the token checked by its hash, then remembered
        answer = client.get("/vllm/config", headers={**box_headers(), TOKEN_HEADER: token})
        assert answer.status_code == 200
        assert answer.get_data() == state.fleet.assignment(KNOWN).body
    assert full_requests == []
    state.recorder.flush()
    assert KNOWN in state.store.fetch_times()


@pytest.mark.parametrize("written", ["{tag}", "W/{tag}", '"another", {tag}'],
                         ids=["tag", "weak-tag", "list"])
def test_a_confirmed_check_builds_no_request_and_is_noted_as_a_check(
        client: FlaskClient, state: ServerState, full_requests: list[str], written: str) -> None:
    token = confirmed_token(client)
    state.recorder.flush()
    fetched = state.store.fetch_times()[KNOWN]
    full_requests.clear()
    etag = state.fleet.assignment(KNOWN).etag
    answer = client.get("/vllm/config", headers={**box_headers(), TOKEN_HEADER: token,
                                                 "If-None-Match": written.format(tag=etag)})
    assert (answer.status_code, answer.get_data(), answer.headers["ETag"]) == (304, b"", etag)
    assert full_requests == []
    state.recorder.flush()
    assert state.store.fetch_times()[KNOWN] == fetched  # a check starts no Loading window
    assert KNOWN in state.store.check_times()


@pytest.mark.parametrize("base_url", ["http://localhost", "https://localhost"])
@pytest.mark.parametrize("check", [False, True], ids=["fetch", "check"])
def test_the_short_path_answers_what_the_full_path_answers(
        client: FlaskClient, state: ServerState, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, full_requests: list[str], base_url: str,
        check: bool) -> None:
    headers = {**box_headers(xff="198.51.100.1"), TOKEN_HEADER: confirmed_token(client)}
    if check:
        headers["If-None-Match"] = state.fleet.assignment(KNOWN).etag
    full_requests.clear()
    short = answer_and_line(client, caplog, headers, base_url)
    assert short[0] == (304 if check else 200)
    assert full_requests == []
    monkeypatch.setattr(BoxApi, "confirmed_fetch", lambda self, environ: None)
    assert answer_and_line(client, caplog, headers, base_url) == short
    assert full_requests == [KNOWN]
    assert ("Strict-Transport-Security" in dict(short[1])) == base_url.startswith("https")


def test_with_binding_off_a_keyed_fetch_takes_the_short_path(
        make_app: Callable[..., Flask], full_requests: list[str]) -> None:
    client = make_app(config(binding="off")).test_client()
    assert client.get("/vllm/config", headers=box_headers()).status_code == 200
    assert full_requests == []


@pytest.mark.parametrize(("changes", "method", "status", "full"), [
    ({TOKEN_HEADER: None}, "GET", 403, True),
    ({TOKEN_HEADER: "x" * 43}, "GET", 403, True),
    ({"Authorization": "Bearer wrong"}, "GET", 403, True),
    ({"Authorization": None}, "GET", 403, True),
    ({"X-LLMAO-Host": f" ::ffff:{KNOWN} "}, "GET", 200, True),
    ({"If-None-Match": '"another-revision"'}, "GET", 200, True),
    ({"If-None-Match": "*"}, "GET", 304, False),
    ({}, "HEAD", 200, True),
    # The one rule of a presented key (bearer_header), on either path.
    ({"Authorization": f"bearer   {FLEET_KEY} "}, "GET", 200, False),
], ids=["no-token", "wrong-token", "wrong-key", "no-key", "name-written-otherwise",
        "check-naming-another-revision", "check-naming-any-revision", "head",
        "key-written-otherwise"])
def test_every_other_fetch_takes_the_full_path(
        client: FlaskClient, full_requests: list[str], changes: dict[str, str | None],
        method: str, status: int, full: bool) -> None:
    headers: dict[str, str | None] = {**box_headers(), TOKEN_HEADER: confirmed_token(client)}
    headers.update(changes)
    full_requests.clear()
    sent = {key: value for key, value in headers.items() if value is not None}
    answer = client.open("/vllm/config", method=method, headers=sent)
    assert answer.status_code == status
    assert full_requests == ([KNOWN] if full else [])
