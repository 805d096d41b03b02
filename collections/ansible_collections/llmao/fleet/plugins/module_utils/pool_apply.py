# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One pool pass: read what the planner needs, plan, search offers, and carry the plan out.

The module ``llmao.fleet.box_pool`` is this file's thin face. What the planner reads comes
from this pass's provider listings (read here, for the pools' providers only: a pool acts on
what the provider says now), the pass's plan (``fleet_plan``'s servers and models: the
Stalled verdicts, the requests running, the saturated flags) and the pools' memory, a JSON
file beside ``config.yaml``. Each decision is carried out alone: a failed rent costs that
rent (and backs its pool off), never the pass.

A rent names the box first (``<pool>-<8 random>``), has llmao mint a one-time bootstrap
token for that name as a member of the pool, and creates the instance with the token, the
fleet key and llmao's URL in its environment and llmao's label: the box is bound from its
first fetch. A drain, a return and a forgotten box release the binding and delete the box's
routes (requests in flight finish); a return then destroys the instance, which the rent
client does only for an instance carrying the pool's label.
"""

from __future__ import annotations

import json
import os
import secrets
import string
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .fleet import Fleet
from .intent import ID_PREFIX
from .listings import ListedBox, Listings, read_listings
from .pool_config import Pool, box_name, read_label
from .pool_plan import (
    DRAIN,
    FORGET,
    REFUSE,
    RENT,
    RETURN,
    BoxSignal,
    Decision,
    Member,
    PoolMemory,
    PoolPlan,
    PoolView,
    backed_off,
    plan_pools,
    rented,
)
from .provider_rent import Need, RentError, RentRequest, rent_client

POOL_STATE_NAME = "llmao-pools.json"
# A bootstrap token outlives the box's boot: a slow image pull takes most of an hour.
ENROLL_TTL_S = 2 * 3600.0
MAX_STATE_BYTES = 1 << 20
STALLED = "Stalled"
BOOTING = ("Awaiting", "Loading")
# A member the pass's plan has no server of (not served yet): booting, its load unknown.
UNSEEN = BoxSignal(running=None, booting=True)


def state_path(fleet: Fleet, given: str | None) -> str:
    """The memory file given, else ``llmao-pools.json`` beside ``config.yaml``."""
    return given or os.path.join(os.path.dirname(os.path.abspath(fleet.config_path)),
                                 POOL_STATE_NAME)


def load_memory(path: str, pools: Iterable[str]) -> dict[str, PoolMemory]:
    """Each pool's memory as the last pass wrote it; a missing or unreadable file is none."""
    try:
        with open(path, "rb") as stream:
            document = json.loads(stream.read(MAX_STATE_BYTES + 1)[:MAX_STATE_BYTES])
    except (OSError, ValueError):
        document = {}
    document = document if isinstance(document, dict) else {}
    return {pool: PoolMemory.from_record(pool, document.get(pool)) for pool in pools}


def save_memory(path: str, memory: Mapping[str, PoolMemory]) -> None:
    """Written whole to a new file, then renamed over the old: never half-written."""
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as stream:
        json.dump({pool: kept.record() for pool, kept in memory.items()}, stream,
                  sort_keys=True)
    os.replace(partial, path)


def members_of(pool: Pool, listings: Listings) -> tuple[Member, ...]:
    """The instances of ``pool``'s provider that carry its label: nothing else is counted."""
    members = []
    for listed in listings.boxes:
        mark = read_label(listed.tag)
        if listed.provider == pool.provider and mark is not None and mark[0] == pool.name:
            members.append(Member(mark[1], listed.names[0], listed.status or "unknown",
                                  listed.stopped, listed.price_per_hour))
    return tuple(members)


def signals_of(plan: Mapping[str, Any]) -> tuple[dict[str, BoxSignal], set[str]]:
    """Per box: a server Stalled, and the requests its servers ran (None when any was not
    read); and the models the pass found saturated."""
    servers = [s for s in plan.get("servers") or [] if isinstance(s, Mapping)]
    signals: dict[str, BoxSignal] = {}
    for server in servers:
        box = str(server.get("box"))
        metrics = server.get("metrics") if isinstance(server.get("metrics"), Mapping) else {}
        running = metrics.get("requests_running")
        running = running if isinstance(running, int) and running >= 0 else None
        was = signals.get(box, BoxSignal(running=0))
        total = None if running is None or was.running is None else was.running + running
        signals[box] = BoxSignal(was.stalled or server.get("state") == STALLED, total,
                                 was.booting or server.get("state") in BOOTING)
    models = plan.get("models") if isinstance(plan.get("models"), Mapping) else {}
    saturated = {str(name) for name, load in models.items()
                 if isinstance(load, Mapping) and load.get("saturated") is True}
    saturated |= {str(s.get("model_name")) for s in servers if s.get("saturated") is True}
    return signals, saturated


