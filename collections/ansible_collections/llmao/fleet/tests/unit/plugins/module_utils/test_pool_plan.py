"""The pool planner: rents, replacements, drains and returns, within min/max and the budget,
never of an instance without the pool's label, never doubling a rent that may have been made."""

from __future__ import annotations

from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import HostRow
from ansible_collections.llmao.fleet.plugins.module_utils.pool_config import Budget, Offer, Pool
from ansible_collections.llmao.fleet.plugins.module_utils.pool_plan import (
    DRAIN,
    FORGET,
    HOLD,
    PENDING_S,
    REFUSE,
    RENT,
    RETURN,
    BoxSignal,
    Member,
    PoolMemory,
    PoolView,
    backed_off,
    plan_pools,
    pool_spend,
    rented,
)
from ansible_collections.llmao.fleet.plugins.module_utils.provider_rent import RentOffer

NOW = 1_000_000.0
DRAIN_S = 30.0


def pool(name="chat", low=1, high=4, ceiling=0.6, passes=3, idle_s=600.0) -> Pool:
    return Pool(name, "vast", Offer(("RTX 4090",), ceiling), low, high,
                (HostRow(0, "gemma", 8001, "gemma"),), "img", passes, idle_s)


def offers(*prices: float) -> tuple[RentOffer, ...]:
    return tuple(RentOffer("vast", str(100 + i), "RTX 4090", 1, 24, price)
                 for i, price in enumerate(prices))


def box(n: int, name: str = "chat") -> str:
    return f"{name}-{n:08d}"


def member(n: int, price=0.5, stopped=False, name="chat") -> Member:
    return Member(box(n, name), str(9000 + n), "exited" if stopped else "running", stopped,
                  price)


def busy(*members: Member, running=3) -> MappingProxyType:
    return MappingProxyType({m.box: BoxSignal(running=running) for m in members})


def plan(*views: PoolView, budget=5.0, now=NOW):
    return plan_pools({view.pool.name: view for view in views}, Budget(budget), now, DRAIN_S)


def kinds(result) -> list[tuple[str, str | None]]:
    return [(d.kind, d.box) for d in result.decisions]


def test_an_empty_pool_rents_up_to_min_from_the_cheapest_offer():
    result = plan(PoolView(pool(low=2), offers=offers(0.5, 0.3, 0.4)))
    assert [(d.kind, d.offer.usd_per_hour) for d in result.decisions] == [
        (RENT, 0.3), (RENT, 0.4)]
    assert result.spend["chat"] == 0.7


def test_without_offers_searched_the_plan_asks_for_them():
    result = plan(PoolView(pool(low=1)))
    assert kinds(result) == [(RENT, None)] and result.decisions[0].offer is None
    assert result.wants_offers() == ("chat",)


def test_a_rent_past_the_budget_is_refused_with_the_figures():
    one = member(1, price=0.55)
    result = plan(PoolView(pool(low=2), members=(one,), signals=busy(one),
                           offers=offers(0.5)), budget=1.0)
    (refusal,) = result.decisions
    assert refusal.kind == REFUSE
    assert "would take the spend to 1.05 $/h, past budget.max_usd_per_hour 1" in refusal.reason


def test_an_offer_dearer_than_the_pool_ceiling_is_never_taken():
    result = plan(PoolView(pool(low=1, ceiling=0.6), offers=offers(0.61, 0.9)))
    assert [d.kind for d in result.decisions] == [REFUSE]
    assert "no vast offer fits" in result.decisions[0].reason


def test_sustained_saturation_rents_one_more_box_after_scale_up_passes():
    one = member(1)
    memory = PoolMemory(saturated_passes=1, members=frozenset({one.box}))
    view = PoolView(pool(passes=3), members=(one,), saturated=True, signals=busy(one),
                    offers=offers(0.5), memory=memory)
    first = plan(view)
    assert kinds(first) == [] and first.memory["chat"].saturated_passes == 2
    second = plan(PoolView(**{**view.__dict__, "memory": first.memory["chat"]}))
    assert [d.kind for d in second.decisions] == [RENT]
    assert second.memory["chat"].saturated_passes == 0


def test_saturation_at_max_is_refused_and_says_so():
    members = tuple(member(n) for n in range(2))
    view = PoolView(pool(high=2, passes=1), members=members, saturated=True,
                    signals=busy(*members), offers=offers(0.5))
    (refusal,) = plan(view).decisions
    assert refusal.kind == REFUSE and "at boxes.max (2)" in refusal.reason


