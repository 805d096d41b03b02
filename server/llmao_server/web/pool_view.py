"""The dashboard's Pools panel as data: each pool of ``config.yaml`` with what its latest pass
reported (docs/pools.md).

Pure: :func:`pool_panels` takes the configured pools, what the store keeps of them and the
time, and returns plain values the template only lays out: the pool's boxes with their state
and price, ``boxes.min``/``max``, its spend against the budget, and its last decisions with
why. A pool no pass has reported yet is shown as such, never as an empty pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..store import PoolRecord
from .fleet_view import Age, age

# The decisions a panel shows, newest first.
DECISIONS_SHOWN = 8
# A pool's spend at or above this share of the budget is shown as near it.
NEAR_BUDGET = 0.9
# How each decision reads on the panel, and whether it is a problem.
DECISION_WORDS = {
    "rent": ("rented", False), "rent_failed": ("rent failed", True),
    "drain": ("draining", False), "drain_failed": ("drain failed", True),
    "return": ("returned", False), "return_failed": ("return failed", True),
    "forget": ("gone from the listing", False), "forget_failed": ("forget failed", True),
    "refuse": ("not rented", True), "hold": ("held", True),
}


@dataclass(frozen=True)
class PoolBox:
    box: str
    instance_id: str | None
    state: str
    status: str
    usd_per_hour: float | None


@dataclass(frozen=True)
class PoolDecision:
    kind: str
    words: str
    bad: bool
    box: str | None
    usd_per_hour: float | None
    why: str
    error: str | None
    when: Age


@dataclass(frozen=True)
class PoolPanel:
    """One pool: None figures until a pass reported it."""

    name: str
    provider: str
    min_boxes: int
    max_boxes: int
    boxes: tuple[PoolBox, ...]
    spend: float | None
    budget: float | None
    decisions: tuple[PoolDecision, ...]
    reported: Age

    @property
    def serving(self) -> int:
        """Boxes that count toward ``boxes.min``: running, or rented and not listed yet."""
        return sum(1 for box in self.boxes if box.state in ("running", "renting"))

    @property
    def budget_share(self) -> float | None:
        if self.spend is None or not self.budget:
            return None
        return self.spend / self.budget

    @property
    def near_budget(self) -> bool:
        share = self.budget_share
        return share is not None and share >= NEAR_BUDGET


def pool_panels(pools: Mapping[str, Any], kept: Iterable[PoolRecord],
                now: float) -> tuple[PoolPanel, ...]:
    """A panel per configured pool (``Settings.pools``), in config.yaml's order."""
    records = {record.pool: record for record in kept}
    return tuple(panel(name, pool, records.get(name), now) for name, pool in pools.items())


def panel(name: str, pool: Any, record: PoolRecord | None, now: float) -> PoolPanel:
    if record is None:
        return PoolPanel(name, pool.provider, pool.min_boxes, pool.max_boxes, (), None, None,
                         (), age(now, None, never="no pool pass reported it yet"))
    state = record.state
    return PoolPanel(
        name, pool.provider, pool.min_boxes, pool.max_boxes,
        tuple(PoolBox(m["box"], m.get("instance_id"), m["state"], m.get("status") or "",
                      m.get("usd_per_hour")) for m in state.get("members", ())),
        state.get("spend_usd_per_hour"), state.get("budget_usd_per_hour"),
        decisions(record.decisions[:DECISIONS_SHOWN], now), age(now, record.reported_at))


def decisions(kept: Sequence[Mapping[str, Any]], now: float) -> tuple[PoolDecision, ...]:
    shown = []
    for item in kept:
        words, bad = DECISION_WORDS.get(item.get("kind", ""), (str(item.get("kind")), True))
        shown.append(PoolDecision(str(item.get("kind")), words, bad, item.get("box"),
                                  item.get("usd_per_hour"), str(item.get("why", "")),
                                  item.get("error"), age(now, item.get("at"))))
    return tuple(shown)
