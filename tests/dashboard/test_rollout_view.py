"""The rollout panel and the paused-rollout item of the strip, as page data."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id
from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Phase, Turn
from ansible_collections.llmao.fleet.plugins.module_utils.rollout_status import Stage
from llmao_server.web.fleet_view import Observed, build_page
from tests.server.fleet_pair import CONFIG, KNOWN, LEGACY, OTHER_KNOWN, write_pair

NOW = 1_800_000_000.0
QWEN_K = deployment_id(KNOWN, 8002, "qwen")
QWEN_O = deployment_id(OTHER_KNOWN, 8001, "qwen")
GEMMA_K = deployment_id(KNOWN, 8001, "gemma")
GEMMA_L = deployment_id(LEGACY, 8000, "gemma")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    return load_fleet(*write_pair(tmp_path_factory.mktemp("fleet")))


def observed(fleet: Fleet, turns: list[Turn], behind: dict[str, str],
             states: dict[str, str] | None = None) -> Observed:
    applied = {box: a.revision for box, a in fleet.assignments.items()} | behind
    verdicts = {key: {"id": key, "state": "Healthy", "reason": "serving"}
                for key in (QWEN_K, QWEN_O, GEMMA_K, GEMMA_L)}
    for key, state in (states or {}).items():
        verdicts[key] = {"id": key, "state": state, "reason": "why"}
    return Observed(applied=applied, verdicts=verdicts, turns=turns)


def test_no_panel_and_no_item_when_every_box_is_current(fleet) -> None:
    page = build_page(fleet, observed(fleet, [], {}), NOW)
    assert page.rollout == ()
    assert "paused" not in {problem.kind for problem in page.problems}
    assert page.table()["rollout"] == []


def test_a_draining_turn_shows_per_model_where_each_box_stands(fleet) -> None:
    turn = Turn(KNOWN, fleet.assignment(KNOWN).revision, (QWEN_K,), Phase.DRAINING, NOW - 30,
                NOW + 600)
    page = build_page(fleet, observed(fleet, [turn], {KNOWN: "old", OTHER_KNOWN: "old"}), NOW)
    rows = {row.model: row for row in page.rollout}
    assert rows["qwen"].boxes(Stage.DRAINING) == (KNOWN,)
    assert rows["qwen"].boxes(Stage.WAITING) == (OTHER_KNOWN,)
    assert rows["gemma"].boxes(Stage.WAITING) == (KNOWN,)
    assert rows["gemma"].boxes(Stage.HEALTHY) == (LEGACY,)
    table = json.loads(json.dumps(page.table()))["rollout"]
    assert [row["model"] for row in table] == ["gemma", "qwen"]
    assert table[1] == {"model": "qwen", "waiting": [OTHER_KNOWN], "draining": [KNOWN],
                        "restarting": [], "healthy": [], "paused": None}


def test_a_paused_model_is_in_the_strip_with_box_revision_and_why(fleet) -> None:
    revision = fleet.assignment(KNOWN).revision
    failed = Turn(KNOWN, revision, (QWEN_K,), Phase.FAILED, NOW - 900, NOW - 10,
                  ended_at=NOW - 5, why=f"{QWEN_K} is Stalled: not answering")
    page = build_page(fleet, observed(fleet, [failed], {OTHER_KNOWN: "old"},
                                      {QWEN_K: "Stalled"}), NOW)
    (paused,) = [problem for problem in page.problems if problem.kind == "paused"]
    assert paused.entries == (("qwen", f"box {KNOWN}, rev {revision[:8]}: "
                                       f"{QWEN_K} is Stalled: not answering"),)
    assert "a new revision" in paused.advice
    (row,) = page.rollout
    assert (row.model, row.paused, row.boxes(Stage.WAITING)) == ("qwen", failed, (OTHER_KNOWN,))
    kinds = [problem.kind for problem in page.problems]
    assert kinds.index("paused") < kinds.index("stalled")  # the cause first, then its server


def test_a_failed_turn_of_a_superseded_revision_pauses_nothing(fleet) -> None:
    failed = Turn(KNOWN, "superseded", (QWEN_K,), Phase.FAILED, NOW - 900, NOW - 10,
                  why="old trouble")
    page = build_page(fleet, observed(fleet, [failed], {}), NOW)
    assert (page.rollout, [p.kind for p in page.problems if p.kind == "paused"]) == ((), [])


def test_a_box_behind_is_drift_unless_boxes_follow_and_the_panel_has_it(
        fleet, tmp_path_factory) -> None:
    behind = {OTHER_KNOWN: "old"}
    kinds = {problem.kind for problem in build_page(fleet, observed(fleet, [], behind),
                                                    NOW).problems}
    assert "revision" in kinds
    following = load_fleet(*write_pair(tmp_path_factory.mktemp("following"),
                                       {**CONFIG, "rollout": {"follow_s": 30}}))
    page = build_page(following, observed(following, [], behind), NOW)
    assert "revision" not in {problem.kind for problem in page.problems}
    assert [(row.model, row.boxes(Stage.WAITING)) for row in page.rollout] == \
        [("qwen", (OTHER_KNOWN,))]


def reason_of(page, box: str, name: str) -> tuple[str, str]:
    (row,) = [row for _, rows in page.groups for row in rows if (row.box, row.name) == (box, name)]
    return row.state, row.reason


def test_a_server_out_of_litellm_for_its_turn_says_so(fleet) -> None:
    """Drained for its box's turn: Healthy and out of LiteLLM, with the turn as the reason."""
    revision = fleet.assignment(KNOWN).revision
    turn = Turn(KNOWN, revision, (QWEN_K,), Phase.DRAINED, NOW - 30, NOW + 600,
                drained_at=NOW - 10)
    seen = observed(fleet, [turn], {KNOWN: "old"})
    verdicts = {**seen.verdicts, QWEN_K: {"id": QWEN_K, "state": "Healthy", "reason": "",
                                          "in_litellm": False}}
    page = build_page(fleet, Observed(applied=seen.applied, verdicts=verdicts, turns=[turn]),
                      NOW)
    assert reason_of(page, KNOWN, "qwen") == (
        "Healthy", f"drained for a rollout turn to rev {revision[:8]}")
    # Without an active turn, out of LiteLLM has no such reason.
    done = Turn(KNOWN, revision, (QWEN_K,), Phase.DONE, NOW - 300, NOW + 600, ended_at=NOW - 9)
    page = build_page(fleet, Observed(applied=seen.applied, verdicts=verdicts, turns=[done]),
                      NOW)
    assert reason_of(page, KNOWN, "qwen") == ("Healthy", "")