def test_a_rent_not_listed_yet_is_never_doubled_and_lapses_after_its_time():
    memory = rented(PoolMemory(), box(7), NOW, 0.4)
    view = PoolView(pool(low=1), offers=offers(0.3), memory=memory)
    assert kinds(plan(view)) == []
    assert pool_spend(view, NOW) == 0.4
    assert [d.kind for d in plan(view, now=NOW + PENDING_S + 1).decisions] == [RENT]


def test_a_labelled_instance_the_memory_does_not_know_still_counts():
    listed = member(3)
    view = PoolView(pool(low=1, high=1), members=(listed,), signals=busy(listed),
                    saturated=True, offers=offers(0.3))
    assert RENT not in [d.kind for d in plan(view).decisions]


def test_a_stopped_box_is_replaced_rent_first_then_returned():
    dead, alive = member(1, stopped=True), member(2)
    view = PoolView(pool(low=2), members=(dead, alive), signals=busy(alive),
                    offers=offers(0.4), memory=PoolMemory(members=frozenset({dead.box,
                                                                             alive.box})))
    result = plan(view)
    assert [d.kind for d in result.decisions] == [RENT, RETURN]
    assert result.decisions[1].instance_id == dead.instance_id
    assert "stopped (exited)" in result.decisions[1].reason


def test_a_stalled_box_is_returned_first_when_the_budget_cannot_hold_both():
    stalled, alive = member(1, price=0.5), member(2, price=0.5)
    signals = MappingProxyType({stalled.box: BoxSignal(stalled=True, running=0),
                                alive.box: BoxSignal(running=1)})
    view = PoolView(pool(low=2), members=(stalled, alive), signals=signals,
                    offers=offers(0.5))
    result = plan(view, budget=1.2)
    assert [d.kind for d in result.decisions] == [REFUSE, RETURN]
    assert "Stalled" in result.decisions[1].reason


def test_a_box_that_left_the_listing_is_forgotten():
    alive = member(2)
    view = PoolView(pool(low=1), members=(alive,), signals=busy(alive),
                    memory=PoolMemory(members=frozenset({box(1), alive.box})))
    assert kinds(plan(view)) == [(FORGET, box(1))]


def test_an_idle_pool_drains_one_box_then_returns_it_after_drain_s():
    members = (member(1, price=0.4), member(2, price=0.5))
    idle = busy(*members, running=0)
    view = PoolView(pool(low=1, idle_s=600), members=members, signals=idle,
                    memory=PoolMemory(idle_since=NOW - 601))
    first = plan(view)
    assert kinds(first) == [(DRAIN, box(2))]   # the dearest goes
    later = PoolView(**{**view.__dict__, "memory": first.memory["chat"]})
    assert kinds(plan(later, now=NOW + DRAIN_S - 1)) == []
    assert kinds(plan(later, now=NOW + DRAIN_S)) == [(RETURN, box(2))]


def test_an_idle_pool_at_min_keeps_its_boxes_and_a_busy_one_resets_the_clock():
    one = member(1)
    at_min = PoolView(pool(low=1), members=(one,), signals=busy(one, running=0),
                      memory=PoolMemory(idle_since=NOW - 10_000))
    assert kinds(plan(at_min)) == []
    members = (member(1), member(2))
    working = PoolView(pool(low=1), members=members, signals=busy(*members, running=1),
                       memory=PoolMemory(idle_since=NOW - 10_000))
    result = plan(working)
    assert kinds(result) == [] and result.memory["chat"].idle_since is None


def test_an_unreadable_listing_holds_the_pool():
    view = PoolView(pool(low=3), listing_error="HTTP 503", offers=offers(0.1),
                    memory=PoolMemory(members=frozenset({box(1)})))
    assert [d.kind for d in plan(view).decisions] == [HOLD]


def test_after_a_throttled_rent_the_pool_waits_as_asked():
    memory = backed_off(PoolMemory(), NOW, 30.0)
    view = PoolView(pool(low=1), offers=offers(0.3), memory=memory)
    assert [d.kind for d in plan(view).decisions] == [REFUSE]
    assert [d.kind for d in plan(view, now=NOW + 31).decisions] == [RENT]


