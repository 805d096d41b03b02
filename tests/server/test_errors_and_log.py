"""Every error in one JSON shape, a generic 500, and one log line per box request."""

from __future__ import annotations

import logging
import re

import pytest
from flask.testing import FlaskClient

from llmao_server.state import ServerState
from tests.server.fleet_pair import FLEET_KEY, KNOWN, SALT, UNKNOWN, box_headers

ACCESS_LOGGER = "llmao_server.access"


def assert_error_shape(answer, status: int) -> dict[str, str]:
    assert answer.status_code == status
    assert answer.mimetype == "application/json"
    assert set(answer.json) == {"error"}
    error = answer.json["error"]
    assert set(error) == {"message", "type", "code"}
    assert all(isinstance(value, str) and value for value in error.values())
    return error


@pytest.mark.parametrize(("method", "path", "headers", "status"), [
    ("GET", "/vllm/config", box_headers(key=None), 403),
    ("GET", "/vllm/config", box_headers(key="wrong"), 403),
    ("GET", "/vllm/config", box_headers(host=UNKNOWN), 404),
    ("POST", "/vllm/config", box_headers(), 405),
    ("GET", "/vllm/applied", box_headers(), 405),
    ("POST", "/vllm/applied", box_headers(), 403),  # no box token: the name is not its
    ("GET", "/vllm/nothing-here", box_headers(), 404),
    ("GET", "/vllm/", {}, 404),
    ("GET", "/not-an-endpoint", {}, 404),
    ("POST", "/healthz", {}, 405),
])
def test_every_error_has_the_one_json_shape(client: FlaskClient, method: str, path: str,
                                            headers: dict[str, str], status: int) -> None:
    assert_error_shape(client.open(path, method=method, headers=headers), status)


def test_a_wrong_method_names_the_right_one(client: FlaskClient) -> None:
    answer = client.post("/vllm/config", headers=box_headers())
    assert answer.headers["Allow"] == "GET, HEAD"


@pytest.fixture
def faulty(state: ServerState, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every box lookup fail with a message that quotes secrets."""

    def explode(box: str) -> None:
        raise RuntimeError(f"lookup of {box} failed near {FLEET_KEY} and {SALT}")

    monkeypatch.setattr(state, "served_assignment", explode)


def test_a_fault_is_a_generic_500_and_a_redacted_traceback_in_the_log(
        client: FlaskClient, faulty: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        answer = client.get("/vllm/config", headers=box_headers())
    error = assert_error_shape(answer, 500)
    assert error == {"message": "internal error; the server log has the details",
                     "type": "server_error", "code": "internal_error"}
    assert FLEET_KEY not in answer.get_data(as_text=True)
    log_text = caplog.text
    assert "Traceback (most recent call last)" in log_text
    assert "RuntimeError: lookup of 203.0.113.10 failed near <redacted> and <redacted>" in log_text
    assert FLEET_KEY not in log_text and SALT not in log_text
    assert f"GET /vllm/config 500 host='{KNOWN}'" in log_text


def request_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == ACCESS_LOGGER]


@pytest.mark.parametrize(("headers", "peer", "line"), [
    (box_headers(), "127.0.0.1",
     f"GET /vllm/config 200 host='{KNOWN}' via=header peer='127.0.0.1' xff=None"),
    (box_headers(host=None, xff=f"{KNOWN}, 10.1.1.1"), "10.0.0.5",
     f"GET /vllm/config 200 host='{KNOWN}' via=forwarded peer='10.0.0.5' "
     f"xff='{KNOWN}, 10.1.1.1'"),
    (box_headers(host=None), f"::ffff:{KNOWN}",
     f"GET /vllm/config 200 host='{KNOWN}' via=peer peer='::ffff:{KNOWN}' xff=None"),
    (box_headers(host=UNKNOWN, xff="10.2.2.2"), KNOWN,
     f"GET /vllm/config 404 host='{UNKNOWN}' via=header peer='{KNOWN}' xff='10.2.2.2'"),
    (box_headers(key="wrong"), "127.0.0.1",
     f"GET /vllm/config 403 host='{KNOWN}' via=header peer='127.0.0.1' xff=None"),
    (box_headers(host="evil\x1b[2K"), "127.0.0.1",
     "GET /vllm/config 404 host='evil\\x1b[2K' via=header"),
])
def test_every_box_request_is_logged_once_with_claim_peer_and_xff(
        client: FlaskClient, caplog: pytest.LogCaptureFixture, headers: dict[str, str],
        peer: str, line: str) -> None:
    with caplog.at_level(logging.INFO):
        client.get("/vllm/config", headers=headers, environ_base={"REMOTE_ADDR": peer})
    lines = request_lines(caplog)
    assert len(lines) == 1
    assert lines[0].startswith(line)
    assert "\n" not in lines[0]


def test_a_line_break_in_a_claim_cannot_forge_a_log_line(
        client: FlaskClient, caplog: pytest.LogCaptureFixture) -> None:
    forged = "evil\n2026-01-01 GET /vllm/config 200"
    with caplog.at_level(logging.INFO):
        client.get("/vllm/config", headers=box_headers(host=None),
                   environ_base={"HTTP_X_LLMAO_HOST": forged})
    (line,) = request_lines(caplog)
    assert "\n" not in line
    assert "host='evil\\n2026-01-01 GET /vllm/config 200'" in line


def test_an_odd_path_is_logged_quoted(client: FlaskClient,
                                      caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        client.get("/vllm/x%0Ay", headers=box_headers())
    assert request_lines(caplog)[0].startswith("GET '/vllm/x\\ny' 404")


@pytest.mark.parametrize("headers", [
    box_headers(host=FLEET_KEY),
    box_headers(host=None, xff=f"Bearer {FLEET_KEY}"),
    box_headers(host=f"x{SALT}x"),
    box_headers(host="sk-vllm-AbC_d-123"),
])
def test_a_secret_sent_in_a_logged_header_is_redacted(
        client: FlaskClient, caplog: pytest.LogCaptureFixture,
        headers: dict[str, str]) -> None:
    with caplog.at_level(logging.INFO):
        client.get("/vllm/config", headers=headers)
    (line,) = request_lines(caplog)
    assert "<redacted>" in line
    assert FLEET_KEY not in line and SALT not in line
    assert not re.search(r"sk-vllm-[A-Za-z0-9]", line)


def test_the_authorization_header_is_never_logged(client: FlaskClient,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        client.get("/vllm/config", headers={**box_headers(), "Authorization": "Bearer s3cr3t-x"})
        client.get("/vllm/config", headers=box_headers())
    assert "s3cr3t-x" not in caplog.text
    assert FLEET_KEY not in caplog.text