def need_of(fleet: Fleet, pool: Pool) -> Need:
    """What a box of ``pool`` must have: the offer, and the recipes' memory (per card, the
    rows' sum: servers may share a card) and disk (the rows' sum), whichever is larger."""
    entries = [fleet.models[row.model_name] for row in pool.rows]
    numbers = [entry.vllm.numbers for entry in entries if entry.vllm is not None]
    vram = sum(number.get("vram_gb", 0) for number in numbers)
    disk = sum(number.get("disk_gb", 0) for number in numbers)
    offer = pool.offer
    return Need(offer.gpu_names, offer.num_gpus, max(offer.min_gpu_ram_gb, vram),
                max(offer.disk_gb, disk), offer.max_usd_per_hour, offer.interruptible)


@dataclass
class PoolPass:
    """One pass of every pool: the views it planned from, the plan, what was done."""

    fleet: Fleet
    now: float
    views: dict[str, PoolView]
    listings: Listings
    plan: PoolPlan | None = None
    lines: list[str] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, pool: str, what: str) -> None:
        kept = self.counts.setdefault(pool, {"rents": 0, "returns": 0, "failed_rents": 0})
        kept[what] += 1


def observe(fleet: Fleet, plan: Mapping[str, Any], memory: Mapping[str, PoolMemory],
            timeout: float, now: float | None = None) -> PoolPass:
    """Read the pools' listings and build each pool's view for the planner."""
    pools = fleet.settings.pools
    providers = {pool.provider: fleet.settings.providers[pool.provider]
                 for pool in pools.values()}
    listings = read_listings(providers, timeout)
    signals, saturated = signals_of(plan)
    views = {}
    for name, pool in pools.items():
        members = members_of(pool, listings)
        views[name] = PoolView(
            pool, members, listings.failed.get(pool.provider),
            any(row.model_name in saturated for row in pool.rows),
            {m.box: signals.get(m.box, UNSEEN) for m in members}, None,
            memory.get(name, PoolMemory()))
    return PoolPass(fleet, time.time() if now is None else now, views, listings)


def plan_pass(done: PoolPass, timeout: float) -> PoolPlan:
    """Plan; search the offers of each pool that wants a rent; plan again with them."""
    settings = done.fleet.settings
    drain_s = settings.rollout.drain_s
    first = plan_pools(done.views, settings.budget, done.now, drain_s)
    failed: list[Decision] = []
    for name in first.wants_offers():
        view = done.views[name]
        client = rent_client(settings.providers[view.pool.provider], timeout)
        try:
            found = tuple(client.offers(need_of(done.fleet, view.pool)))
        except RentError as exc:
            failed.append(Decision(name, REFUSE, f"the offer search failed: {exc.reason}"))
            memory = backed_off(view.memory, done.now, exc.retry_after)
            done.views[name] = replace(view, memory=memory)
            found = ()
        done.views[name] = replace(done.views[name], offers=found)
    final = plan_pools(done.views, settings.budget, done.now, drain_s)
    done.plan = replace(final, decisions=(*failed, *final.decisions))
    return done.plan


class Hands:
    """What a pass acts through: llmao's admin API, LiteLLM, the rent clients, the audit.

    ``admin`` needs ``enroll(box, ttl_s, pool)`` and ``release_binding(box, why)``;
    ``litellm`` needs ``routes()`` and ``delete(id)``; ``audit`` takes one entry a change.
    """

    def __init__(self, fleet: Fleet, admin: Any, litellm: Any, timeout: float,
                 audit: Callable[[dict[str, Any]], None],
                 names: Callable[[], str] | None = None) -> None:
        self.fleet, self.admin, self.litellm, self.timeout = fleet, admin, litellm, timeout
        self.audit = audit
        self.names = names or (lambda: "".join(secrets.SystemRandom().choices(
            string.ascii_lowercase + string.digits, k=8)))

    def client(self, pool: Pool) -> Any:
        return rent_client(self.fleet.settings.providers[pool.provider], self.timeout)