def test_the_budget_is_shared_by_the_pools_in_order():
    first, second = pool("a", low=2), pool("b", low=2)
    result = plan(PoolView(first, offers=offers(0.5, 0.5)),
                  PoolView(second, offers=offers(0.5, 0.5)), budget=1.5)
    assert [(d.pool, d.kind) for d in result.decisions] == [
        ("a", RENT), ("a", RENT), ("b", RENT), ("b", REFUSE)]


def test_memory_read_back_keeps_only_what_it_wrote():
    memory = PoolMemory(3, NOW, MappingProxyType({box(1): (NOW, 0.4)}),
                        MappingProxyType({box(2): NOW}), frozenset({box(2)}), NOW + 5)
    assert PoolMemory.from_record("chat", memory.record()) == memory
    hostile = {"saturated_passes": -4, "idle_since": "x", "members": ["other-00000001", 5],
               "pending": {"chat-1": [1, 2], box(3): "no"}, "draining": [], "backoff_until": 1e99}
    assert PoolMemory.from_record("chat", hostile) == PoolMemory()
    assert PoolMemory.from_record("chat", None) == PoolMemory()


# The properties, over many random pools, listings, signals and offers.

MEMBERS = st.lists(st.builds(
    lambda n, price, stopped, stalled, running: (member(n, price, stopped), stalled, running),
    st.integers(0, 30), st.one_of(st.none(), st.floats(0, 2)), st.booleans(), st.booleans(),
    st.one_of(st.none(), st.integers(0, 3))), max_size=8, unique_by=lambda m: m[0].box)


@settings(max_examples=300, deadline=None)
@given(MEMBERS, st.integers(0, 4), st.integers(0, 4), st.lists(st.floats(0.05, 1.0), max_size=6),
       st.floats(0.5, 6.0), st.booleans(), st.integers(0, 5), st.integers(0, 4))
def test_properties_budget_min_max_and_only_labelled_boxes(listed, low, extra, prices, budget,
                                                           saturated, sat_passes, pending):
    the_pool = pool(low=low, high=max(low + extra, 1), passes=2, idle_s=60)
    members = tuple(m for m, _stalled, _running in listed)
    signals = MappingProxyType({m.box: BoxSignal(stalled, running)
                                for m, stalled, running in listed})
    memory = PoolMemory(sat_passes, NOW - 100, MappingProxyType(
        {box(100 + n): (NOW - 10, 0.3) for n in range(pending)}))
    view = PoolView(the_pool, members, None, saturated, signals, offers(*prices), memory)
    before = pool_spend(view, NOW)
    result = plan(view, budget=budget)
    rents = [d for d in result.decisions if d.kind == RENT]
    # Never past the budget: what the rents add keeps the spend within it (when it was).
    added = sum(d.offer.usd_per_hour for d in rents)
    if rents:
        assert before + added <= budget + 1e-9
    assert all(d.offer.usd_per_hour <= the_pool.offer.max_usd_per_hour for d in rents)
    # Only boxes the listing shows with the pool's label are returned or drained.
    ours = {m.box: m.instance_id for m in members}
    for d in result.decisions:
        if d.kind in (RETURN, DRAIN):
            assert ours.get(d.box) == d.instance_id
    # Never past max: the boxes kept, pending and rented stay within it (or within what was).
    returned = {d.box for d in result.decisions if d.kind in (RETURN, DRAIN)}
    kept = [m for m in members if m.box not in returned]
    after = len(kept) + pending + len(rents)
    assert after <= max(the_pool.max_boxes, len(members) + pending)
    assert not rents or len(members) + pending + len(rents) - len(returned) <= the_pool.max_boxes
    # Never below min by a return of a healthy box: drains only above min.
    if any(d.kind == DRAIN for d in result.decisions):
        assert len(kept) + pending >= the_pool.min_boxes
    # Idempotent: planning the same pass again decides the same.
    assert plan(view, budget=budget).decisions == result.decisions


def test_a_pool_with_a_box_still_booting_does_not_grow_again():
    ready, booting = member(1), member(2)
    signals = MappingProxyType({ready.box: BoxSignal(running=4),
                                booting.box: BoxSignal(running=None, booting=True)})
    view = PoolView(pool(passes=1), members=(ready, booting), saturated=True, signals=signals,
                    offers=offers(0.3), memory=PoolMemory(saturated_passes=5))
    assert kinds(plan(view)) == []
    ready_now = MappingProxyType({**signals, booting.box: BoxSignal(running=4)})
    assert [d.kind for d in plan(PoolView(**{**view.__dict__,
                                             "signals": ready_now})).decisions] == [RENT]
