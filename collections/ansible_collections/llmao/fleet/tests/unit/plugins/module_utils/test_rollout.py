"""Who may change when: the turn rules, table-driven, and a turn's record and moves.

The rules as operators meet them: docs/rolling-changes.md.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import State
from ansible_collections.llmao.fleet.plugins.module_utils.rollout import (
    ACTIVE,
    Phase,
    Rollout,
    Turn,
    TurnError,
    decide_turn,
    healthy_by_model,
    may_apply,
    paused_models,
    turn_deadline,
)
from ansible_collections.llmao.fleet.tests.unit.fleets import KEYS, base_models, write_pair
from rig.fleet_files import fleet_section

NOW = 50_000.0
GRACE = 600.0
# Box 1 serves gemma and qwen; 2 and 3 gemma; 4 qwen alone; 5 two gemma servers.
HOSTS = {
    "10.0.0.1": [["gemma", 8001], ["qwen", 8002]],
    "10.0.0.2": [["gemma", 8001]],
    "10.0.0.3": [["gemma", 8001]],
    "10.0.0.4": [["qwen", 8001]],
    "10.0.0.5": [["gemma", 8001], ["gemma", 8002, "gemma-b"]],
}
PORTS = {"gemma": 8001, "qwen": 8002, "gemma-b": 8002}
# The fleets are loaded once, at collection (the table names their revisions); removed at exit.
FOLDER = TemporaryDirectory(prefix="rollout-")


@cache
def fleet_with(max_unavailable: int = 1) -> Fleet:
    config = {"fleet": {**fleet_section(KEYS, HOSTS), "health_grace_s": GRACE},
              "rollout": {"follow_s": 10, "drain_s": 5, "max_unavailable": max_unavailable}}
    folder = Path(FOLDER.name, str(max_unavailable))
    folder.mkdir(exist_ok=True)
    return load_fleet(*write_pair(folder, config, base_models()))


def sid(box: int, name: str = "gemma") -> str:
    """The deployment id of server ``name`` on box ``10.0.0.<box>``."""
    port = 8001 if (box, name) == (4, "qwen") else PORTS[name]
    return deployment_id(f"10.0.0.{box}", port, name)


def rev(box: int) -> str:
    return fleet_with().assignment(f"10.0.0.{box}").revision


def turn(box: int, *servers: str, phase: Phase = Phase.DRAINING, revision: str | None = None,
         why: str = "") -> Turn:
    return Turn(f"10.0.0.{box}", rev(box) if revision is None else revision, servers, phase,
                NOW - 30, NOW + 600, why=why)


ALL_HEALTHY = {sid(b, n): State.HEALTHY for b, names in
               ((1, ("gemma", "qwen")), (2, ("gemma",)), (3, ("gemma",)), (4, ("qwen",)),
                (5, ("gemma", "gemma-b"))) for n in names}


def states(**changes: State) -> dict[str, State]:
    """Every server Healthy but those named ``b<box>_<name>`` (``-`` as ``_``)."""
    result = dict(ALL_HEALTHY)
    for key, state in changes.items():
        box, name = key.split("_", 1)
        result[sid(int(box[1:]), name.replace("_", "-"))] = state
    return result


def healthy(**changes: State):
    """What decide_turn reads of :func:`states`: the Healthy servers per model."""
    return healthy_by_model(fleet_with(), states(**changes))


FAILED_G3 = turn(3, sid(3), phase=Phase.FAILED, why="gemma Stalled: not answering")

# id, max_unavailable, asking box, its server names, stored turns, states,
# expected: (phase, servers) when granted, None when nothing is, else a part of why it waits.
CASES = [
    ("first of the fleet", 1, 2, ["gemma"], [], states(), (Phase.DRAINING, [sid(2)])),
    ("another box's gemma changing, limit 1", 1, 2, ["gemma"], [turn(3, sid(3))], states(),
     "gemma: other servers of it are changing, max_unavailable is 1"),
    ("a drained turn is still changing", 1, 2, ["gemma"],
     [turn(3, sid(3), phase=Phase.DRAINED)], states(), "are changing"),
    ("another box's gemma changing, limit 2", 2, 2, ["gemma"], [turn(3, sid(3))], states(),
     (Phase.DRAINING, [sid(2)])),
    ("another model changing does not count", 1, 2, ["gemma"], [turn(4, sid(4, "qwen"))],
     states(), (Phase.DRAINING, [sid(2)])),
    ("done and failed turns of old revisions do not count", 1, 2, ["gemma"],
     [turn(3, sid(3), phase=Phase.DONE), turn(1, sid(1), phase=Phase.FAILED, revision="old")],
     states(), (Phase.DRAINING, [sid(2)])),
    ("two servers of gemma exceed limit 1 when nothing else changes", 1, 5,
     ["gemma", "gemma-b"], [], states(), (Phase.DRAINING, [sid(5), sid(5, "gemma-b")])),
    ("two servers of gemma wait beside another change, limit 2", 2, 5,
     ["gemma", "gemma-b"], [turn(3, sid(3))], states(),
     "gemma: other servers of it are changing, max_unavailable is 2"),
    ("one model waits: the whole box waits", 1, 1, ["gemma", "qwen"],
     [turn(4, sid(4, "qwen"))], states(), "qwen: other servers of it are changing"),
    ("never the last healthy", 3, 2, ["gemma"], [],
     states(b1_gemma=State.LOADING, b3_gemma=State.UNHEALTHY, b5_gemma=State.STALLED,
            b5_gemma_b=State.AWAITING),
     "gemma: no other server is Healthy and serving; never the last healthy"),
    ("the other healthy one is changing itself", 3, 2, ["gemma"], [turn(3, sid(3))],
     states(b1_gemma=State.LOADING, b5_gemma=State.STALLED, b5_gemma_b=State.AWAITING),
     "never the last healthy"),
    ("the other healthy one is on the same box and asked for too", 3, 5,
     ["gemma", "gemma-b"], [],
     states(b1_gemma=State.LOADING, b2_gemma=State.UNHEALTHY, b3_gemma=State.STALLED),
     "never the last healthy"),
    ("one other healthy server is enough", 1, 2, ["gemma"], [],
     states(b1_gemma=State.LOADING, b5_gemma=State.STALLED, b5_gemma_b=State.AWAITING),
     (Phase.DRAINING, [sid(2)])),
    ("a broken server may change even when nothing is healthy", 1, 2, ["gemma"], [],
     {sid(2): State.STALLED}, (Phase.DRAINING, [sid(2)])),
    ("a server never seen counts as not healthy", 1, 2, ["gemma"], [], {},
     (Phase.DRAINING, [sid(2)])),
    ("the only qwen server elsewhere is healthy", 1, 4, ["qwen"], [], states(),
     (Phase.DRAINING, [sid(4, "qwen")])),
    ("paused by a failed turn of its intended revision", 3, 2, ["gemma"], [FAILED_G3],
     states(), "rollout of gemma paused: a change of another box failed"),
    ("its own failed turn pauses a box too, and it is told why", 3, 3, ["gemma"], [FAILED_G3],
     states(), "rollout of gemma paused: this box failed on revision"),
    ("its own pause names why", 3, 3, ["gemma"], [FAILED_G3], states(),
     "gemma Stalled: not answering"),
    ("a pause holds one model only", 1, 4, ["qwen"], [FAILED_G3], states(),
     (Phase.DRAINING, [sid(4, "qwen")])),
    ("a new revision resumes", 1, 2, ["gemma"],
     [turn(3, sid(3), phase=Phase.FAILED, revision="0123456789abcdef")], states(),
     (Phase.DRAINING, [sid(2)])),
    ("names not intended are ignored", 1, 2, ["gemma", "gone", "qwen"], [], states(),
     (Phase.DRAINING, [sid(2)])),
    ("nothing named: nothing to turn", 1, 2, [], [turn(3, sid(3))], states(), None),
    ("only servers that go: nothing to turn", 1, 2, ["gone"], [FAILED_G3], states(), None),
    ("its own older turn does not hold it back", 1, 2, ["gemma"],
     [turn(2, sid(2), revision="0123456789abcdef")], states(), (Phase.DRAINING, [sid(2)])),
]


@pytest.mark.parametrize(("limit", "box", "names", "turns", "known", "expected"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_decide_turn(limit, box, names, turns, known, expected):
    fleet = fleet_with(limit)
    name = f"10.0.0.{box}"
    decision = decide_turn(fleet, name, fleet.assignment(name).revision, names, turns,
                           healthy_by_model(fleet, known), NOW)
    if expected is None or isinstance(expected, str):
        assert decision is None if expected is None else expected in decision
        return
    phase, servers = expected
    assert isinstance(decision, Turn), decision
    assert (decision.box, decision.revision) == (name, fleet.assignment(name).revision)
    assert (decision.phase, list(decision.servers)) == (phase, servers)
    assert decision.granted_at == NOW
    assert decision.expires_at == turn_deadline(NOW, fleet.settings.rollout, GRACE)
    assert decision.drained_at == (NOW if phase is Phase.DRAINED else None)


def test_asking_again_returns_the_active_turn_as_it_is():
    held = turn(2, sid(2), phase=Phase.DRAINED)
    # Even though another box changes meanwhile and the rules would now refuse.
    stored = [held, turn(3, sid(3))]
    for later in (NOW + 1, NOW + 99):
        assert decide_turn(fleet_with(), "10.0.0.2", rev(2), ["gemma"], stored, healthy(),
                           later) is held


def test_asking_again_for_more_servers_decides_again_for_all_of_them():
    held = turn(5, sid(5), phase=Phase.DRAINED)
    both = decide_turn(fleet_with(), "10.0.0.5", rev(5), ["gemma", "gemma-b"], [held],
                       healthy(), NOW)
    assert isinstance(both, Turn) and both.phase is Phase.DRAINING
    assert set(both.servers) == {sid(5), sid(5, "gemma-b")}
    # With another gemma changing, the same ask waits (the held turn stays as it is).
    assert "are changing" in decide_turn(fleet_with(), "10.0.0.5", rev(5),
                                         ["gemma", "gemma-b"], [held, turn(3, sid(3))],
                                         healthy(), NOW)


@pytest.mark.parametrize("stored", [
    pytest.param(turn(2, phase=Phase.DRAINED), id="a turn of no server"),
    pytest.param(turn(2, sid(2, "qwen"), phase=Phase.DRAINED), id="a turn of other servers"),
])
def test_a_turn_for_other_servers_is_never_handed_to_a_real_ask(stored):
    """A fleet-key holder asked as box 2 first: the box's own ask still obeys every rule."""
    for rivals, expected in (([turn(3, sid(3))], "are changing"),
                             ([FAILED_G3], "paused"),
                             ([], "never the last healthy")):
        known = healthy(b1_gemma=State.LOADING, b3_gemma=State.UNHEALTHY,
                        b5_gemma=State.STALLED, b5_gemma_b=State.AWAITING) \
            if not rivals else healthy()
        decision = decide_turn(fleet_with(3 if not rivals else 1), "10.0.0.2", rev(2),
                               ["gemma"], [stored, *rivals], known, NOW)
        assert isinstance(decision, str) and expected in decision, decision


