"""No secret of the fleet in any log line of the server's test run.

The session collector (``conftest.session_log``) holds every line the server
tests logged so far. This test adds a run of its own that tries every way a
secret could reach the log (in each logged header, in a fault's message, in a
report), then scans everything; the collector checks the lines of later tests
once more when the session ends.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from flask.testing import FlaskClient

from llmao_server.state import ServerState
from tests.server.fleet_pair import (
    FLEET_KEY,
    KNOWN,
    SALT,
    SECRETS,
    SHARED_BEARER,
    UNKNOWN,
    box_headers,
)

BEARER_SHAPE = re.compile(r"sk-vllm-[A-Za-z0-9_\-]")


def secrets_in(lines: list[str], bearers: list[str]) -> list[str]:
    """Every line that holds a secret or anything shaped like a vLLM bearer."""
    return [line for line in lines
            if any(s in line for s in (*SECRETS, *bearers)) or BEARER_SHAPE.search(line)]


def hostile_run(client: FlaskClient, state: ServerState, monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests that put secrets wherever a caller can, plus a fault that quotes them."""
    bearer = json.loads(client.get("/vllm/config", headers=box_headers()).get_data())[
        "servers"][0]["api_key"]
    for secret in (*SECRETS, bearer):
        for headers in (box_headers(host=secret), box_headers(key=secret),
                        box_headers(host=None, xff=f"{secret}, {KNOWN}"),
                        box_headers(host=f"Bearer {secret}", xff=secret)):
            client.get("/vllm/config", headers=headers)
            client.post("/vllm/applied", headers=headers, data=b"{}")
    client.post("/vllm/applied", headers=box_headers(),
                data=json.dumps({"revision": FLEET_KEY, "applied_at": SALT, "servers": []}))
    state.approve(UNKNOWN, ["gemma", "qwen"], "admin", time.time())
    client.get("/vllm/config", headers=box_headers(host=UNKNOWN))

    def fault(box: str) -> None:
        raise RuntimeError(f"{box}: {FLEET_KEY} {SALT} {SHARED_BEARER} {bearer}")

    monkeypatch.setattr(state, "served_assignment", fault)
    client.get("/vllm/config", headers=box_headers())
    state.recorder.flush()


def test_no_secret_reaches_the_log(client: FlaskClient, state: ServerState,
                                   monkeypatch: pytest.MonkeyPatch,
                                   session_log: list[str]) -> None:
    hostile_run(client, state, monkeypatch)
    bearers = [server.api_key for server in state.fleet.servers()]
    assert session_log, "the collector saw no line: it would prove nothing"
    assert any(" GET /vllm/config 200 " in line for line in session_log)
    assert any("Traceback" in line and "<redacted>" in line for line in session_log)
    assert secrets_in(session_log, bearers) == []
