"""Issue 12's pull-path acceptance (R10, docs/rolling-changes.md): a following fleet of three
container boxes rolls a change box by box under a steady chat load through LiteLLM's real
proxy, and stops itself on a change that fails to start.

1. ``max_model_len`` changes in models.yaml and llmao reloads: no request fails (plain chats
   and streams, some streams longer than a second), LiteLLM never routes fewer than two of the
   three servers, turns never overlap, and every box ends on the new revision serving the new
   context.
2. A second change to a context the vLLM stub refuses (it exits at start as vLLM does on a bad
   value): the first box to take its turn fails, the turn is recorded failed and the rollout
   paused, the two others stay on the revision before and keep serving, no request fails.

The fleet (boxes booted from the template, llmao-server, LiteLLM, reconcile.yml in a loop) is
tests/rolling_fleet.py.
"""

from __future__ import annotations

import time

import pytest

from rig.chat_load import ChatLoad
from rig.route_watch import RouteWatch
from tests.rolling_fleet import (
    BAD_CONTEXT,
    FOLLOWING,
    GOOD_CONTEXT,
    MODEL,
    RollingFleet,
    assert_rolled,
    assert_stopped_at_one,
    chat_load,
    fleet_fixture,
)

pytestmark = [pytest.mark.docker, pytest.mark.litellm, pytest.mark.slow]
fleet = fleet_fixture(FOLLOWING)

ROLL_TIMEOUT_S = 300.0
PAUSE_TIMEOUT_S = 180.0
WATCH_AFTER_PAUSE_S = 8.0  # several follow checks of the two waiting boxes


def report(fleet: RollingFleet, load: ChatLoad, watch: RouteWatch) -> str:
    return f"{load.summary()}\n{watch.summary()}\n{fleet.diagnostics()}"


def test_a_change_rolls_box_by_box_and_a_failing_one_pauses(fleet, real_litellm,
                                                             litellm_master_key):
    before = fleet.intended()

    # 1. A good change rolls through every box with no failed request.
    with RouteWatch(fleet.litellm, MODEL) as watch, \
            chat_load(real_litellm.url, litellm_master_key, ROLL_TIMEOUT_S) as load:
        new = fleet.change(GOOD_CONTEXT)
        fleet.wait("every box on the new revision, routed, no turn active", fleet.settled,
                   ROLL_TIMEOUT_S)
        load.stop()
    assert_rolled(fleet, load, watch, before, new, report(fleet, load, watch))

    # 2. A change that fails to start stops after the first box; the others keep serving.
    with RouteWatch(fleet.litellm, MODEL) as watch, \
            chat_load(real_litellm.url, litellm_master_key, PAUSE_TIMEOUT_S) as load:
        bad = fleet.change(BAD_CONTEXT)

        def paused() -> bool:
            return any(turn["phase"] == "failed" and turn["revision"] == bad[box]
                       for box, turn in fleet.turns().items())

        fleet.wait("a failed turn pausing the rollout", paused, PAUSE_TIMEOUT_S)
        time.sleep(WATCH_AFTER_PAUSE_S)
        load.stop()
    assert_stopped_at_one(fleet, load, watch, new, bad, report(fleet, load, watch))
