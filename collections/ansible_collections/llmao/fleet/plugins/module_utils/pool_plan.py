# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each pool does this pass: rent, replace, drain and return boxes, or refuse (docs/pools.md).

Pure: it reads what the pass observed (each pool's labelled instances from the listing, the
last verdicts' saturated flag and requests running, a small memory per pool) and the
offers found, and returns decisions; :mod:`pool_apply` carries them out. Only instances that
carry llmao's label for the pool are ever counted, drained or returned, and a pool whose
listing could not be read does nothing (an unreadable listing is never an empty one).

The rules, each in one place:

- Spend is what every pool's listed instances cost (a stopped one costs nothing; one the
  listing does not price counts at its pool's ``max_usd_per_hour``) plus the rents made but
  not listed yet. A rent is made only when the spend plus its offer stays within
  ``budget.max_usd_per_hour``; otherwise it is refused, with the figures.
- A rent that is not listed yet counts as a box for :data:`PENDING_S`, so a create that timed
  out (its instance may exist) is never doubled; any listed instance with the pool's label
  counts, whether this memory knows it or not.
- A box whose instance is stopped (exited, interrupted) or whose servers are Stalled is
  replaced: a new box is rented first when the budget holds both, else the broken one is
  returned first and the next pass rents. A box that left the listing is forgotten (its
  binding released, its routes deleted).
- A pool whose models are saturated for ``scale_up_passes`` passes rents one more box, up to
  ``max``; a pool where no box ran a request for ``idle_s`` drains one box (its routes go,
  requests in flight finish) and returns it after ``rollout.drain_s``, down to ``min``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from .json_values import is_number
from .pool_config import BOX_SUFFIX_RE, POOL_NAME_RE, Budget, Pool
from .provider_rent import RentOffer

# How long a rent not yet listed counts as a box of its pool.
PENDING_S = 900.0
# How long a pool waits after a failed rent when the provider did not say.
BACKOFF_S = 60.0
# Bounds of what the memory keeps (it is read back from a file each pass).
MAX_REMEMBERED = 200

RENT, DRAIN, RETURN, FORGET, REFUSE, HOLD = "rent", "drain", "return", "forget", "refuse", "hold"
# The decisions that change a pool (what check mode and the diff show, what reports changed).
CHANGES = (RENT, DRAIN, RETURN)


@dataclass(frozen=True)
class Member:
    """One instance carrying a pool's label, as the listing shows it."""

    box: str
    instance_id: str
    status: str = "running"
    stopped: bool = False
    price: float | None = None


@dataclass(frozen=True)
class BoxSignal:
    """What the last verdicts say of a box: a server of it Stalled past its grace, the
    requests its servers ran (None when any of them was not read), and whether it is still
    booting (a server Awaiting or Loading, or none verdicted yet): a pool with a box booting
    does not grow again, since the saturation it sees is what that box is coming for."""

    stalled: bool = False
    running: int | None = None
    booting: bool = False


@dataclass(frozen=True)
class PoolMemory:
    """What a pool remembers between passes (kept by :mod:`pool_apply`)."""

    saturated_passes: int = 0
    idle_since: float | None = None
    # box → (when it was rented, its price): rents not listed yet.
    pending: Mapping[str, tuple[float, float]] = field(
        default_factory=lambda: MappingProxyType({}))
    # box → when its drain began.
    draining: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    members: frozenset[str] = frozenset()
    backoff_until: float = 0.0

    def record(self) -> dict[str, Any]:
        return {"saturated_passes": self.saturated_passes, "idle_since": self.idle_since,
                "pending": {box: list(value) for box, value in self.pending.items()},
                "draining": dict(self.draining), "members": sorted(self.members),
                "backoff_until": self.backoff_until}

    @classmethod
    def from_record(cls, pool: str, record: Any) -> PoolMemory:
        """Back from :meth:`record`; whatever is not of the shape written is left out."""
        if not isinstance(record, Mapping):
            return cls()
        ours = list(_names(record.get("members"), pool))
        pending = record.get("pending") if isinstance(record.get("pending"), Mapping) else {}
        draining = record.get("draining") if isinstance(record.get("draining"), Mapping) else {}
        return cls(
            saturated_passes=min(_whole(record.get("saturated_passes")), 10**6),
            idle_since=_time(record.get("idle_since")),
            pending=MappingProxyType({box: (_time(value[0]) or 0.0, _time(value[1]) or 0.0)
                                      for box, value in list(pending.items())[:MAX_REMEMBERED]
                                      if _is_box(box, pool) and isinstance(value, list)
                                      and len(value) == 2}),
            draining=MappingProxyType({box: _time(since) or 0.0 for box, since
                                       in list(draining.items())[:MAX_REMEMBERED]
                                       if _is_box(box, pool)}),
            members=frozenset(ours[:MAX_REMEMBERED]),
            backoff_until=_time(record.get("backoff_until")) or 0.0)


def _is_box(box: Any, pool: str) -> bool:
    return isinstance(box, str) and POOL_NAME_RE.match(pool) is not None and \
        box.startswith(f"{pool}-") and BOX_SUFFIX_RE.match(box[len(pool) + 1:]) is not None


def _names(value: Any, pool: str) -> list[str]:
    return [box for box in value if _is_box(box, pool)] if isinstance(value, list) else []


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _time(value: Any) -> float | None:
    return float(value) if is_number(value) and 0 <= value < 1e11 else None


@dataclass(frozen=True)
class Decision:
    """One thing a pool does, and why (the strip and the audit show ``reason``)."""

    pool: str
    kind: str
    reason: str
    box: str | None = None
    instance_id: str | None = None
    offer: RentOffer | None = None

    def record(self) -> dict[str, Any]:
        offer = self.offer
        return {"pool": self.pool, "kind": self.kind, "reason": self.reason, "box": self.box,
                "instance_id": self.instance_id,
                "offer": None if offer is None else {
                    "provider": offer.provider, "id": offer.offer_id, "gpu": offer.gpu_name,
                    "gpus": offer.num_gpus, "usd_per_hour": offer.usd_per_hour,
                    "cloud": offer.cloud or None, "bid": offer.bid}}


@dataclass(frozen=True)
class PoolView:
    """Everything the planner reads of one pool this pass. ``offers`` None: not searched
    (a rent is then decided without its offer, and the caller searches and plans again)."""

    pool: Pool
    members: tuple[Member, ...] = ()
    listing_error: str | None = None
    saturated: bool = False
    signals: Mapping[str, BoxSignal] = field(default_factory=lambda: MappingProxyType({}))
    offers: tuple[RentOffer, ...] | None = None
    memory: PoolMemory = PoolMemory()


@dataclass(frozen=True)
class PoolPlan:
    """Every pool's decisions, the memory to keep, and each pool's spend once they are done."""

    decisions: tuple[Decision, ...]
    memory: Mapping[str, PoolMemory]
    spend: Mapping[str, float]

    def wants_offers(self) -> tuple[str, ...]:
        """Pools that decided a rent without an offer: search theirs and plan again."""
        return tuple(dict.fromkeys(d.pool for d in self.decisions
                                   if d.kind == RENT and d.offer is None))


def member_cost(member: Member, pool: Pool) -> float:
    """What a listed instance costs an hour: nothing when stopped, its listed price, or the
    pool's ceiling when the listing does not price it."""
    if member.stopped:
        return 0.0
    return member.price if member.price is not None else pool.offer.max_usd_per_hour


def pool_spend(view: PoolView, now: float) -> float:
    """A pool's spend now: its listed instances and its rents not listed yet."""
    listed = {member.box for member in view.members}
    return sum(member_cost(member, view.pool) for member in view.members) + \
        sum(price for box, (since, price) in view.memory.pending.items()
            if box not in listed and now - since < PENDING_S)


def plan_pools(views: Mapping[str, PoolView], budget: Budget, now: float,
               drain_s: float) -> PoolPlan:
    """Every pool's decisions, within one budget shared in the pools' order."""
    spend = {name: pool_spend(view, now) for name, view in views.items()}
    decisions: list[Decision] = []
    memory: dict[str, PoolMemory] = {}
    for name, view in views.items():
        purse = _Purse(budget.max_usd_per_hour, sum(spend.values()), view)
        made, memory[name] = _plan_pool(view, purse, now, drain_s)
        decisions += made
        spend[name] += purse.added
    return PoolPlan(tuple(decisions), MappingProxyType(memory), MappingProxyType(spend))


class _Purse:
    """One pool's rents this pass: the offers left, and the budget they must stay within."""

    def __init__(self, budget: float, committed: float, view: PoolView) -> None:
        self.budget, self.committed, self.view = budget, committed, view
        self.added = 0.0
        self.offers = None if view.offers is None else \
            sorted(view.offers, key=lambda offer: offer.usd_per_hour)

    def rent(self, why: str, now: float) -> Decision:
        """A rent of the cheapest offer left, or a refusal saying why. The spend counts every
        listed box, a broken one being replaced too: a replacement is rented first only
        when the budget holds both."""
        pool = self.view.pool
        if self.view.memory.backoff_until > now:
            return Decision(pool.name, REFUSE, f"{why}: not renting until the provider's "
                            f"wait is over ({self.view.memory.backoff_until - now:.0f} s)")
        if self.offers is None:
            return Decision(pool.name, RENT, why)
        fitting = [o for o in self.offers if o.usd_per_hour <= pool.offer.max_usd_per_hour]
        if not fitting:
            return Decision(pool.name, REFUSE, f"{why}: no {pool.provider} offer fits "
                            f"(offer.max_usd_per_hour {pool.offer.max_usd_per_hour:g})")
        offer = fitting[0]
        total = self.committed + self.added + offer.usd_per_hour
        if total > self.budget + 1e-9:
            return Decision(pool.name, REFUSE, f"{why}: the cheapest offer "
                            f"({offer.usd_per_hour:g} $/h) would take the spend to "
                            f"{total:g} $/h, past budget.max_usd_per_hour {self.budget:g}")
        self.offers.remove(offer)
        self.added += offer.usd_per_hour
        return Decision(pool.name, RENT, why, offer=offer)


def _plan_pool(view: PoolView, purse: _Purse, now: float,
               drain_s: float) -> tuple[list[Decision], PoolMemory]:
    pool, memory = view.pool, view.memory
    if view.listing_error is not None:
        return [Decision(pool.name, HOLD, f"the {pool.provider} listing could not be read "
                                          f"({view.listing_error}): nothing is rented or "
                                          "returned")], memory
    listed = {member.box: member for member in view.members}
    pending = {box: value for box, value in memory.pending.items()
               if box not in listed and now - value[0] < PENDING_S}
    decisions = [Decision(pool.name, FORGET, "its instance left the listing", box)
                 for box in sorted(memory.members - set(listed) - set(pending))]
    draining = {box: since for box, since in memory.draining.items() if box in listed}
    decisions += [Decision(pool.name, RETURN, f"drained for {now - since:.0f} s", box,
                           listed[box].instance_id)
                  for box, since in sorted(draining.items()) if now - since >= drain_s]
    broken = [member for box, member in sorted(listed.items()) if box not in draining
              and (member.stopped or view.signals.get(box, BoxSignal()).stalled)]
    live = [member for box, member in sorted(listed.items())
            if box not in draining and member not in broken]
    count = len(live) + len(pending)
    replaced, count = _replace(view, purse, broken, count, now)
    decisions += replaced
    booting = any(view.signals.get(m.box, BoxSignal()).booting for m in live)
    sized, memory = _size(view, purse, live, count,
                          bool(pending or broken or draining or booting), now)
    decisions += sized
    drained = {d.box: now for d in sized if d.kind == DRAIN}
    returned = {d.box for d in decisions if d.kind == RETURN}
    memory = replace(memory, pending=MappingProxyType(pending),
                     draining=MappingProxyType({**{box: since for box, since in draining.items()
                                                   if now - since < drain_s}, **drained}),
                     members=frozenset(set(listed) - returned))
    return decisions, memory


def _replace(view: PoolView, purse: _Purse, broken: Sequence[Member], count: int,
             now: float) -> tuple[list[Decision], int]:
    """A rent for each broken box while under ``max`` (first, when the budget holds both),
    and the broken box's return."""
    pool, decisions = view.pool, []
    for member in broken:
        why = f"{member.box} is " + (f"stopped ({member.status})" if member.stopped
                                     else "Stalled past its grace")
        if count < pool.max_boxes:
            rent = purse.rent(f"replace {member.box}: {why}", now)
            decisions.append(rent)
            count += rent.kind == RENT
        decisions.append(Decision(pool.name, RETURN, why, member.box, member.instance_id))
    return decisions, count


def _size(view: PoolView, purse: _Purse, live: Sequence[Member], count: int, busy: bool,
          now: float) -> tuple[list[Decision], PoolMemory]:
    """Rents up to ``min``, one more on sustained saturation, a drain on sustained idleness."""
    pool, memory, decisions = view.pool, view.memory, []
    while count < pool.min_boxes and not busy:  # a replacement already asked this pass
        rent = purse.rent(f"below boxes.min ({count} of {pool.min_boxes})", now)
        decisions.append(rent)
        if rent.kind != RENT:
            break
        count += 1
    passes = memory.saturated_passes + 1 if view.saturated else 0
    if passes >= pool.scale_up_passes and not busy and not decisions:
        if count < pool.max_boxes:
            rent = purse.rent(f"saturated for {passes} passes", now)
            decisions.append(rent)
            passes = 0 if rent.kind == RENT else passes
        else:
            decisions.append(Decision(pool.name, REFUSE, f"saturated for {passes} passes, "
                                      f"and at boxes.max ({pool.max_boxes})"))
    idle = bool(live) and not view.saturated and not busy and all(
        view.signals.get(m.box, BoxSignal()).running == 0 for m in live)
    since = (memory.idle_since if memory.idle_since is not None else now) if idle else None
    if since is not None and now - since >= pool.idle_s and count > pool.min_boxes:
        dearest = max(live, key=lambda m: (member_cost(m, pool), m.box))
        decisions.append(Decision(pool.name, DRAIN, f"no request ran for {now - since:.0f} s",
                                  dearest.box, dearest.instance_id))
        since = now
    return decisions, replace(memory, saturated_passes=passes, idle_since=since)


def backed_off(memory: PoolMemory, now: float, retry_after: float | None) -> PoolMemory:
    """The memory after a failed rent: no rent until the provider's wait (or
    :data:`BACKOFF_S`) is over."""
    wait = retry_after if retry_after is not None else BACKOFF_S
    return replace(memory, backoff_until=now + min(max(wait, 0.0), 3600.0))


def rented(memory: PoolMemory, box: str, now: float, price: float) -> PoolMemory:
    """The memory after a rent (or a create that may have made one): the box is pending."""
    return replace(memory, pending=MappingProxyType({**memory.pending, box: (now, price)}))
