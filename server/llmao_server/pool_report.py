"""A pool pass's report as ``POST /admin/api/pools`` takes it, checked before it is kept.

``llmao.fleet.box_pool`` sends it once it acted (the core's ``pool_report``): per pool its
boxes (instance id, state, price), ``boxes.min``/``max``, its spend and the budget, and the
pass's decisions with why. Only pools ``config.yaml`` names are taken, and every list, text
and label is bounded, so a caller cannot grow the store or ``/metrics``. What the decisions
add to the pool's counters is decided here, in one place: a rent, a return, a failed rent by
its kind of error, and a rent that replaces a broken box (docs/pools.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping
from typing import Any, NoReturn

from ansible_collections.llmao.fleet.plugins.module_utils.json_values import is_integer, is_number

from .api_errors import RequestRefused
from .redaction import clipped
from .store import PoolsReport

MAX_MEMBERS = 1000
MAX_DECISIONS = 200
MAX_NAME = 253
MAX_WHY = 500
MAX_STATE = 40
# A report is sent when the pass ends; another instance's clock may run a little ahead.
REPORT_MAX_AGE_S = 6 * 3600
CLOCK_SKEW_S = 300
# A member's state (the core's pool_report): serving or booting, stopped by its provider,
# drained by llmao, rented and not listed yet.
MEMBER_STATES = ("running", "stopped", "draining", "renting")
KINDS = frozenset({"rent", "rent_failed", "drain", "drain_failed", "return", "return_failed",
                   "forget", "forget_failed", "refuse", "hold"})
# The rent clients' kinds of error (provider_rent.RentError); any other failure was llmao's
# own (enrolling the box) and counts as "llmao".
ERRORS = frozenset({"throttled", "refused", "provider", "unreachable", "answer", "unlabelled"})
# The planner's reason for a rent that replaces a broken box starts so (pool_plan._replace).
REPLACES = "replace "


def read_pools_report(doc: Any, pools: Collection[str], now: float,
                      redact: Callable[[str], str]) -> PoolsReport:
    """``{"at", "budget_usd_per_hour", "pools": {name: {...}}}``, checked; ``pools`` are the
    pools config.yaml names, ``redact`` hides any secret a reason might quote."""
    if not isinstance(doc, dict) or not isinstance(doc.get("pools"), dict):
        bad("send {\"at\", \"budget_usd_per_hour\", \"pools\": {name: {...}}}")
    at, budget = doc.get("at"), doc.get("budget_usd_per_hour")
    if not is_number(at) or not now - REPORT_MAX_AGE_S <= at <= now + CLOCK_SKEW_S:
        bad(f"at must be a time in seconds since the epoch, within {REPORT_MAX_AGE_S} s before "
            f"and {CLOCK_SKEW_S} s after the server's clock")
    if not is_number(budget) or budget < 0:
        bad("budget_usd_per_hour must be a number, 0 or more")
    states, decisions, counts = {}, {}, {}
    for name, pool in doc["pools"].items():
        if name not in pools:
            bad(f"pool {clipped(str(name))!r} is not in config.yaml's pools")
        states[name] = {**read_state(name, pool), "budget_usd_per_hour": float(budget)}
        decisions[name] = tuple(read_decision(name, item, float(at), redact)
                                for item in read_list(pool, "decisions", MAX_DECISIONS, name))
        counts[name] = dict(counted(decisions[name]))
    return PoolsReport(float(at), states, decisions, counts)


def read_state(name: str, pool: Any) -> dict[str, Any]:
    if not isinstance(pool, dict):
        bad(f"pools[{name!r}] must be an object")
    low, high = pool.get("min_boxes"), pool.get("max_boxes")
    if not (is_integer(low) and is_integer(high) and 0 <= low <= high <= MAX_MEMBERS):
        bad(f"pools[{name!r}]: min_boxes and max_boxes must be whole numbers, min <= max")
    spend = pool.get("spend_usd_per_hour")
    if not is_number(spend) or spend < 0:
        bad(f"pools[{name!r}].spend_usd_per_hour must be a number, 0 or more")
    members = [read_member(name, member)
               for member in read_list(pool, "members", MAX_MEMBERS, name)]
    return {"provider": text(pool.get("provider"), MAX_STATE), "min_boxes": low,
            "max_boxes": high, "spend_usd_per_hour": float(spend), "members": members}


def read_member(name: str, member: Any) -> dict[str, Any]:
    if not isinstance(member, dict) or not isinstance(member.get("box"), str) \
            or not member["box"] or member.get("state") not in MEMBER_STATES:
        bad(f"pools[{name!r}].members: each is an object with box and a state, one of "
            f"{', '.join(MEMBER_STATES)}")
    return {"box": text(member["box"], MAX_NAME),
            "instance_id": optional_text(member.get("instance_id"), MAX_NAME),
            "state": member["state"], "status": text(member.get("status"), MAX_STATE),
            "usd_per_hour": price(member.get("usd_per_hour"), name)}


def read_decision(name: str, item: Any, at: float,
                  redact: Callable[[str], str]) -> dict[str, Any]:
    if not isinstance(item, dict) or item.get("kind") not in KINDS:
        bad(f"pools[{name!r}].decisions: each is an object whose kind is one of "
            f"{', '.join(sorted(KINDS))}")
    when = item.get("at", at)
    error = item.get("error")
    return {"kind": item["kind"], "box": optional_text(item.get("box"), MAX_NAME),
            "instance_id": optional_text(item.get("instance_id"), MAX_NAME),
            "usd_per_hour": price(item.get("usd_per_hour"), name),
            "why": clipped(redact(str(item.get("why") or "")), MAX_WHY),
            "error": None if error is None else error if error in ERRORS else "llmao",
            "at": float(when) if is_number(when) else at}


def counted(decisions: tuple[dict[str, Any], ...]) -> Counter[tuple[str, str]]:
    """What the decisions add to the pool's counters: (counter, reason) → how many."""
    counts: Counter[tuple[str, str]] = Counter()
    for decision in decisions:
        kind = decision["kind"]
        if kind == "rent":
            counts["rents", ""] += 1
            if decision["why"].startswith(REPLACES):
                counts["replacements", ""] += 1
        elif kind == "return":
            counts["returns", ""] += 1
        elif kind == "rent_failed":
            counts["failed_rents", decision["error"] or "llmao"] += 1
    return counts


def read_list(pool: Mapping[str, Any], key: str, limit: int, name: str) -> list[Any]:
    value = pool.get(key, [])
    if not isinstance(value, list) or len(value) > limit:
        bad(f"pools[{name!r}].{key} must be a list of at most {limit}")
    return value


def price(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if not is_number(value) or value < 0:
        bad(f"pools[{name!r}]: a price must be a number of USD per hour, 0 or more")
    return float(value)


def text(value: Any, limit: int) -> str:
    return clipped(value if isinstance(value, str) else "", limit)


def optional_text(value: Any, limit: int) -> str | None:
    return None if value is None else clipped(str(value), limit)


def bad(message: str) -> NoReturn:
    raise RequestRefused(400, "bad_pools", message)
