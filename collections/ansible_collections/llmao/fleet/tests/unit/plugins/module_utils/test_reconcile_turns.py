"""Reconcile and rollout turns (docs/rolling-changes.md): who is held out of LiteLLM, how a
turn moves on.

Each case is one pass of the real planner (``plan_pass``) over the test fleet: a box with a
turn, the revision it applied, whether LiteLLM has the turn's route, and what the probe found.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import (
    Memory,
    Probe,
    State,
)
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import Route
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_plan import (
    Plan,
    plan_pass,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import (
    Observations,
    RecordError,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_turns import TurnUpdate
from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Phase, Turn
from ansible_collections.llmao.fleet.tests.unit.fleets import (
    DOWN,
    KNOWN,
    LEGACY_BOX,
    OTHER_KNOWN,
    SERVING,
    rollout_pair,
)

NOW = 1_800_000_000.0
QWEN = deployment_id(KNOWN, 8002, "qwen")        # the turn's server
GEMMA = deployment_id(KNOWN, 8001, "gemma")      # same box, not in the turn
OLD = "old-revision"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    return load_fleet(*rollout_pair(Path(tmp_path_factory.mktemp("fleet"))))


def route(server_id: str, model: str) -> Route:
    box, port = server_id.split(":")[1:3]
    return Route(server_id, model, f"http://{box}:{port}/v1", f"http://{box}:{port}/v1")


def turn(fleet: Fleet, phase: Phase, expires_in: float = 600.0, **changes: object) -> Turn:
    fields = {"box": KNOWN, "revision": fleet.assignment(KNOWN).revision, "servers": (QWEN,),
              "phase": phase, "granted_at": NOW - 60, "expires_at": NOW + expires_in}
    return Turn(**{**fields, **changes})


def one_pass(fleet: Fleet, turns: tuple[Turn, ...], applied: str | None, routed: tuple[str, ...],
             qwen_probe: Probe = SERVING, fetched_ago: float = 3600.0,
             qwen_memory: Memory | None = None) -> Plan:
    """A pass where every server serves except the turn's (``qwen_probe``); ``applied`` is
    KNOWN's revision (None: the intended one), ``routed`` the servers LiteLLM has,
    ``qwen_memory`` what the pass before left of the turn's server."""
    models = {s.id: s.model_name for s in fleet.servers()}
    revisions = {box: a.revision for box, a in fleet.assignments.items()}
    revisions[KNOWN] = applied or revisions[KNOWN]
    observations = Observations(
        NOW, dict.fromkeys(fleet.assignments, NOW - fetched_ago), revisions,
        memories={QWEN: qwen_memory} if qwen_memory else {},
        routes=tuple(route(key, models[key]) for key in routed), turns=turns)
    probes = {key: SERVING for key in models} | {QWEN: qwen_probe}
    return plan_pass(fleet, observations, probes)


def qwen_change(plan: Plan) -> tuple[str | None, str]:
    server = next(s for s in plan.servers if s.id == QWEN)
    return (server.change.value if server.change else None), server.why


