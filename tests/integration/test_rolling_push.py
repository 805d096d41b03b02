"""Issue 12's push-path acceptance (R10 for provision.yml): three container boxes that do not
follow their assignment get a change pushed by ``playbooks/provision.yml``, box by box, under a
steady chat load through LiteLLM's real proxy, and the play stops on a change that fails to
start.

1. ``max_model_len`` changes in models.yaml and llmao reloads. ``provision.yml --check --diff``
   takes no turn and changes nothing; ``provision.yml`` then rolls: no request fails (plain chats
   and streams, some of them seconds long), LiteLLM never routes fewer than two of the three
   servers, turns never overlap, every box ends on the new revision serving the new context.
2. A second change to a context the vLLM stub refuses (it exits at start, as vLLM does on a bad
   value): ``provision.yml`` fails on the first box (its turn failed, the rollout paused), the two
   others are never touched and keep serving on the revision before, no request fails.

The fleet (boxes booted from the template, llmao-server, LiteLLM, reconcile.yml in a loop) is
tests/rolling_fleet.py, without ``rollout.follow_s``; tests/integration/test_rolling_pull.py is
the pull path's twin.
"""

from __future__ import annotations

import time

import pytest

from rig.chat_load import ChatLoad
from rig.route_watch import RouteWatch
from tests.rolling_fleet import (
    BAD_CONTEXT,
    GOOD_CONTEXT,
    MODEL,
    PUSHED,
    RollingFleet,
    assert_rolled,
    assert_stopped_at_one,
    chat_load,
    fleet_fixture,
    mask,
)

fleet = fleet_fixture(PUSHED)
pytestmark = [pytest.mark.docker, pytest.mark.litellm, pytest.mark.slow]

LOAD_BOUND_S = 420.0  # the load ends when a step does; this only bounds the count
SETTLE_TIMEOUT_S = 30.0
WATCH_AFTER_FAILURE_S = 8.0


def report(fleet: RollingFleet, load: ChatLoad, watch: RouteWatch, *outputs: str) -> str:
    shown = "\n".join(mask(output[-6000:], fleet.local.secrets()) for output in outputs)
    return f"{load.summary()}\n{watch.summary()}\n{shown}\n{fleet.diagnostics()}"


def assert_no_secret(fleet: RollingFleet, output: str) -> None:
    leaked = [index for index, secret in enumerate(fleet.local.secrets()) if secret in output]
    assert leaked == [], f"provision.yml printed secrets (their indexes: {leaked})"


def test_provision_rolls_box_by_box_and_stops_on_a_failing_one(fleet, real_litellm,
                                                               litellm_master_key, tmp_path):
    before = fleet.intended()

    # 1. A dry run takes no turn; the real run rolls every box with no failed request.
    with RouteWatch(fleet.litellm, MODEL) as watch, \
            chat_load(real_litellm.url, litellm_master_key, LOAD_BOUND_S) as load:
        new = fleet.change(GOOD_CONTEXT)
        dry = fleet.provision(tmp_path, "--check", "--diff")
        turns_after_dry, applied_after_dry = fleet.turns(), fleet.applied()
        pushed = fleet.provision(tmp_path)
        fleet.wait("every box on the new revision, routed, no turn active", fleet.settled,
                   SETTLE_TIMEOUT_S)
        load.stop()
    said = report(fleet, load, watch, dry.output, pushed.output)
    assert_no_secret(fleet, dry.output + pushed.output)
    assert dry.returncode == 0, said
    assert turns_after_dry == {} and applied_after_dry == before, said
    assert pushed.returncode == 0, said
    assert_rolled(fleet, load, watch, before, new, said)

    # 2. A change that fails to start stops the play after the first box.
    with RouteWatch(fleet.litellm, MODEL) as watch, \
            chat_load(real_litellm.url, litellm_master_key, LOAD_BOUND_S) as load:
        bad = fleet.change(BAD_CONTEXT)
        failing = fleet.provision(tmp_path)
        time.sleep(WATCH_AFTER_FAILURE_S)
        load.stop()
    said = report(fleet, load, watch, failing.output)
    assert_no_secret(fleet, failing.output)
    assert failing.returncode != 0, said
    broken = assert_stopped_at_one(fleet, load, watch, new, bad, said)
    assert f"{broken}'s turn for revision {bad[broken]} failed" in failing.output, said
    turns = fleet.turns()
    assert {box: (turn["revision"], turn["phase"]) for box, turn in turns.items()
            if box != broken} == {box: (new[box], "done") for box in new if box != broken}, said
