"""The lifecycle classifier, table-driven over every state and boundary.

The states as operators meet them: docs/troubleshooting.md.
"""

from __future__ import annotations

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import Lifecycle
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import (
    Action,
    Listed,
    Memory,
    Models,
    Probe,
    State,
    classify,
)

KNOBS = Lifecycle(health_grace_s=600, health_fail_threshold=3, rejected_passes=2)
NOW = 10_000.0

SERVING = Probe(True, Models.LISTS)
DOWN = Probe(False, Models.SKIPPED, "connection refused")
UP_NOT_READY = Probe(True, Models.OTHER)
REJECTING = Probe(True, Models.REJECTED)
HEALTH_500 = Probe(False, Models.FAILED, "HTTP 500")

HEALTHY_BEFORE = Memory(State.HEALTHY, 0, 0, last_healthy_at=NOW - 60)


def healthy_with(failures):
    return Memory(State.HEALTHY, failures, 0, last_healthy_at=NOW - 60)


CASES = [
    # id, last fetch, probe, listed, memory, expected state
    ("never fetched, silent", None, DOWN, Listed.NO_PROVIDERS, Memory(), State.AWAITING),
    ("never fetched, listed, silent", None, DOWN, Listed.NAMED, Memory(), State.AWAITING),
    ("fetched just now", NOW, DOWN, Listed.NO_PROVIDERS, Memory(), State.LOADING),
    ("fetched one second inside the grace", NOW - 599, DOWN, Listed.NAMED, Memory(),
     State.LOADING),
    ("fetched exactly at the grace", NOW - 600, DOWN, Listed.NAMED, Memory(), State.LOADING),
    ("fetched past the grace", NOW - 601, DOWN, Listed.NAMED, Memory(), State.STALLED),
    ("up but model not listed yet", NOW - 10, UP_NOT_READY, Listed.NAMED, Memory(),
     State.LOADING),
    ("up but wrong model past grace", NOW - 900, UP_NOT_READY, Listed.NAMED, Memory(),
     State.STALLED),
    ("serving", NOW - 10, SERVING, Listed.NAMED, Memory(), State.HEALTHY),
    ("serving without a fetch noted", None, SERVING, Listed.NO_PROVIDERS, Memory(),
     State.HEALTHY),
    ("first failure after healthy", NOW - 900, DOWN, Listed.NAMED, healthy_with(0),
     State.HEALTHY),
    ("one below the threshold", NOW - 900, DOWN, Listed.NAMED, healthy_with(1), State.HEALTHY),
    ("at the threshold", NOW - 900, HEALTH_500, Listed.NAMED, healthy_with(2), State.UNHEALTHY),
    ("past the threshold", None, DOWN, Listed.NAMED,
     Memory(State.UNHEALTHY, 5, 0, NOW - 600), State.UNHEALTHY),
    ("recovers", NOW - 900, SERVING, Listed.NAMED, Memory(State.UNHEALTHY, 5, 0, NOW - 600),
     State.HEALTHY),
    ("rebooted after healthy: a new fetch makes it Loading", NOW - 5, DOWN, Listed.NAMED,
     Memory(State.UNHEALTHY, 5, 0, NOW - 600), State.LOADING),
    ("401 first pass", NOW, REJECTING, Listed.NO_PROVIDERS, Memory(), State.REJECTED),
    ("401 at the passes, no listing names it", NOW, REJECTING, Listed.NOT_NAMED,
     Memory(State.REJECTED, 0, 1), State.FOREIGN),
    ("401 at the passes, local fleet", NOW, REJECTING, Listed.NO_PROVIDERS,
     Memory(State.REJECTED, 0, 1), State.FOREIGN),
    ("401 at the passes, a listing names it", NOW, REJECTING, Listed.NAMED,
     Memory(State.REJECTED, 0, 1), State.REJECTED),
    ("401 at the passes, listing unreadable", NOW, REJECTING, Listed.UNKNOWN,
     Memory(State.REJECTED, 0, 1), State.REJECTED),
    ("401 once healthy", NOW - 900, REJECTING, Listed.NAMED, HEALTHY_BEFORE, State.REJECTED),
    ("silent and no listing names it", NOW - 10, DOWN, Listed.NOT_NAMED, Memory(),
     State.UNLISTED),
    ("silent, never fetched, no listing names it", None, DOWN, Listed.NOT_NAMED, Memory(),
     State.UNLISTED),
    ("silent and the listing could not be read", NOW - 900, DOWN, Listed.UNKNOWN, Memory(),
     State.STALLED),
    ("answering though no listing names it", NOW - 10, UP_NOT_READY, Listed.NOT_NAMED, Memory(),
     State.LOADING),
    ("healthy box vanishes: below the threshold it is kept", NOW - 900, DOWN, Listed.NOT_NAMED,
     healthy_with(0), State.HEALTHY),
    ("healthy box vanishes: at the threshold it is Unlisted", NOW - 900, DOWN, Listed.NOT_NAMED,
     healthy_with(2), State.UNLISTED),
    ("healthy box, listing API down: never Unlisted", NOW - 900, DOWN, Listed.UNKNOWN,
     healthy_with(2), State.UNHEALTHY),
    ("a bid the provider stopped: Preempted at once", NOW - 900, DOWN, Listed.PREEMPTED,
     healthy_with(0), State.PREEMPTED),
    ("a stopped bid never fetched", None, DOWN, Listed.PREEMPTED, Memory(), State.PREEMPTED),
    ("a stopped bid that still serves is Healthy", NOW - 10, SERVING, Listed.PREEMPTED,
     Memory(), State.HEALTHY),
    ("a stopped bid answering without its model", NOW - 900, UP_NOT_READY, Listed.PREEMPTED,
     Memory(), State.STALLED),
]