def test_a_box_that_applied_the_revision_is_granted_no_turn():
    decision = decide_turn(fleet_with(), "10.0.0.2", rev(2), ["gemma"], [], healthy(), NOW,
                           applied=rev(2))
    assert decision == f"10.0.0.2 already applied revision {rev(2)}: there is nothing to turn"
    assert isinstance(decide_turn(fleet_with(), "10.0.0.2", rev(2), ["gemma"], [], healthy(),
                                  NOW, applied="0123456789abcdef"), Turn)


def test_a_wait_never_names_another_box_its_revision_or_its_reason():
    for stored in ([FAILED_G3], [turn(3, sid(3))]):
        why = decide_turn(fleet_with(), "10.0.0.2", rev(2), ["gemma"], stored, healthy(), NOW)
        assert isinstance(why, str)
        assert "10.0.0.3" not in why and rev(3) not in why and "not answering" not in why


def test_a_stale_revision_is_refused():
    with pytest.raises(ValueError, match="not what 10.0.0.2 is meant to run"):
        decide_turn(fleet_with(), "10.0.0.2", "0123456789abcdef", ["gemma"], [], healthy(), NOW)
    with pytest.raises(ValueError):
        decide_turn(fleet_with(), "10.9.9.9", rev(2), ["gemma"], [], healthy(), NOW)


