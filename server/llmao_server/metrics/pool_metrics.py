"""The pools' series of ``GET /metrics`` (docs/pools.md), read from the shared store.

What the latest pool pass reported (:mod:`..pool_report`): each pool's boxes by state, its
bounds, its spend and the budget, and the counters its decisions added up since the pool was
first reported. Every counter of a pool is written, 0 included, from its first report on, so
that ``increase()`` sees its first rent or failure; the failed rents are labelled by the rent
clients' kinds of error, a fixed set. ``docs/alerts/llmao-rules.yml`` alerts on them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..pool_report import ERRORS, MEMBER_STATES
from ..store import PoolRecord

# Counters of one pool, each without a reason: series name, help, the store's counter.
POOL_COUNTERS = (
    ("llmao_pool_rents", "Boxes the pool rented (created at its provider).", "rents"),
    ("llmao_pool_returns", "Boxes the pool returned (destroyed at its provider).", "returns"),
    ("llmao_pool_replacements", "Rents that replaced a box its provider stopped or that "
     "stalled.", "replacements"),
)
FAILURE_REASONS = (*sorted(ERRORS), "llmao")


def pool_metrics(pools: Sequence[PoolRecord]) -> Iterator[Metric]:
    """Every series of the reported pools; none before the first report."""
    if not pools:
        return
    yield GaugeMetricFamily("llmao_budget_usd_per_hour", "What every pool together may spend "
                            "an hour in USD (budget.max_usd_per_hour).",
                            value=max(pools, key=lambda p: p.reported_at)
                            .state["budget_usd_per_hour"])
    yield from pool_gauges(pools)
    counters = {name: CounterMetricFamily(name, text, labels=["pool"])
                for name, text, _ in POOL_COUNTERS}
    failed = CounterMetricFamily("llmao_pool_failed_rents", "Rents that failed, by kind of "
                                 "error (throttled, refused, provider, unreachable, answer: the "
                                 "provider's; llmao: enrolling the box).",
                                 labels=["pool", "reason"])
    for pool in pools:
        for name, _, counter in POOL_COUNTERS:
            counters[name].add_metric([pool.pool], pool.counts.get((counter, ""), 0))
        for reason in FAILURE_REASONS:
            failed.add_metric([pool.pool, reason], pool.counts.get(("failed_rents", reason), 0))
    yield from counters.values()
    yield failed


def pool_gauges(pools: Sequence[PoolRecord]) -> Iterator[Metric]:
    boxes = GaugeMetricFamily("llmao_pool_boxes", "The pool's boxes by state: running (serving "
                              "or booting), stopped (by its provider), draining, renting (not "
                              "listed yet).", labels=["pool", "state"])
    low = GaugeMetricFamily("llmao_pool_min_boxes", "The pool's boxes.min.", labels=["pool"])
    high = GaugeMetricFamily("llmao_pool_max_boxes", "The pool's boxes.max.", labels=["pool"])
    spend = GaugeMetricFamily("llmao_pool_spend_usd_per_hour", "What the pool's boxes cost an "
                              "hour in USD, its rents not listed yet included.", labels=["pool"])
    when = GaugeMetricFamily("llmao_pool_last_report_timestamp_seconds", "When a pool pass "
                             "last reported the pool.", labels=["pool"])
    for pool in pools:
        states = Counter(member["state"] for member in pool.state["members"])
        for state in MEMBER_STATES:
            boxes.add_metric([pool.pool, state], states.get(state, 0))
        low.add_metric([pool.pool], pool.state["min_boxes"])
        high.add_metric([pool.pool], pool.state["max_boxes"])
        spend.add_metric([pool.pool], pool.state["spend_usd_per_hour"])
        when.add_metric([pool.pool], pool.reported_at)
    yield from (boxes, low, high, spend, when)
