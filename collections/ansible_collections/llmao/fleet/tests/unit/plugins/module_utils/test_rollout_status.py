"""Per model rollout rows (rollout_status): the one source of reconcile's lines and the panel."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id
from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Phase, Turn
from ansible_collections.llmao.fleet.plugins.module_utils.rollout_status import (
    Stage,
    rollout_rows,
)
from ansible_collections.llmao.fleet.tests.unit.fleets import (
    KNOWN,
    LEGACY_BOX,
    OTHER_KNOWN,
    rollout_pair,
)

OLD = "old-revision"
NOW = 1_800_000_000.0
QWEN_K = deployment_id(KNOWN, 8002, "qwen")
GEMMA_K = deployment_id(KNOWN, 8001, "gemma")
QWEN_O = deployment_id(OTHER_KNOWN, 8001, "qwen")
GEMMA_L = deployment_id(LEGACY_BOX, 8000, "gemma")
ALL = (QWEN_K, GEMMA_K, QWEN_O, GEMMA_L)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    return load_fleet(*rollout_pair(Path(tmp_path_factory.mktemp("fleet"))))


def current(fleet: Fleet, behind: dict[str, str] | None = None) -> dict[str, str | None]:
    """Every box's applied revision: the intended one, except for the boxes ``behind`` names."""
    return {box: a.revision for box, a in fleet.assignments.items()} | (behind or {})


def a_turn(fleet: Fleet, box: str, phase: Phase, servers: tuple[str, ...],
           why: str = "", revision: str | None = None) -> Turn:
    return Turn(box, revision or fleet.assignment(box).revision, servers, phase, NOW - 60,
                NOW + 600, why=why)


def stages(fleet: Fleet, turns: list[Turn], applied: dict[str, str | None],
           unhealthy: tuple[str, ...] = ()) -> dict[str, dict[str, tuple[str, ...]]]:
    states = {server: "Stalled" if server in unhealthy else "Healthy" for server in ALL}
    return {row.model: {stage.value: row.boxes(stage) for stage in Stage if row.boxes(stage)}
            for row in rollout_rows(fleet, turns, applied, states)}


def test_every_box_current_and_healthy_is_no_rollout(fleet) -> None:
    assert rollout_rows(fleet, [], current(fleet), dict.fromkeys(ALL, "Healthy")) == ()


def test_boxes_that_never_reported_are_not_a_rollout(fleet) -> None:
    applied = dict.fromkeys(fleet.assignments)
    assert rollout_rows(fleet, [], applied, {}) == ()


def test_a_done_turn_alone_shows_nothing(fleet) -> None:
    done = a_turn(fleet, KNOWN, Phase.DONE, (QWEN_K,))
    assert stages(fleet, [done], current(fleet)) == {}


@pytest.mark.parametrize(("phase", "qwen_on_known"), [
    (Phase.DRAINING, "draining"), (Phase.DRAINED, "restarting"),
])
def test_a_turn_puts_its_box_in_its_phase_for_the_models_it_names(fleet, phase,
                                                                  qwen_on_known) -> None:
    turn = a_turn(fleet, KNOWN, phase, (QWEN_K,))
    assert stages(fleet, [turn], current(fleet, {KNOWN: OLD})) == {
        "gemma": {"waiting": (KNOWN,), "healthy": (LEGACY_BOX,)},
        "qwen": {qwen_on_known: (KNOWN,), "healthy": (OTHER_KNOWN,)},
    }


def test_applied_but_not_healthy_yet_is_restarting(fleet) -> None:
    applied = current(fleet, {OTHER_KNOWN: OLD})
    assert stages(fleet, [], applied, unhealthy=(QWEN_K,)) == {
        "qwen": {"waiting": (OTHER_KNOWN,), "restarting": (KNOWN,)},
    }


def test_a_turn_for_an_older_revision_is_not_where_the_box_stands(fleet) -> None:
    stale = a_turn(fleet, KNOWN, Phase.DRAINING, (QWEN_K,), revision="an-older-one")
    applied = current(fleet, {KNOWN: OLD})
    assert stages(fleet, [stale], applied)["qwen"] == {"waiting": (KNOWN,),
                                                       "healthy": (OTHER_KNOWN,)}


def test_a_failed_turn_pauses_its_model_and_says_why(fleet) -> None:
    failed = a_turn(fleet, KNOWN, Phase.FAILED, (QWEN_K,), why=f"{QWEN_K} is Stalled: silent")
    applied = current(fleet, {OTHER_KNOWN: OLD})
    rows = {row.model: row for row in rollout_rows(fleet, [failed], applied,
                                                   {**dict.fromkeys(ALL, "Healthy"),
                                                    QWEN_K: "Stalled"})}
    assert set(rows) == {"qwen"}
    assert rows["qwen"].paused == failed
    assert rows["qwen"].line() == (
        f"qwen: waiting {OTHER_KNOWN}; PAUSED at {KNOWN} (rev {failed.revision}): "
        f"{QWEN_K} is Stalled: silent; the other servers keep their revision, a fixed config "
        "(a new revision) resumes it")


def test_a_failed_turn_of_an_older_revision_pauses_nothing(fleet) -> None:
    failed = a_turn(fleet, KNOWN, Phase.FAILED, (QWEN_K,), why="old", revision="older")
    assert rollout_rows(fleet, [failed], current(fleet), dict.fromkeys(ALL, "Healthy")) == ()