# phase, applied (None: the turn's), LiteLLM has the route, probe, fetched ago, expires in
# -> the turn's server's change, the turn's next phase
CASES = [
    pytest.param(Phase.DRAINING, OLD, True, SERVING, 3600, 600, "delete", Phase.DRAINED,
                 id="draining: the route is deleted, drained once LiteLLM is written"),
    pytest.param(Phase.DRAINING, OLD, False, SERVING, 3600, 600, None, Phase.DRAINED,
                 id="draining without a route: drained at once, never registered"),
    pytest.param(Phase.DRAINED, OLD, False, SERVING, 3600, 600, None, None,
                 id="drained, not applied: the old vLLM still answers, never registered"),
    pytest.param(Phase.DRAINED, OLD, True, SERVING, 3600, 600, "delete", None,
                 id="drained, not applied, a route came back: deleted"),
    pytest.param(Phase.DRAINED, None, False, SERVING, 30, 600, "register", Phase.DONE,
                 id="applied and Healthy: registered through the usual gate, done"),
    pytest.param(Phase.DRAINED, None, False, DOWN, 30, 600, None, None,
                 id="applied, Loading within its grace: waits"),
    pytest.param(Phase.DRAINED, None, False, DOWN, 1000, 600, None, Phase.FAILED,
                 id="applied, Stalled after its grace: failed"),
    pytest.param(Phase.DRAINED, OLD, False, SERVING, 3600, -1, None, Phase.FAILED,
                 id="expired before the box applied: failed"),
    pytest.param(Phase.DRAINED, None, False, DOWN, 30, -1, None, Phase.FAILED,
                 id="applied, expired while Loading: failed"),
    pytest.param(Phase.DRAINING, None, True, SERVING, 30, 600, None, Phase.DRAINED,
                 id="draining, yet the box applied: its route stays, drained at once"),
    pytest.param(Phase.DRAINING, None, True, SERVING, 3600, -1, None, Phase.DRAINED,
                 id="draining, the box applied, past its time: drained, never expired"),
    pytest.param(Phase.DONE, OLD, False, SERVING, 3600, 600, "register", None,
                 id="a done turn holds nothing back"),
    pytest.param(Phase.FAILED, None, False, DOWN, 1000, 600, None, None,
                 id="a failed turn stays failed"),
]


@pytest.mark.parametrize(("phase", "applied", "routed", "probe", "fetched_ago", "expires_in",
                          "change", "next_phase"), CASES)
def test_a_turn_holds_its_servers_back_and_moves_on(fleet, phase, applied, routed, probe,
                                                    fetched_ago, expires_in, change,
                                                    next_phase) -> None:
    plan = one_pass(fleet, (turn(fleet, phase, expires_in),), applied,
                    (GEMMA, QWEN) if routed else (GEMMA,), probe, fetched_ago)
    assert qwen_change(plan)[0] == change
    assert [u.phase for u in plan.turn_updates] == ([next_phase] if next_phase else [])
    gemma = next(s for s in plan.servers if s.id == GEMMA)
    assert gemma.change is None  # the box's server outside the turn keeps serving


def test_the_route_goes_with_why_and_the_updates_say_which_turn(fleet) -> None:
    plan = one_pass(fleet, (turn(fleet, Phase.DRAINING),), OLD, (GEMMA, QWEN))
    revision = fleet.assignment(KNOWN).revision
    assert qwen_change(plan) == ("delete", f"rollout: draining for rev {revision}")
    assert plan.turn_updates == (TurnUpdate(KNOWN, revision, Phase.DRAINED),)
    assert plan.turn_updates[0].record() == {"box": KNOWN, "revision": revision,
                                             "phase": "drained", "why": ""}


def test_a_failed_turn_says_which_server_which_state_and_why(fleet) -> None:
    plan = one_pass(fleet, (turn(fleet, Phase.DRAINED),), None, (GEMMA,), DOWN, 1000)
    [update] = plan.turn_updates
    assert update.why.startswith(f"{QWEN} is Stalled: fetched its config 17 min ago, "
                                 "not answering (connection refused) after the 900 s grace")


def test_a_server_healthy_only_by_tolerance_neither_ends_the_turn_nor_is_routed(fleet) -> None:
    """Healthy before the restart, failing since, and the applied report's Loading window not
    seen yet (llmao's last fetch reads older than the last Healthy pass): the verdict stays
    Healthy for fewer failures than the threshold, but only an answer ends the turn or earns
    a route."""
    was_healthy = Memory(State.HEALTHY, 0, 0, last_healthy_at=NOW - 10)
    plan = one_pass(fleet, (turn(fleet, Phase.DRAINED),), None, (GEMMA,), DOWN, 3600,
                    was_healthy)
    qwen = next(s for s in plan.servers if s.id == QWEN)
    assert qwen.verdict.state is State.HEALTHY and not qwen.verdict.answered_healthy
    assert qwen_change(plan) == (None, "Healthy, not in LiteLLM: registered once it answers")
    assert plan.turn_updates == ()
    expired = one_pass(fleet, (turn(fleet, Phase.DRAINED, -1),), None, (GEMMA,), DOWN, 3600,
                       was_healthy)
    assert expired.turn_updates[0].phase is Phase.FAILED
    assert expired.turn_updates[0].why.startswith(f"the turn expired: {QWEN} is Healthy: ")
    answered = one_pass(fleet, (turn(fleet, Phase.DRAINED),), None, (GEMMA,), SERVING, 3600,
                        was_healthy)
    assert qwen_change(answered)[0] == "register"
    assert [u.phase for u in answered.turn_updates] == [Phase.DONE]


