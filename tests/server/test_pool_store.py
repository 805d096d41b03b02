"""The pools' part of the state store (docs/pools.md), on SQLite and a real PostgreSQL alike:
the latest state of each pool, its newest decisions, counters that only add, a report sent
twice counted once, and pools config.yaml lost forgotten."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmao_server.store import POOL_DECISIONS_KEPT, PoolsReport, StateStore, open_store


@pytest.fixture
def store(location: str) -> Iterator[StateStore]:
    opened = open_store(location)
    yield opened
    opened.close()


def state(boxes: int, spend: float) -> dict:
    return {"provider": "vast", "min_boxes": 1, "max_boxes": 3, "spend_usd_per_hour": spend,
            "budget_usd_per_hour": 2.0,
            "members": [{"box": f"chat-{n:08d}", "instance_id": str(n), "state": "running",
                         "status": "running", "usd_per_hour": 0.4} for n in range(boxes)]}


def report(at: float, decisions: dict[str, list[dict]],
           counts: dict[str, dict[tuple[str, str], int]]) -> PoolsReport:
    return PoolsReport(at, {pool: state(len(made), 0.4 * len(made))
                            for pool, made in decisions.items()},
                       {pool: tuple(made) for pool, made in decisions.items()}, counts)


def rent(n: int) -> dict:
    return {"kind": "rent", "box": f"chat-{n:08d}", "why": f"rent {n}"}


def test_a_report_is_kept_and_counters_add_up(store: StateStore) -> None:
    assert store.pools() == []
    assert store.record_pools(report(100.0, {"chat": [rent(1)], "code": []},
                                     {"chat": {("rents", ""): 1}}))
    assert store.record_pools(report(130.0, {"chat": [rent(2), rent(3)], "code": []},
                                     {"chat": {("rents", ""): 2,
                                               ("failed_rents", "throttled"): 1}}))
    chat, code = store.pools()
    assert (chat.pool, code.pool) == ("chat", "code")
    assert chat.reported_at == 130.0 and len(chat.state["members"]) == 2
    assert [d["why"] for d in chat.decisions] == ["rent 3", "rent 2", "rent 1"]  # newest first
    assert chat.counts == {("rents", ""): 3, ("failed_rents", "throttled"): 1}
    assert code.decisions == () and code.counts == {}


def test_a_report_sent_twice_or_late_counts_once(store: StateStore) -> None:
    sent = report(100.0, {"chat": [rent(1)]}, {"chat": {("rents", ""): 1}})
    assert store.record_pools(sent)
    assert not store.record_pools(sent)
    assert not store.record_pools(report(90.0, {"chat": [rent(2)]},
                                         {"chat": {("rents", ""): 1}}))
    (chat,) = store.pools()
    assert chat.counts == {("rents", ""): 1} and len(chat.decisions) == 1


def test_the_decisions_kept_are_bounded_to_the_newest(store: StateStore) -> None:
    for index in range(3):
        made = [rent(index * 100 + n) for n in range(POOL_DECISIONS_KEPT // 2 + 5)]
        store.record_pools(report(100.0 + index, {"chat": made}, {}))
    (chat,) = store.pools()
    assert len(chat.decisions) == POOL_DECISIONS_KEPT
    assert chat.decisions[0]["why"] == f"rent {200 + POOL_DECISIONS_KEPT // 2 + 4}"


def test_a_pool_config_yaml_lost_is_forgotten(store: StateStore) -> None:
    store.record_pools(report(100.0, {"chat": [rent(1)], "code": [rent(2)]},
                              {"chat": {("rents", ""): 1}, "code": {("rents", ""): 1}}))
    store.record_pools(report(130.0, {"code": []}, {}))
    assert [(p.pool, p.counts) for p in store.pools()] == [("code", {("rents", ""): 1})]
    store.record_pools(PoolsReport(160.0, {}, {}, {}))
    assert store.pools() == []