@pytest.mark.parametrize(("last_fetch", "probe", "listed", "memory", "state"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_state(last_fetch, probe, listed, memory, state):
    verdict = classify(NOW, last_fetch, probe, listed, memory, KNOBS)
    assert verdict.state is state, verdict.reason
    assert verdict.memory.state is state
    assert verdict.reason


@pytest.mark.parametrize(("state", "action"), [
    (State.AWAITING, Action.KEEP), (State.LOADING, Action.KEEP), (State.STALLED, Action.DELETE),
    (State.HEALTHY, Action.ENSURE), (State.UNHEALTHY, Action.DELETE),
    (State.REJECTED, Action.DELETE), (State.FOREIGN, Action.DELETE),
    (State.UNLISTED, Action.DELETE), (State.PREEMPTED, Action.DELETE),
])
def test_every_state_has_its_action(state, action):
    from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Verdict
    assert Verdict(state, "x", Memory()).action is action


def test_failures_count_up_then_reset_on_recovery():
    memory = HEALTHY_BEFORE
    states = []
    for probe in (DOWN, DOWN, DOWN, SERVING):
        verdict = classify(NOW, NOW - 900, probe, Listed.NAMED, memory, KNOBS)
        memory = verdict.memory
        states.append((verdict.state, memory.consecutive_failures))
    assert states == [(State.HEALTHY, 1), (State.HEALTHY, 2), (State.UNHEALTHY, 3),
                      (State.HEALTHY, 0)]


def test_rejected_passes_accumulate_into_foreign():
    memory = Memory()
    seen = []
    for _pass in range(3):
        verdict = classify(NOW, NOW, REJECTING, Listed.NOT_NAMED, memory, KNOBS)
        memory = verdict.memory
        seen.append(verdict.state)
    assert seen == [State.REJECTED, State.FOREIGN, State.FOREIGN]


def test_only_unlisted_flags_the_row():
    unlisted = classify(NOW, None, DOWN, Listed.NOT_NAMED, Memory(), KNOBS)
    stalled = classify(NOW, NOW - 900, DOWN, Listed.NAMED, Memory(), KNOBS)
    assert unlisted.outlives_instance and not stalled.outlives_instance


def test_reasons_read_like_the_dashboard():
    loading = classify(NOW, NOW - 720, UP_NOT_READY, Listed.NAMED, Memory(),
                       Lifecycle(health_grace_s=900))
    stalled = classify(NOW, NOW - 720, DOWN, Listed.NAMED, Memory(), KNOBS)
    rejected = classify(NOW, NOW, REJECTING, Listed.NAMED, Memory(), KNOBS)
    assert loading.reason == "fetched its config 12 min ago; vLLM up, model loading"
    assert stalled.reason.startswith("fetched its config 12 min ago, not answering")
    assert rejected.reason.startswith("401 to our bearer")


def test_a_certificate_that_does_not_verify_is_rejected_then_foreign_with_its_reason():
    refused = Probe(False, Models.REJECTED, "a certificate the fleet CA did not sign for this "
                                            "address (certificate verify failed)")
    first = classify(NOW, NOW, refused, Listed.NOT_NAMED, Memory(), KNOBS)
    assert first.state is State.REJECTED
    assert first.reason.startswith("a certificate the fleet CA did not sign")
    memory = first.memory
    for _pass in range(2):
        verdict = classify(NOW, NOW, refused, Listed.NOT_NAMED, memory, KNOBS)
        memory = verdict.memory
    assert verdict.state is State.FOREIGN and "fleet CA did not sign" in verdict.reason


def test_a_healthy_server_says_why_its_figures_are_unknown():
    blind = Probe(True, Models.LISTS, "figures unknown: /metrics: timed out")
    verdict = classify(NOW, NOW - 10, blind, Listed.NAMED, Memory(), KNOBS)
    assert verdict.state is State.HEALTHY
    assert verdict.reason == "serving its model with our bearer; figures unknown: /metrics: " \
                             "timed out"
    assert classify(NOW, NOW - 10, SERVING, Listed.NAMED, Memory(), KNOBS).reason == \
        "serving its model with our bearer"


def test_preempted_says_the_provider_stopped_it():
    verdict = classify(NOW, NOW - 900, DOWN, Listed.PREEMPTED, healthy_with(1), KNOBS)
    assert verdict.reason.startswith("preempted: the provider stopped it")
    assert verdict.memory.last_healthy_at == healthy_with(1).last_healthy_at
