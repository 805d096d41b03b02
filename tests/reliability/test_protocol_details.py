"""Item 9 of issue 10: HEAD on the config, HSTS over HTTPS, an empty box name.

- ``HEAD /vllm/config`` answers like ``GET`` (status, headers, length) with no
  body, and notes no fetch: nothing was handed to a box.
- Every answer over HTTPS carries ``Strict-Transport-Security``; plain HTTP
  (loopback development) does not.
- ``X-LLMAO-Host:`` with an empty value counts as present (docs/box-protocol.md), so there
  is no fallback to ``X-Forwarded-For`` or the peer; no box can have that name,
  so the seed's protocol answers 404 (code ``empty_host``), and it is not
  remembered as an unknown box. The fleet key is still checked first. Nor is a
  name no box can have (too long, spaces, not ASCII) remembered: it is unknown.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from llmao_server.state import ServerState
from llmao_server.tls.hsts import HSTS_HEADER
from rig.tls import make_server_tls
from tests.llmao_process import LlmaoServer, start_llmao_server
from tests.server.fleet_pair import KNOWN, UNKNOWN, box_headers, write_pair

# ------------------------------------------------------------------- HEAD


@pytest.mark.parametrize(("headers", "status"), [
    (box_headers(), 200),
    (box_headers(host=UNKNOWN), 404),
    (box_headers(key=None), 403),
    (box_headers(key="wrong"), 403),
])
def test_head_answers_like_get_without_a_body(client: FlaskClient, headers: dict[str, str],
                                              status: int) -> None:
    got = client.get("/vllm/config", headers=headers)
    head = client.head("/vllm/config", headers=headers)
    assert (head.status_code, got.status_code) == (status, status)
    assert head.get_data() == b""
    for name in ("Content-Type", "Content-Length", "Cache-Control"):
        assert head.headers[name] == got.headers[name]
    assert int(head.headers["Content-Length"]) == len(got.get_data()) > 0


def test_head_notes_no_fetch(client: FlaskClient, state: ServerState) -> None:
    assert client.head("/vllm/config", headers=box_headers()).status_code == 200
    state.recorder.flush()
    assert KNOWN not in state.store.fetch_times()
    assert client.get("/vllm/config", headers=box_headers()).status_code == 200
    state.recorder.flush()
    assert KNOWN in state.store.fetch_times()


def test_other_methods_name_get_and_head(client: FlaskClient) -> None:
    answer = client.put("/vllm/config", headers=box_headers())
    assert answer.status_code == 405
    assert answer.headers["Allow"] == "GET, HEAD"


# ------------------------------------------------------- an empty box name


@pytest.mark.parametrize("empty", ["", "   "])
def test_an_empty_box_name_is_refused_and_not_remembered(
        client: FlaskClient, state: ServerState, empty: str) -> None:
    answer = client.get("/vllm/config", headers=box_headers(host=empty, xff=KNOWN),
                        environ_base={"REMOTE_ADDR": KNOWN})
    assert answer.status_code == 404
    assert answer.json["error"]["code"] == "empty_host"
    assert "X-LLMAO-Host" in answer.json["error"]["message"]
    assert "servers" not in answer.get_data(as_text=True)
    state.recorder.flush()
    assert state.store.unknown_boxes() == []
    assert state.store.fetch_times() == {}


@pytest.mark.parametrize("name", ["x" * 254, "two words", "b\u00f6x", "tab\there"])
def test_a_name_no_box_can_have_is_unknown_and_not_remembered(
        client: FlaskClient, state: ServerState, name: str) -> None:
    environ = {"HTTP_X_LLMAO_HOST": name}  # as a server hands a raw header to WSGI
    answer = client.get("/vllm/config", headers=box_headers(host=None),
                        environ_base=environ)
    assert answer.status_code == 404
    assert answer.json["error"]["code"] == "unknown_host"
    longest = client.get("/vllm/config", headers=box_headers(host="y" * 253))
    assert longest.status_code == 404
    state.recorder.flush()
    assert [box.name for box in state.store.unknown_boxes()] == ["y" * 253]


def test_an_empty_box_name_without_the_key_is_403(client: FlaskClient) -> None:
    answer = client.get("/vllm/config", headers=box_headers(host="", key=None))
    assert answer.status_code == 403


# ------------------------------------------- the real server: HTTPS and HEAD


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmaoServer]:
    folder = tmp_path_factory.mktemp("https")
    tls = make_server_tls(folder / "tls", ["127.0.0.1"])
    config, models = write_pair(folder / "fleet")
    with start_llmao_server(Path(config), Path(models), folder,
                            tls=(tls.ca_file, tls.certfile, tls.keyfile),
                            options=["--state", str(folder / "state.sqlite3")]) as server:
        yield server


def answer(server: LlmaoServer, method: str, path: str,
           headers: dict[str, str] | None = None) -> tuple[http.client.HTTPResponse, bytes]:
    port = int(server.url.rsplit(":", 1)[1])
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10,
                                             context=server.context)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize(("method", "path", "headers", "status"), [
    ("GET", "/vllm/config", box_headers(), 200),
    ("GET", "/vllm/config", box_headers(key=None), 403),
    ("GET", "/vllm/nothing", {}, 404),
    ("GET", "/healthz", {}, 200),
    ("GET", "/login", {}, 200),
    ("GET", "/admin/api/observations", {}, 401),
])
def test_every_https_answer_carries_hsts(https_server: LlmaoServer, method: str, path: str,
                                         headers: dict[str, str], status: int) -> None:
    response, _ = answer(https_server, method, path, headers)
    assert response.status == status
    name, value = HSTS_HEADER
    assert response.getheader(name) == value


def test_head_over_the_real_server_has_the_length_and_no_body(
        https_server: LlmaoServer) -> None:
    got, body = answer(https_server, "GET", "/vllm/config", box_headers())
    head, nothing = answer(https_server, "HEAD", "/vllm/config", box_headers())
    assert (got.status, head.status) == (200, 200)
    assert nothing == b""
    assert int(head.getheader("Content-Length")) == len(body)
    assert "no-body response" not in https_server.log()  # the app itself sent no body


def test_plain_http_answers_carry_no_hsts(client: FlaskClient) -> None:
    assert "Strict-Transport-Security" not in client.get("/healthz").headers