def apply_pass(done: PoolPass, hands: Hands) -> dict[str, PoolMemory]:
    """Carry out the plan, each decision alone; the memory to keep."""
    if done.plan is None:
        raise ValueError("apply_pass needs a pass that planned")
    memory = dict(done.plan.memory)
    for decision in done.plan.decisions:
        pool = done.fleet.settings.pools[decision.pool]
        if decision.kind == RENT and decision.offer is not None:
            memory[pool.name] = _rent(done, hands, pool, decision, memory[pool.name])
        elif decision.kind in (DRAIN, RETURN, FORGET):
            _let_go(done, hands, pool, decision)
        else:
            done.lines.append(f"{pool.name}: {decision.kind}: {decision.reason}")
    return memory


def _rent(done: PoolPass, hands: Hands, pool: Pool, decision: Decision,
          memory: PoolMemory) -> PoolMemory:
    offer = decision.offer
    if offer is None:
        raise ValueError("a rent decision without an offer")
    box = box_name(pool.name, hands.names())
    settings = done.fleet.settings
    try:
        token = hands.admin.enroll(box, ENROLL_TTL_S, pool.name)["bootstrap_token"]
        request = RentRequest(pool.name, box, pool.image, need_of(done.fleet, pool).disk_gb,
                              {**pool.env, "FLEET_KEY": settings.fleet.key or "",
                               "LLMAO_URL": settings.server.url or "",
                               "LLMAO_BOOTSTRAP_TOKEN": token, "LLMAO_POOL_BOX": box},
                              pool.onstart)
        made = hands.client(pool).create(offer, request)
    except RuntimeError as exc:  # a RentError, or llmao's or LiteLLM's error
        done.count(pool.name, "failed_rents")
        _record(done, hands, pool, "rent_failed", box,
                f"{decision.reason}: {getattr(exc, 'reason', None) or exc}",
                offer_price=offer.usd_per_hour, error=getattr(exc, "kind", None))
        if getattr(exc, "maybe_created", False):  # found by its label later, never doubled
            return rented(memory, box, done.now, offer.usd_per_hour)
        return backed_off(memory, done.now, getattr(exc, "retry_after", None))
    done.count(pool.name, "rents")
    _record(done, hands, pool, "rent", box, decision.reason, instance=made.instance_id,
            offer_price=offer.usd_per_hour)
    return rented(memory, box, done.now, offer.usd_per_hour)


def _let_go(done: PoolPass, hands: Hands, pool: Pool, decision: Decision) -> None:
    """Release the binding and delete the routes; a return then destroys the instance."""
    box = decision.box or ""
    try:
        hands.admin.release_binding(box, f"pool {pool.name}: {decision.reason}")
        for route in hands.litellm.routes():
            if route.id.startswith(f"{ID_PREFIX}{box}:"):
                hands.litellm.delete(route.id)
        if decision.kind == RETURN:
            listed = _listed(done.listings, decision.instance_id, pool)
            if listed is None:
                raise RentError("answer", f"{box} is no longer listed: nothing to destroy")
            hands.client(pool).destroy(listed, pool.name)
            done.count(pool.name, "returns")
    except RuntimeError as exc:  # a RentError, or llmao's or LiteLLM's error
        _record(done, hands, pool, f"{decision.kind}_failed", box,
                f"{decision.reason}: {getattr(exc, 'reason', exc)}")
        return
    _record(done, hands, pool, decision.kind, box, decision.reason,
            instance=decision.instance_id)


def _listed(listings: Listings, instance_id: str | None, pool: Pool) -> ListedBox | None:
    return next((listed for listed in listings.boxes if listed.provider == pool.provider
                 and listed.names[0] == instance_id), None)


def _record(done: PoolPass, hands: Hands, pool: Pool, action: str, box: str, reason: str,
            **facts: Any) -> None:
    """A line for the play's output and an audit entry (names, ids and prices only)."""
    done.lines.append(f"{pool.name}: {action} {box}: {reason}")
    hands.audit({"kind": "pool", "action": action, "pool": pool.name, "box": box,
                 "reason": reason, **{k: v for k, v in facts.items() if v is not None}})