def test_a_server_its_box_has_not_started_is_not_called_loading_alone(fleet) -> None:
    """A server of the intended revision on a box still on an older one: the box has not
    started it, and the row says so before the verdict's "fetched its config" reason."""
    page = build_page(fleet, observed(fleet, [], {OTHER_KNOWN: "0ld0ld0ld"},
                                      {QWEN_O: "Loading"}), NOW)
    state, reason = reason_of(page, OTHER_KNOWN, "qwen")
    intended = fleet.assignment(OTHER_KNOWN).revision[:8]
    assert state == "Loading"
    assert reason.startswith(f"not started: its box runs rev 0ld0ld0l, not rev {intended} (")
    assert reason.endswith("; why")
    # The box's older revision started it too: whatever keeps it down, it was started.
    seen = observed(fleet, [], {OTHER_KNOWN: "0ld0ld0ld"}, {QWEN_O: "Loading"})
    page = build_page(fleet, Observed(applied=seen.applied, verdicts=seen.verdicts,
                                      started={OTHER_KNOWN: frozenset({("qwen", 8001)})}), NOW)
    assert reason_of(page, OTHER_KNOWN, "qwen") == ("Loading", "why")
    # On the intended revision, Loading is the verdict's own reason.
    page = build_page(fleet, observed(fleet, [], {}, {QWEN_O: "Loading"}), NOW)
    assert reason_of(page, OTHER_KNOWN, "qwen") == ("Loading", "why")
