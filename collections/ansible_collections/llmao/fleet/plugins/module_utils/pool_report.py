# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a pool pass tells llmao-server (``POST /admin/api/pools``): each pool's boxes, bounds
and spend once the pass acted, and the pass's decisions with why.

llmao-server keeps it in its shared store so that ``/metrics`` counts the rents, returns and
failed rents and the dashboard shows each pool (docs/pools.md). The decisions are what the pass
did, as the audit log says it (a rent, a failed rent with the provider's kind of error, a
drain, a return), and what it would not do (a refusal, a hold) with the planner's reason. Names,
ids, prices and reasons only: the audit entries it is made from carry no secret.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .pool_apply import PoolPass
from .pool_plan import HOLD, PENDING_S, REFUSE, PoolMemory, PoolView, member_cost

# A pool box's state as the report gives it (its listing's status apart): serving or booting
# (running), stopped by its provider, being drained by llmao, or rented and not listed yet.
RUNNING, STOPPED, DRAINING, RENTING = "running", "stopped", "draining", "renting"


def pool_report(done: PoolPass, memory: Mapping[str, PoolMemory],
                entries: Sequence[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """The document for ``POST /admin/api/pools``, from a pass that planned and acted:
    ``memory`` is what it keeps (its rents not listed yet, its drains), ``entries`` the audit
    entries it wrote, ``now`` the report's time."""
    if done.plan is None:
        raise ValueError("pool_report needs a pass that planned")
    settings = done.fleet.settings
    pools = {}
    for name, view in done.views.items():
        pool = view.pool
        pools[name] = {
            "provider": pool.provider, "min_boxes": pool.min_boxes,
            "max_boxes": pool.max_boxes,
            "spend_usd_per_hour": round(done.plan.spend[name], 6),
            "members": members_record(view, memory.get(name, PoolMemory()), done.now),
            "decisions": decisions_record(done, name, entries, now)}
    return {"at": now, "budget_usd_per_hour": settings.budget.max_usd_per_hour,
            "pools": pools}


def members_record(view: PoolView, memory: PoolMemory, now: float) -> list[dict[str, Any]]:
    """The pool's listed instances (a draining one said so) and its rents not listed yet."""
    listed = {member.box for member in view.members}
    members = [{"box": member.box, "instance_id": member.instance_id,
                "state": STOPPED if member.stopped else
                DRAINING if member.box in memory.draining else RUNNING,
                "status": member.status, "usd_per_hour": member_cost(member, view.pool)}
               for member in view.members]
    members += [{"box": box, "instance_id": None, "state": RENTING, "status": "not listed yet",
                 "usd_per_hour": price}
                for box, (since, price) in sorted(memory.pending.items())
                if box not in listed and now - since < PENDING_S]
    return members


def decisions_record(done: PoolPass, pool: str, entries: Sequence[Mapping[str, Any]],
                     now: float) -> list[dict[str, Any]]:
    """What the pass did to ``pool`` (its audit entries), then what it would not do."""
    done_here = [{"kind": str(entry.get("action")), "box": entry.get("box") or None,
                  "instance_id": entry.get("instance"), "usd_per_hour": entry.get("offer_price"),
                  "why": str(entry.get("reason", "")), "error": entry.get("error"),
                  "at": entry.get("time", now)}
                 for entry in entries if entry.get("kind") == "pool" and entry.get("pool") == pool]
    plan = done.plan
    refused = [{"kind": decision.kind, "box": decision.box, "instance_id": decision.instance_id,
                "usd_per_hour": None, "why": decision.reason, "error": None, "at": now}
               for decision in (plan.decisions if plan is not None else ())
               if decision.pool == pool and decision.kind in (REFUSE, HOLD)]
    return done_here + refused
