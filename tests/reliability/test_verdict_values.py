"""R7 (admin API): a posted pass holds finite numbers and times near the server's clock.

Reconcile posts its verdicts with the ``now`` it read from the server, and the next
pass reads each verdict's memory back into its classifier. A ``NaN`` there, a time
years away or a counter that is a string would make every later pass misjudge (or
crash on) that server; each is refused with a 400 JSON error and nothing is kept.
"""

from __future__ import annotations

import json
import time

import pytest
from flask.testing import FlaskClient

from llmao_server.admin.reconcile_pass import CLOCK_SKEW_S, PASS_MAX_AGE_S
from llmao_server.state import ServerState
from tests.server.fleet_pair import ADMIN_TOKEN, KNOWN

VERDICTS = "/admin/api/verdicts"
SERVER_ID = f"llmao:{KNOWN}:8001:gemma"
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}


def a_pass(pass_at: object = "NOW", memory: object = None) -> str:
    """The body text, with ``NOW`` standing for this moment and any literal written as is."""
    now = time.time()
    memory = {"state": "Healthy", "consecutive_failures": 0, "rejected_passes": 0,
              "last_healthy_at": "NOW"} if memory is None else memory
    text = json.dumps({"pass_at": pass_at, "drift": [],
                       "verdicts": {SERVER_ID: {"state": "Healthy", "memory": memory}}})
    text = text.replace('"NOW"', repr(now))
    for literal in ("NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e999999999"):
        text = text.replace(f'"{literal}"', literal)
    return text


def post(client: FlaskClient, body: str):
    return client.post(VERDICTS, headers=HEADERS, data=body.encode())


def test_a_pass_of_now_is_kept(client: FlaskClient, state: ServerState):
    """The control: the same document with sound values is recorded."""
    answer = post(client, a_pass())
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert state.store.last_pass() is not None


@pytest.mark.parametrize("pass_at", [
    "NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e999999999",
    0, -1, 1e300, 1_700_000_000,
    "AGO", "AHEAD",
])
def test_pass_at_must_be_finite_and_near_now(client: FlaskClient, state: ServerState, pass_at):
    if pass_at == "AGO":
        pass_at = time.time() - PASS_MAX_AGE_S - 60
    elif pass_at == "AHEAD":
        pass_at = time.time() + CLOCK_SKEW_S + 60
    refused(post(client, a_pass(pass_at)), state)


@pytest.mark.parametrize("memory", [
    {"last_healthy_at": "NaN"},
    {"last_healthy_at": "Infinity"},
    {"last_healthy_at": "1e999"},
    {"last_healthy_at": -5},
    {"last_healthy_at": 4e9},
    {"last_healthy_at": "yesterday"},
    {"last_healthy_at": True},
    {"consecutive_failures": "3"},
    {"consecutive_failures": -1},
    {"consecutive_failures": 2.5},
    {"consecutive_failures": True},
    {"rejected_passes": 10**12},
    {"rejected_passes": "NaN"},
    {"state": "Sleepy"},
    {"state": 3},
], ids=lambda memory: json.dumps(memory))
def test_memory_holds_what_the_next_pass_reads(client: FlaskClient, state: ServerState,
                                               memory):
    refused(post(client, a_pass(memory=memory)), state)


def test_a_number_deep_in_a_verdict_is_finite(client: FlaskClient, state: ServerState):
    body = a_pass().replace('"state": "Healthy", "memory"', '"score": NaN, "state": "Healthy", '
                                                            '"memory"', 1)
    refused(post(client, body), state)


def refused(answer, state: ServerState) -> None:
    assert answer.status_code == 400, answer.get_data(as_text=True)
    assert answer.mimetype == "application/json"
    assert answer.json["error"]["code"] == "bad_verdicts"
    assert state.store.last_pass() is None


@pytest.mark.parametrize("loads", [
    {"models": []},
    {"models": {"gemma": {"capacity": "4"}}},
    {"models": {"gemma": {"saturated": 1}}},
    {"boxes": {KNOWN: {"cost_per_hour": 0.5}}},
    {"boxes": {KNOWN: {"provider": "vast", "source": "guess"}}},
    {"verdicts": {SERVER_ID: {"state": "Healthy", "metrics": {"kv_cache_tokens": "many"}}}},
    {"verdicts": {SERVER_ID: {"state": "Healthy", "oversized": "yes"}}},
], ids=lambda loads: json.dumps(loads))
def test_the_loads_have_the_shape_docs_metrics_gives(client: FlaskClient, state: ServerState,
                                                     loads):
    """What /metrics and the charts read back must be what server_load writes."""
    refused(post(client, json.dumps({**json.loads(a_pass()), **loads})), state)