def test_an_expired_turn_says_what_it_waited_for(fleet) -> None:
    revision = fleet.assignment(KNOWN).revision
    before = one_pass(fleet, (turn(fleet, Phase.DRAINED, -1),), OLD, (GEMMA,))
    assert before.turn_updates[0].why == \
        f"the turn expired before {KNOWN} applied rev {revision}"
    after = one_pass(fleet, (turn(fleet, Phase.DRAINED, -1),), None, (GEMMA,), DOWN, 30)
    assert after.turn_updates[0].why.startswith(f"the turn expired: {QWEN} is Loading: ")


def test_a_draining_turn_is_not_drained_while_another_of_its_routes_stays(fleet) -> None:
    """A route of the turn that stays in LiteLLM (one without llmao's mark, which reconcile
    never deletes) keeps the turn draining."""
    stray = deployment_id(KNOWN, 8003, "gone")
    other = turn(fleet, Phase.DRAINING, servers=(QWEN, stray))
    unowned = Route(stray, "qwen", "http://203.0.113.10:8003/v1", None)  # not llmao's: kept
    observations = Observations(NOW, {}, {KNOWN: OLD},
                                routes=(route(GEMMA, "gemma"), unowned), turns=(other,))
    probes = {s.id: SERVING for s in fleet.servers()}
    assert plan_pass(fleet, observations, probes).turn_updates == ()


def test_a_turn_for_another_box_holds_nothing_here(fleet) -> None:
    other = turn(fleet, Phase.DRAINING, box=OTHER_KNOWN,
                 revision=fleet.assignment(OTHER_KNOWN).revision,
                 servers=(deployment_id(OTHER_KNOWN, 8001, "qwen"),))
    plan = one_pass(fleet, (other,), None, (GEMMA,))
    assert qwen_change(plan)[0] == "register"


def test_the_rollout_lines_say_where_each_model_stands(fleet) -> None:
    plan = one_pass(fleet, (turn(fleet, Phase.DRAINING),), OLD, (GEMMA, QWEN))
    assert plan.rollout_lines == [
        f"gemma: waiting {KNOWN}; healthy on the new revision {LEGACY_BOX}",
        f"qwen: restarting {KNOWN}; healthy on the new revision {OTHER_KNOWN}",
        f"turn of {KNOWN} (rev {fleet.assignment(KNOWN).revision}): drained",
    ]


def test_no_turn_and_every_box_current_prints_no_rollout(fleet) -> None:
    plan = one_pass(fleet, (), None, (GEMMA, QWEN))
    assert (plan.rollout_lines, plan.turn_updates) == ([], ())


def test_turns_travel_between_tasks_and_a_bad_one_fails(fleet) -> None:
    observations = Observations(NOW, turns=(turn(fleet, Phase.DRAINED, drained_at=NOW - 5),))
    record = observations.record()
    assert Observations.from_record({**record, "listings": {}, "routes": []}).turns == \
        observations.turns
    broken = {**record, "turns": [{**record["turns"][0], "phase": "sideways"}]}
    with pytest.raises(RecordError, match=r"turns\[0\]"):
        Observations.from_record(broken)


def test_a_turn_whose_box_applied_first_ends_done_and_pauses_nothing(fleet) -> None:
    """Pass after pass, a turn held by a box that had applied already runs out as done."""
    current = turn(fleet, Phase.DRAINING, expires_in=-1)
    for _pass in range(3):
        plan = one_pass(fleet, (current,), None, (GEMMA, QWEN), SERVING, 3600)
        if not plan.turn_updates:
            break
        [update] = plan.turn_updates
        current = current.moved(update.phase, update.why, NOW)
    assert current.phase is Phase.DONE