def test_a_box_name_is_read_as_the_server_reads_it():
    decision = decide_turn(fleet_with(), "::ffff:10.0.0.2", rev(2), ["gemma"], [], healthy(),
                           NOW)
    assert isinstance(decision, Turn) and decision.box == "10.0.0.2"


def test_paused_models_name_the_failed_turn():
    fleet = fleet_with()
    assert paused_models(fleet, [FAILED_G3, turn(4, sid(4, "qwen"))]) == {"gemma": FAILED_G3}
    both = turn(1, sid(1), sid(1, "qwen"), phase=Phase.FAILED)
    assert paused_models(fleet, [both]) == {"gemma": both, "qwen": both}
    assert paused_models(fleet, [turn(3, sid(3), phase=Phase.FAILED, revision="old")]) == {}
    assert paused_models(fleet, [turn(3, sid(3), phase=Phase.DONE)]) == {}


def test_turn_deadline_adds_drain_grace_two_follow_checks_and_slack():
    assert turn_deadline(100.0, Rollout(follow_s=10, drain_s=5), 600) == 100 + 5 + 600 + 20 + 120
    assert turn_deadline(100.0, Rollout(), 600) == 100 + 30 + 600 + 120


MOVES = [
    (Phase.DRAINING, Phase.DRAINED, True),
    (Phase.DRAINED, Phase.DONE, True),
    (Phase.DRAINING, Phase.FAILED, True),
    (Phase.DRAINED, Phase.FAILED, True),
    (Phase.DRAINING, Phase.DONE, False),
    (Phase.DRAINED, Phase.DRAINING, False),
    (Phase.DRAINED, Phase.DRAINED, False),
    (Phase.DONE, Phase.FAILED, False),
    (Phase.FAILED, Phase.DONE, False),
    (Phase.FAILED, Phase.DRAINING, False),
]


