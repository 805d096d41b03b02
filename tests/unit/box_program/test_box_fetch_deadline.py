"""A fetch ends by its deadline however llmao's address answers (issue 18, item 10).

The box program's timeout was per socket read: an answer dripped a byte per period
held the follow loop for ever (1,058 s silent in the red-team pass). Against the
hostile double of ``rig/hostile_vllm.py``, over HTTP and HTTPS, one request now ends
``LLMAO_FETCH_TIMEOUT_S`` after it starts. Each runs in a thread joined with a limit,
so the old code fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
import time

import pytest

from rig.boxes import free_port
from rig.hostile_vllm import hostile_vllm

from .helpers import FLEET_KEY

TIMEOUT_S = 0.5
DRIP_S = 0.1   # under the per-read timeout: the old fetch waited for ever
SLACK_S = 1.0  # this loaded machine's


def timed(call):
    """What ``call`` returned or raised, and how long it took; fails past a limit."""
    found: list = []

    def run():
        try:
            found.append(call())
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            found.append(exc)

    started = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(TIMEOUT_S * 3 + SLACK_S + 5)
    elapsed = time.monotonic() - started
    assert found, f"still waiting after {elapsed:.1f} s"
    return found[0], elapsed


@pytest.mark.parametrize("fault", ["drip_body", "drip_headers", "slow_status"])
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_one_request_ends_by_its_deadline(install_set, local_ca, monkeypatch, fault, scheme):
    monkeypatch.setenv("SSL_CERT_FILE", str(local_ca.ca_file))
    port = free_port()
    tls = local_ca.server_context() if scheme == "https" else None
    with hostile_vllm("127.0.0.1", port, "m", DRIP_S, {"*": fault}, tls=tls):
        outcome, elapsed = timed(lambda: install_set.http_request(
            "GET", f"{scheme}://127.0.0.1:{port}/vllm/config", {}, None, TIMEOUT_S))
    assert isinstance(outcome, TimeoutError), outcome
    assert str(outcome) == f"no whole answer within {TIMEOUT_S:g} s"
    assert elapsed <= TIMEOUT_S + SLACK_S


def test_a_huge_answer_is_cut(install_set):
    port = free_port()
    with hostile_vllm("127.0.0.1", port, "m", DRIP_S, {"*": "huge_body"}):
        (status, body), elapsed = timed(lambda: install_set.http_request(
            "GET", f"http://127.0.0.1:{port}/vllm/config", {}, None, 10))
    assert status == 200 and len(body) == install_set.MAX_ANSWER_BYTES


def test_a_dripped_assignment_ends_the_fetch_with_exit_3(box, run_main, monkeypatch):
    port = free_port()
    monkeypatch.setenv("LLMAO_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("FLEET_KEY", FLEET_KEY)
    monkeypatch.setenv("LLMAO_FETCH_TIMEOUT_S", str(TIMEOUT_S))
    monkeypatch.setenv("LLMAO_FETCH_ATTEMPTS", "2")
    with hostile_vllm("127.0.0.1", port, "m", DRIP_S, {"/vllm/config": "drip_body"}):
        outcome, elapsed = timed(run_main)
    assert outcome.rc == 3, outcome.err
    assert f"no whole answer within {TIMEOUT_S:g} s" in outcome.err
    assert elapsed <= 2 * TIMEOUT_S + SLACK_S
    assert not any(box.conf.iterdir())


def test_an_honest_answer_is_untouched_by_the_deadline(install_set):
    port = free_port()
    with hostile_vllm("127.0.0.1", port, "m", DRIP_S):
        (status, body), _ = timed(lambda: install_set.http_request(
            "GET", f"http://127.0.0.1:{port}/v1/models", {}, None, TIMEOUT_S))
    assert status == 200 and b'"id": "m"' in body
    time.sleep(TIMEOUT_S)   # the cancelled deadline shuts nothing later
    assert threading.active_count() < 50
