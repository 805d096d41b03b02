"""Probing a hostile box (``rig/hostile_vllm.py``): every probe ends by its deadline.

Issue 18, items 2 and 13: the probe's timeout was per socket read, so a box dripping
a byte per period kept a probe (and the pass) running for ever; and a hostile status
line became a 64 KB reason. Each probe here runs in a thread joined with a limit, so
the old code fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
import time

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Models
from ansible_collections.llmao.fleet.plugins.module_utils.listings import Endpoint
from ansible_collections.llmao.fleet.plugins.module_utils.probe import Target, probe_many
from rig.boxes import free_port
from rig.hostile_vllm import hostile_vllm

CONNECT_S, TIMEOUT_S = 0.3, 0.3
# A server's probe ends within 2 × (connect + timeout); the rest is this loaded machine's slack.
BOUND_S = 2 * (CONNECT_S + TIMEOUT_S) + 1.0
SHORT = 120    # "one short line": a reason is at most this long
DRIP_S = 0.1   # under the per-read timeout: the old probe waited for ever


def probe_timed(faults: dict[str, str]):
    """The probe of one hostile server, and how long it took (None past the limit)."""
    port = free_port()
    found: list = []
    with hostile_vllm("127.0.0.1", port, "m", DRIP_S, faults):
        started = time.monotonic()
        worker = threading.Thread(target=lambda: found.append(probe_many(
            [Target("x", Endpoint("127.0.0.1", port, "test"), "m", "sk-key")],
            CONNECT_S, TIMEOUT_S)["x"]), daemon=True)
        worker.start()
        worker.join(BOUND_S + 5)
        elapsed = time.monotonic() - started
    assert found, f"no probe of {faults} came back (raised, or still running after {elapsed:.1f} s)"
    return found[0], elapsed


@pytest.mark.parametrize("fault", ["drip_body", "drip_headers", "slow_status"])
def test_a_dripped_scrape_ends_by_the_deadline_and_leaves_figures_unknown(fault):
    probe, elapsed = probe_timed({"/metrics": fault})
    assert elapsed <= BOUND_S
    assert (probe.health_ok, probe.models) == (True, Models.LISTS)
    assert probe.metrics.requests_running is None and probe.metrics.max_model_len == 8192
    assert probe.detail == "figures unknown: /metrics: timed out"


@pytest.mark.parametrize("path", ["/health", "/v1/models"])
@pytest.mark.parametrize("fault", ["drip_body", "drip_headers", "slow_status"])
def test_a_dripped_health_or_models_answer_ends_by_the_deadline(path, fault):
    probe, elapsed = probe_timed({path: fault})
    assert elapsed <= BOUND_S
    assert probe.models is not Models.LISTS and probe.detail == "timed out"


def test_every_path_dripped_at_once_still_ends_by_the_deadline():
    probe, elapsed = probe_timed({"*": "drip_body"})
    assert elapsed <= BOUND_S and probe.detail == "timed out"


def test_huge_bodies_are_capped():
    probe, elapsed = probe_timed({"/v1/models": "huge_body"})
    assert probe.models is Models.OTHER and elapsed <= BOUND_S
    probe, elapsed = probe_timed({"/metrics": "huge_body"})
    assert probe.models is Models.LISTS and probe.metrics.requests_running is None
    assert probe.detail.startswith("figures unknown: /metrics is over") and elapsed <= BOUND_S


@pytest.mark.parametrize("path", ["/health", "/v1/models", "/metrics"])
def test_a_hostile_status_line_is_cut_to_one_short_printable_line(path):
    probe = probe_timed({path: "status_line"})[0]
    assert probe.detail and len(probe.detail) <= SHORT
    assert probe.detail.isascii() and probe.detail.isprintable()
    assert "\x1b" not in probe.detail and "\n" not in probe.detail


@pytest.mark.parametrize("fault", ["squared", "long_label", "overflow", "long_number",
                                   "odd_unicode", "duplicate_engines"])
def test_absurd_figures_are_unknown_with_a_short_reason(fault):
    probe = probe_timed({"/metrics": fault})[0]
    assert (probe.health_ok, probe.models) == (True, Models.LISTS)
    metrics = probe.metrics
    assert (metrics.requests_running, metrics.kv_cache_tokens, metrics.requests_waiting) == \
        (None, None, None)
    assert metrics.max_model_len == 8192   # /v1/models still read
    assert probe.detail.startswith("figures unknown: ")
    assert len(probe.detail) <= SHORT


def test_the_honest_answers_of_the_double_are_read():
    probe = probe_timed({})[0]
    assert probe.detail == "" and probe.metrics.requests_running == 1
    assert probe.metrics.kv_cache_tokens == 4096 * 16


def test_json_nested_past_the_readers_depth_costs_that_server_only():
    probe = probe_timed({"/v1/models": "deep_json"})[0]
    assert probe.models is Models.OTHER and probe.metrics.max_model_len is None
