"""The state store's contract, run against SQLite and a real PostgreSQL alike.

What it keeps, what it bounds, and that processes share it. The PostgreSQL
case runs on the session's throwaway cluster (``rig.postgres``), one fresh
database per test.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Phase, Turn, TurnError
from llmao_server import store as state_store
from llmao_server.store import (
    AppliedCard,
    AppliedReport,
    AppliedServer,
    Approval,
    Enrollment,
    IssuedLeaf,
    ReconcilePass,
    SqliteStore,
    StateStore,
    StoreError,
    UnknownBox,
    open_store,
)
from llmao_server.store.history import fullest
from llmao_server.store.sql import TIMES_PER_STATEMENT
from rig.processes import run_forked
from tests.server.binding_steps import bind, confirm, release


@pytest.fixture
def store(location: str) -> Iterator[StateStore]:
    opened = open_store(location)
    yield opened
    opened.close()


def test_a_fetch_time_only_moves_forward(store: StateStore) -> None:
    store.note_fetches({"a": 10.0, "b": 20.0})
    store.note_fetches({"a": 30.0, "b": 5.0})
    assert store.fetch_times() == {"a": 30.0, "b": 20.0}


def test_a_flush_of_many_boxes_keeps_each_box_its_own_latest_time(store: StateStore) -> None:
    """Times go many boxes a statement: more boxes than one statement takes, every one kept
    (each box's newer time moves, an older one does not), checks apart from fetches."""
    boxes = [f"10.0.{index // 250}.{index % 250}" for index in range(TIMES_PER_STATEMENT * 2 + 7)]
    store.note_fetches({box: 100.0 + index for index, box in enumerate(boxes)})
    store.note_fetches({box: 150.0 if index % 2 else 50.0 for index, box in enumerate(boxes)})
    store.note_checks({box: 7.0 for box in boxes[:TIMES_PER_STATEMENT + 1]})
    assert store.fetch_times() == {box: max(100.0 + index, 150.0 if index % 2 else 50.0)
                                   for index, box in enumerate(boxes)}
    assert store.check_times() == {box: 7.0 for box in boxes[:TIMES_PER_STATEMENT + 1]}


def test_sightings_of_one_name_merge(store: StateStore) -> None:
    store.note_unknown([UnknownBox("x", 10.0, 12.0, 2)])
    store.note_unknown([UnknownBox("x", 5.0, 11.0, 3), UnknownBox("y", 1.0, 1.0, 1)])
    assert store.unknown_boxes() == [UnknownBox("x", 5.0, 12.0, 5), UnknownBox("y", 1.0, 1.0, 1)]


def test_the_unknown_list_is_bounded_to_the_most_recently_seen(store: StateStore) -> None:
    for index in range(state_store.UNKNOWN_LIMIT + 15):
        store.note_unknown([UnknownBox(f"n{index}", index, index, 1)])
    store.note_unknown([UnknownBox("n0", 1000.0, 1000.0, 1)])  # seen again: newest now
    names = [u.name for u in store.unknown_boxes()]
    assert len(names) == state_store.UNKNOWN_LIMIT
    assert names[0] == "n0"
    assert names[-1] == f"n{state_store.UNKNOWN_LIMIT + 15 - state_store.UNKNOWN_LIMIT + 1}"


def test_one_batch_larger_than_the_limit_is_bounded_too(store: StateStore) -> None:
    store.note_unknown([UnknownBox(f"n{i}", i, i, 1) for i in range(3 * state_store.UNKNOWN_LIMIT)])
    assert len(store.unknown_boxes()) == state_store.UNKNOWN_LIMIT


def test_forgotten_names_leave_the_list(store: StateStore) -> None:
    store.note_unknown([UnknownBox("a", 1, 1, 1), UnknownBox("b", 2, 2, 1)])
    store.forget_unknown(["a", "not-there"])
    assert [u.name for u in store.unknown_boxes()] == ["b"]


def test_the_latest_applied_report_of_a_box_replaces_the_one_before(store: StateStore) -> None:
    servers = (AppliedServer("gemma", 8001, "gemma"), AppliedServer("qwen", 8002, "qwen-s"))
    store.record_applied(AppliedReport("a", "r1", "2026-01-01T00:00:00Z", servers, 1.0))
    store.record_applied(AppliedReport("a", "r2", "2026-01-02T00:00:00Z", servers[:1], 2.0))
    store.record_applied(AppliedReport("b", "r9", "2026-01-03T00:00:00+00:00", (), 3.0))
    assert store.applied_reports() == {
        "a": AppliedReport("a", "r2", "2026-01-02T00:00:00Z", servers[:1], 2.0),
        "b": AppliedReport("b", "r9", "2026-01-03T00:00:00+00:00", (), 3.0),
    }
    cards = (AppliedCard(0, "NVIDIA L4", 23034), AppliedCard(1, "NVIDIA L4", 23034))
    spanning = AppliedReport("a", "r3", "2026-01-04T00:00:00Z", servers, 4.0, cards,
                             (("gemma", (0, 1)), ("qwen", (1,))))
    store.record_applied(spanning)
    assert store.applied_reports()["a"] == spanning


def test_approvals_are_kept_replaced_and_cleared(store: StateStore) -> None:
    store.approve(Approval("a", ("gemma", "qwen"), "alice", 2.0))
    store.approve(Approval("b", ("qwen",), "bob", 1.0))
    store.approve(Approval("a", ("qwen",), "carol", 3.0))
    assert store.approval("a") == Approval("a", ("qwen",), "carol", 3.0)
    assert store.approval("c") is None
    assert [a.box for a in store.approvals()] == ["b", "a"]
    store.clear_approvals()
    assert store.approvals() == []


def test_only_the_latest_reconcile_pass_is_kept(store: StateStore) -> None:
    assert store.last_pass() is None
    first = ReconcilePass(10.0, {"llmao:a:8001:m": {"state": "Healthy", "memory": {
        "state": "Healthy", "consecutive_failures": 0}}}, ({"kind": "orphan_route"},), 11.0)
    store.record_pass(first)
    assert store.last_pass() == first
    second = ReconcilePass(20.0, {"llmao:b:8001:m": {"state": "Loading"}}, (), 21.0)
    store.record_pass(second)
    assert store.last_pass() == second


LOADED = "llmao:a:8001:m"


def loaded_pass(at: float, waiting: int = 2) -> ReconcilePass:
    """A pass with one scraped server and its model's load, recorded when it ran."""
    metrics = {"kv_cache_tokens": 4096, "kv_cache_usage_ratio": 0.5, "requests_running": 3,
               "requests_waiting": waiting, "prompt_tokens_total": 10,
               "generation_tokens_total": 20, "max_model_len": 2048, "scraped_at": at}
    return ReconcilePass(
        at, {LOADED: {"state": "Healthy", "model_name": "m", "metrics": metrics,
                      "context_len": 2048,
                      "oversized": False, "saturated": None, "waiting_passes": 1,
                      "generation_tokens_per_s": None, "cost_per_hour": 0.5}}, (), at,
        {"m": {"servers": 1, "healthy": 1, "capacity": 2, "requests_running": 3,
               "requests_waiting": waiting, "cost_per_hour": 0.5}},
        {"a": {"provider": "local", "cost_per_hour": 0.5, "source": "config"}})


def test_a_pass_keeps_its_model_and_box_loads_and_a_sample(store: StateStore) -> None:
    record = loaded_pass(100.0)
    store.record_pass(record)
    assert store.last_pass() == record
    [sample] = store.load_history(0.0)
    assert sample.pass_at == 100.0
    assert sample.servers == {LOADED: {"kv_cache_usage_ratio": 0.5, "requests_running": 3,
                                       "requests_waiting": 2, "generation_tokens_per_s": None}}
    assert sample.models["m"] == {"capacity": 2, "requests_running": 3, "requests_waiting": 2,
                                  "generation_tokens_per_s": None, "cost_per_hour": 0.5,
                                  "kv_cache_usage_ratio": 0.5}  # its fullest server's
    assert store.load_history(100.5) == []
    assert store.load_history(0.0, servers=False)[0].servers == {}


def test_a_models_kv_figure_is_its_fullest_server_with_one() -> None:
    verdicts = {"a": {"model_name": "m"}, "b": {"model_name": "m"}, "c": {"model_name": "m"},
                "d": {"model_name": "other"}}
    per_server = {"a": {"kv_cache_usage_ratio": 0.4}, "b": {"kv_cache_usage_ratio": None},
                  "c": {"kv_cache_usage_ratio": 0.7}, "d": {"kv_cache_usage_ratio": 0.9}}
    assert fullest(verdicts, per_server, "m") == 0.7
    assert fullest(verdicts, {"b": {"kv_cache_usage_ratio": None}}, "m") is None


def test_the_history_is_thinned_as_it_ages_and_ends(store: StateStore) -> None:
    step, start = 420.0, 1_000_000.0
    end = start + 50 * 3600.0
    at = start
    while at <= end:
        store.record_pass(loaded_pass(at))
        at += step
    kept = [sample.pass_at for sample in store.load_history(0.0)]
    assert kept == sorted(kept) and kept[-1] == at - step
    assert min(kept) >= kept[-1] - state_store.HISTORY_KEEP_S
    recent = [t for t in kept if t >= kept[-1] - state_store.HISTORY_FULL_S]
    # every pass of the last two hours
    assert len(recent) == int(state_store.HISTORY_FULL_S // step) + 1
    thinned_from = kept[-1] - state_store.HISTORY_FULL_S - state_store.HISTORY_BUCKET_S
    older = [t for t in kept if t < thinned_from]
    gaps = [later - earlier for earlier, later in zip(older, older[1:], strict=False)]
    assert gaps and min(gaps) >= state_store.HISTORY_BUCKET_S - step  # at most one per ten minutes
    assert len(kept) < (state_store.HISTORY_KEEP_S / state_store.HISTORY_BUCKET_S) + len(recent) + 2


def test_the_history_never_exceeds_its_limit(store: StateStore) -> None:
    for second in range(state_store.HISTORY_LIMIT + 20):
        store.record_pass(loaded_pass(5000.0 + second))
    kept = store.load_history(0.0)
    assert len(kept) == state_store.HISTORY_LIMIT
    assert kept[-1].pass_at == 5000.0 + state_store.HISTORY_LIMIT + 19


def test_admin_attempts_are_counted_per_scope_within_a_window(store: StateStore) -> None:
    assert [store.claim_attempt("10.0.0.1", 100.0 + i, 60.0) for i in range(3)] == [
        (1, 100.0), (2, 100.0), (3, 100.0)]
    for at in (100.0, 101.0):
        store.claim_attempt(state_store.OVERALL_SCOPE, at, 60.0)
    assert store.claim_attempt("10.0.0.2", 101.0, 60.0) == (1, 101.0)
    assert store.claim_attempt("10.0.0.1", 161.0, 60.0) == (1, 161.0)  # a new window
    assert store.claim_attempt(state_store.OVERALL_SCOPE, 102.0, 60.0) == (3, 100.0)
    # The right token: the peer forgotten, its attempt back.
    store.release_attempt("10.0.0.1", give_back_overall=True)
    assert store.claim_attempt("10.0.0.1", 162.0, 60.0) == (1, 162.0)
    assert store.claim_attempt(state_store.OVERALL_SCOPE, 103.0, 60.0) == (3, 100.0)
    # A trusted peer's right token: it drew nothing overall, so it gives nothing back there.
    store.release_attempt("10.0.0.1", give_back_overall=False)
    assert store.claim_attempt("10.0.0.1", 163.0, 60.0) == (1, 163.0)
    assert store.claim_attempt(state_store.OVERALL_SCOPE, 104.0, 60.0) == (4, 100.0)


def test_admin_attempts_are_kept_for_a_bounded_number_of_peers(store: StateStore) -> None:
    store.claim_attempt(state_store.OVERALL_SCOPE, 0.0, 1e6)
    for index in range(state_store.ATTEMPT_PEER_LIMIT + 5):
        store.claim_attempt(f"peer{index}", float(index + 1), 1e6)
    assert store.claim_attempt("peer0", 2e3, 1e6)[0] == 1  # the oldest were dropped
    assert store.claim_attempt(f"peer{state_store.ATTEMPT_PEER_LIMIT + 4}", 2e3, 1e6)[0] == 2
    assert store.claim_attempt("peer6", 2e3, 1e6)[0] == 2
    assert store.claim_attempt(state_store.OVERALL_SCOPE, 2e3, 1e6) == (2, 0.0)  # never trimmed


def test_a_server_secret_is_the_first_one_offered(location: str) -> None:
    first, second = open_store(location), open_store(location)
    try:
        assert first.server_secret("key", "aaaa") == "aaaa"
        assert second.server_secret("key", "bbbb") == "aaaa"
        assert second.server_secret("other", "cccc") == "cccc"
    finally:
        first.close()
        second.close()


def test_a_session_is_open_until_it_ends_expires_or_the_token_changes(
        store: StateStore) -> None:
    store.open_session("s1", "check-a", 100.0, 200.0)
    store.open_session("s2", "check-a", 100.0, 300.0)
    assert store.session_open("s1", "check-a", 150.0)
    assert not store.session_open("s1", "check-b", 150.0)  # another admin.token
    assert not store.session_open("s1", "check-a", 200.0)  # expired
    assert not store.session_open("s3", "check-a", 150.0)
    store.end_session("s2")
    assert not store.session_open("s2", "check-a", 150.0)
    store.open_session("s3", "check-a", 250.0, 400.0)  # drops the expired s1
    assert not store.session_open("s1", "check-a", 150.0)


def test_a_token_coming_back_into_force_ends_its_old_sessions(store: StateStore) -> None:
    store.note_token_in_force("check-a")
    store.open_session("a1", "check-a", 100.0, 900.0)
    store.note_token_in_force("check-a")  # another worker or instance, the same token
    assert store.session_open("a1", "check-a", 150.0)
    store.note_token_in_force("check-b")  # rotated: a's sessions stay for instances on a
    store.open_session("b1", "check-b", 160.0, 900.0)
    assert store.session_open("a1", "check-a", 170.0)
    store.note_token_in_force("check-a")  # rolled back: a's old sessions are not revived
    assert not store.session_open("a1", "check-a", 180.0)
    assert store.session_open("b1", "check-b", 180.0)


def _note_from_another_process(location: str, box: str) -> None:
    other = open_store(location)
    other.note_fetches({box: 42.0})
    other.note_unknown([UnknownBox(f"unknown-{box}", 1.0, 1.0, 1)])
    other.close()


def test_processes_on_one_store_share_the_state(location: str) -> None:
    open_store(location).close()
    codes = run_forked(_note_from_another_process, [(location, f"box{i}") for i in range(3)], 30)
    assert codes == [0, 0, 0]
    reader = open_store(location)
    assert reader.fetch_times() == {"box0": 42.0, "box1": 42.0, "box2": 42.0}
    assert len(reader.unknown_boxes()) == 3


def test_a_store_in_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open the state store"):
        SqliteStore(str(tmp_path / "missing" / "state.sqlite3"))


def test_a_new_sqlite_store_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """It holds the cookie signing key and the session ids, whatever the umask."""
    path = tmp_path / "state.sqlite3"
    previous = os.umask(0o022)
    try:
        opened = SqliteStore(str(path))
        opened.record_pass(ReconcilePass(1.0, {}, (), 1.0))  # the WAL files exist now
    finally:
        os.umask(previous)
    modes = {name.name: name.stat().st_mode & 0o777 for name in tmp_path.iterdir()}
    opened.close()
    assert modes == {"state.sqlite3": 0o600, "state.sqlite3-wal": 0o600,
                     "state.sqlite3-shm": 0o600}


def test_an_existing_sqlite_store_open_to_others_is_tightened_and_said(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.sqlite3"
    SqliteStore(str(path)).close()
    path.chmod(0o644)
    SqliteStore(str(path)).close()
    assert path.stat().st_mode & 0o777 == 0o600
    assert "was readable by others (mode 644): made 600" in caplog.text



# --- the fleet-wide reconcile pass lease ---------------------------------------------------------

FIRST, SECOND = "a" * 32, "b" * 32


def test_a_free_lease_is_taken_and_read_back(store: StateStore) -> None:
    assert store.pass_lease(100.0) is None
    lease = store.claim_pass_lease(FIRST, "ctl-1 pid 10", 100.0, 60.0)
    assert (lease.lease_id, lease.holder, lease.taken_at, lease.expires_at) == \
        (FIRST, "ctl-1 pid 10", 100.0, 160.0)
    assert store.pass_lease(159.0) == lease
    assert store.pass_lease(160.0) is None


def test_a_held_lease_is_refused_to_another_pass_and_names_its_holder(
        store: StateStore) -> None:
    store.claim_pass_lease(FIRST, "ctl-1 pid 10", 100.0, 60.0)
    answer = store.claim_pass_lease(SECOND, "ctl-2 pid 20", 150.0, 60.0)
    assert (answer.lease_id, answer.holder, answer.expires_at) == (FIRST, "ctl-1 pid 10", 160.0)


def test_a_renewal_extends_the_lease_and_keeps_holder_and_since(store: StateStore) -> None:
    store.claim_pass_lease(FIRST, "ctl-1 pid 10", 100.0, 60.0)
    renewed = store.claim_pass_lease(FIRST, "ctl-1 pid 11", 150.0, 60.0)
    assert (renewed.holder, renewed.taken_at, renewed.expires_at) == \
        ("ctl-1 pid 10", 100.0, 210.0)
    assert store.claim_pass_lease(SECOND, "ctl-2 pid 20", 200.0, 60.0).lease_id == FIRST


def test_an_expired_lease_is_taken_over_and_its_old_pass_cannot_renew_it(
        store: StateStore) -> None:
    store.claim_pass_lease(FIRST, "ctl-1 pid 10", 100.0, 60.0)
    taken = store.claim_pass_lease(SECOND, "ctl-2 pid 20", 160.0, 60.0)
    assert (taken.lease_id, taken.holder, taken.taken_at) == (SECOND, "ctl-2 pid 20", 160.0)
    assert store.claim_pass_lease(FIRST, "ctl-1 pid 10", 170.0, 60.0).lease_id == SECOND


def test_only_the_holder_releases_the_lease(store: StateStore) -> None:
    store.claim_pass_lease(FIRST, "ctl-1 pid 10", 100.0, 60.0)
    assert store.release_pass_lease(SECOND) is False
    assert store.pass_lease(110.0) is not None
    assert store.release_pass_lease(FIRST) is True
    assert store.pass_lease(110.0) is None
    assert store.claim_pass_lease(SECOND, "ctl-2 pid 20", 111.0, 60.0).lease_id == SECOND


def claim_in_a_child(location: str, lease_id: str) -> None:
    """Claim from a fresh process (its own connection); exit 0 when this pass got it, else 3."""
    opened = open_store(location)
    try:
        won = opened.claim_pass_lease(lease_id, f"ctl pid {lease_id[-2:]}", 100.0, 60.0)
    finally:
        opened.close()
    raise SystemExit(0 if won.lease_id == lease_id else 3)


def test_passes_claiming_at_once_from_processes_get_one_lease(location: str) -> None:
    """Every pass its own process and connection, as two controllers' passes reach two workers:
    exactly one gets the lease."""
    codes = run_forked(claim_in_a_child, [(location, f"{index:032x}") for index in range(6)],
                       timeout=60)
    assert sorted(codes) == [0, 3, 3, 3, 3, 3]


# --- follow checks and rollout turns ------------------------------------------------------------


def test_a_check_time_only_moves_forward_and_is_not_a_fetch(store: StateStore) -> None:
    store.note_checks({"a": 10.0})
    store.note_checks({"a": 5.0, "b": 7.0})
    assert store.check_times() == {"a": 10.0, "b": 7.0}
    assert store.fetch_times() == {}


def turn_of(box: str, revision: str = "r1", phase: Phase = Phase.DRAINING) -> Turn:
    return Turn(box, revision, (f"llmao:{box}:8001:gemma",), phase, 100.0, 900.0)


def grant_when_none_active(box: str, revision: str = "r1", pause_s: float = 0.0):
    """A decision as decide_turn makes one, reduced to one rule: one active turn at a time."""
    def decide(turns: list[Turn]) -> Turn | str:
        time.sleep(pause_s)  # widens the window between the read and the write
        if any(turn.active and turn.box != box for turn in turns):
            return "another box is changing"
        return turn_of(box, revision)
    return decide


def test_a_granted_turn_is_kept_as_its_box_latest(store: StateStore) -> None:
    assert store.turns() == []
    assert store.grant_turn(grant_when_none_active("b1")) == turn_of("b1")
    assert store.grant_turn(grant_when_none_active("b2")) == "another box is changing"
    assert store.turns() == [turn_of("b1")]
    store.update_turn("b1", "r1", Phase.DRAINED, "", 110.0)
    store.update_turn("b1", "r1", Phase.DONE, "", 120.0)
    assert store.grant_turn(grant_when_none_active("b2")) == turn_of("b2")
    # A new revision's turn replaces the box's row.
    assert store.grant_turn(grant_when_none_active("b1", "r2")) == "another box is changing"
    store.update_turn("b2", "r1", Phase.FAILED, "gemma Stalled", 130.0)
    store.grant_turn(grant_when_none_active("b1", "r2"))
    assert [(t.box, t.revision, t.phase) for t in store.turns()] == [
        ("b1", "r2", Phase.DRAINING), ("b2", "r1", Phase.FAILED)]
    assert store.turns()[1].why == "gemma Stalled"


def test_a_decision_that_raises_writes_nothing(store: StateStore) -> None:
    def stale(turns: list[Turn]) -> Turn:
        raise ValueError("stale revision")
    with pytest.raises(ValueError, match="stale revision"):
        store.grant_turn(stale)
    assert store.turns() == []
    assert store.grant_turn(grant_when_none_active("b1")) == turn_of("b1")


def test_a_turn_moves_only_as_the_rules_allow(store: StateStore) -> None:
    store.grant_turn(grant_when_none_active("b1"))
    with pytest.raises(TurnError, match="is draining; it cannot become done"):
        store.update_turn("b1", "r1", Phase.DONE, "", 110.0)
    with pytest.raises(TurnError, match="b1 has no turn for revision r0"):
        store.update_turn("b1", "r0", Phase.DRAINED, "", 110.0)
    with pytest.raises(TurnError, match="b9 has no turn"):
        store.update_turn("b9", "r1", Phase.DRAINED, "", 110.0)
    drained = store.update_turn("b1", "r1", Phase.DRAINED, "", 110.0)
    assert (drained.phase, drained.drained_at) == (Phase.DRAINED, 110.0)
    assert store.turns() == [drained]


def grant_in_a_child(location: str, box: str) -> None:
    """Ask for a turn from a fresh process (its own connection); exit 0 when granted, else 3."""
    opened = open_store(location)
    try:
        decision = opened.grant_turn(grant_when_none_active(box, pause_s=0.3))
    finally:
        opened.close()
    raise SystemExit(0 if isinstance(decision, Turn) else 3)


def test_boxes_asking_at_once_from_processes_get_one_turn(location: str) -> None:
    """Each ask its own process and connection, as boxes reach several workers and instances:
    the read and the write are one step, so exactly one is granted."""
    open_store(location).close()
    codes = run_forked(grant_in_a_child, [(location, f"b{index}") for index in range(4)],
                       timeout=60)
    assert sorted(codes) == [0, 3, 3, 3]
    reader = open_store(location)
    assert len(reader.turns()) == 1
    reader.close()


def test_a_wait_is_new_once_per_box_and_revision(store: StateStore) -> None:
    assert store.note_wait("b1", "r1") is True
    assert store.note_wait("b1", "r1") is False
    assert store.note_wait("b2", "r1") is True
    assert store.note_wait("b1", "r2") is True
    assert store.note_wait("b1", "r2") is False


# ------------------------------------------------------------------ box bindings


def test_a_binding_is_pending_then_confirmed_and_a_confirmed_one_is_not_replaced(
        store: StateStore) -> None:
    assert bind(store, "box-a", "h1", "192.0.2.1", None, 1.0)
    assert bind(store, "box-a", "h2", "192.0.2.1", "i-7", 2.0)  # pending, same peer: replaced
    assert not bind(store, "box-a", "h9", "192.0.2.8", None, 2.5)  # pending elsewhere: kept
    assert not confirm(store, "box-a", "h1", "192.0.2.1", None, 3.0)  # void token
    assert confirm(store, "box-a", "h2", "192.0.2.2", None, 3.0)
    assert not bind(store, "box-a", "h3", "192.0.2.9", None, 4.0)
    [binding] = store.bindings_since(0)
    assert (binding.token_hash, binding.confirmed, binding.peer, binding.instance,
            binding.bound_at) == ("h2", True, "192.0.2.2", "i-7", 3.0)


def test_bindings_since_reads_only_changes_and_sees_releases(store: StateStore) -> None:
    bind(store, "box-a", "h1", None, None, 1.0)
    bind(store, "box-b", "h2", None, None, 1.0)
    seen = max(binding.seq for binding in store.bindings_since(0))
    assert store.bindings_since(seen) == []
    released = release(store, "box-a")
    assert released is not None and released.token_hash == "h1"
    [change] = store.bindings_since(seen)
    assert change.box == "box-a" and not change.bound
    assert release(store, "box-a") is None
    assert bind(store, "box-a", "h3", None, None, 2.0)


def test_conflicts_are_kept_until_the_name_is_released(store: StateStore) -> None:
    bind(store, "box-a", "h1", "192.0.2.1", None, 1.0)
    assert store.note_binding_conflict("box-a", "192.0.2.5", 5.0) == 1
    assert store.note_binding_conflict("box-a", "192.0.2.6", 6.0) == 2
    [conflict] = store.binding_conflicts()
    assert (conflict.box, conflict.count, conflict.last_at, conflict.last_peer,
            conflict.holder_peer) == ("box-a", 2, 6.0, "192.0.2.6", "192.0.2.1")
    release(store, "box-a")
    assert store.binding_conflicts() == []


def test_a_binding_decision_that_raises_writes_nothing(store: StateStore) -> None:
    def fails(binding: object, enrollment: object) -> tuple[None, None]:
        raise RuntimeError("a rule's fault")

    with pytest.raises(RuntimeError):
        store.decide_binding("box-a", fails)
    assert store.bindings_since(0) == []


def test_enrollments_and_leaves_are_kept_until_they_end(store: StateStore) -> None:
    store.enroll(Enrollment("box-a", "e1", 100.0, "pool-1", 10.0, "admin"))
    store.enroll(Enrollment("box-b", "e2", 50.0, None, 10.0, "admin"))
    assert [e.box for e in store.enrollments(60.0)] == ["box-a"]
    store.enroll(Enrollment("box-a", "e3", 200.0, None, 20.0, "admin"))  # replaces
    [kept] = store.enrollments(60.0)
    assert (kept.token_hash, kept.pool) == ("e3", None)
    store.record_leaf(IssuedLeaf("11", "box-a", 1000.0, 10.0, False))
    store.record_leaf(IssuedLeaf("12", "box-a", 1000.0, 20.0, True))
    assert [leaf.serial for leaf in store.issued_leaves(500.0)] == ["11", "12"]
    assert store.issued_leaves(1000.0 + 86401) == []