@pytest.mark.parametrize(("start", "end", "allowed"), MOVES)
def test_a_turn_moves_only_forward(start, end, allowed):
    held = turn(2, sid(2), phase=start)
    if not allowed:
        with pytest.raises(TurnError, match=f"is {start.value}; it cannot become {end.value}"):
            held.moved(end, "", NOW)
        return
    moved = held.moved(end, "why", NOW)
    assert (moved.phase, moved.why) == (end, "why")
    assert moved.drained_at == (NOW if end is Phase.DRAINED else None)
    assert moved.ended_at == (None if end in ACTIVE else NOW)


def test_may_apply_once_drained_for_drain_s():
    rollout = Rollout(follow_s=10, drain_s=5)
    drained = turn(2, sid(2)).moved(Phase.DRAINED, "", NOW)
    assert not may_apply(turn(2, sid(2)), rollout, NOW + 100)
    assert not may_apply(drained, rollout, NOW + 4.9)
    assert may_apply(drained, rollout, NOW + 5)
    assert not may_apply(drained.moved(Phase.DONE, "", NOW + 9), rollout, NOW + 10)


def test_a_record_round_trips():
    held = turn(2, sid(2), sid(1)).moved(Phase.DRAINED, "", NOW).moved(Phase.FAILED, "x", NOW)
    record = held.record()
    assert record["phase"] == "failed" and record["servers"] == [sid(2), sid(1)]
    assert Turn.from_record(record) == held


@pytest.mark.parametrize("change", [
    {"phase": "paused"}, {"servers": "a"}, {"servers": [1]}, {"box": None},
    {"granted_at": "now"}, {"expires_at": True}, {"drained_at": "x"}, {"why": 3},
])
def test_a_record_of_another_shape_is_refused(change):
    with pytest.raises(TurnError):
        Turn.from_record({**turn(2, sid(2)).record(), **change})
    with pytest.raises(TurnError):
        Turn.from_record([])
