"""The box API's counters: a slot per worker process, summed by whoever answers /metrics."""

from __future__ import annotations

import os

from llmao_server.box_api_stats import BoxApiStats

CONFIG = "/vllm/config"


def counts(stats: BoxApiStats) -> dict[tuple[str, ...], float]:
    """Every sample of the two families, by name and label values."""
    return {(sample.name, *sample.labels.values()): sample.value
            for family in stats.metrics() for sample in family.samples}


def in_child(stats: BoxApiStats, requests: int, status: int = 200) -> None:
    """``requests`` answers observed by a forked process, as a gunicorn worker would."""
    child = os.fork()
    if child == 0:
        try:
            for _ in range(requests):
                stats.observe(CONFIG, status, 0.0002)
        finally:
            os._exit(0)
    os.waitpid(child, 0)


def test_each_process_counts_in_its_own_slot_and_metrics_sums_them() -> None:
    stats = BoxApiStats()
    stats.observe(CONFIG, 200, 0.0002)
    in_child(stats, 3)
    in_child(stats, 5, status=404)
    seen = counts(stats)
    assert seen[("llmao_box_api_requests_total", CONFIG, "2xx")] == 4
    assert seen[("llmao_box_api_requests_total", CONFIG, "4xx")] == 5
    assert seen[("llmao_box_api_request_duration_seconds_count", CONFIG)] == 9
    assert seen[("llmao_box_api_request_duration_seconds_bucket", CONFIG, "0.0005")] == 9
    owners = [owner for owner in stats._owners if owner]
    assert owners[0] == os.getpid() and len(owners) == 2  # the two children: one slot, reused


def test_a_process_that_exited_leaves_its_counts_to_the_one_taking_its_slot() -> None:
    stats = BoxApiStats(slots=1)
    in_child(stats, 2)
    in_child(stats, 3)  # the first child exited: its slot is taken over, never cleared
    assert counts(stats)[("llmao_box_api_requests_total", CONFIG, "2xx")] == 5
    assert stats._slot_lock is not None  # this process never counted: it holds no slot


def test_processes_beyond_the_slots_share_the_last_one_under_the_lock() -> None:
    stats = BoxApiStats(slots=1)
    stats.observe(CONFIG, 200, 0.0002)  # this process holds the one slot and lives on
    in_child(stats, 4, status=500)
    assert stats._slot_lock is None
    seen = counts(stats)
    assert seen[("llmao_box_api_requests_total", CONFIG, "2xx")] == 1
    assert seen[("llmao_box_api_requests_total", CONFIG, "5xx")] == 4


def test_a_path_outside_the_box_api_is_not_counted() -> None:
    stats = BoxApiStats()
    stats.observe("/metrics", 200, 0.0002)
    assert not any(counts(stats).values())
