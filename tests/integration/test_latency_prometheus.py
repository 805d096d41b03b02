"""Reconcile's latency figures are Prometheus's ``histogram_quantile`` over the same interval.

Two answers of each server, made from the real vLLM 0.32 answer (shared/vectors/, kept as the
collection's test data) with requests added to chosen buckets, go the way reconcile hands
them on: the later one as the probe's record (the vllm_probe module's output, read by
fleet_plan), the earlier one as the server's memory from the pass before, both through JSON.
The per-server and per-model p50 and p95 that come out must be the figures the real
Prometheus (promtool) computes from the raw answers: same float, not merely close.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Models, Probe
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import (
    probe_from_record,
    probe_record,
)
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_latency import (
    Cumulative,
    Latency,
    interval_latency,
    read_latency,
)
from tests.prometheus_quantile import PROMTOOL, TTFT, Expected, promtool_disagreement

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="Debian's prometheus is not "
                                "installed (apt-get install prometheus)")

REAL = (Path(__file__).resolve().parents[2] / "collections" / "ansible_collections" / "llmao"
        / "fleet" / "tests" / "unit" / "plugins" / "module_utils" / "data"
        / "vllm_0_32_metrics.txt").read_text()
E2E = "vllm:e2e_request_latency_seconds"


def answer(more: dict[str, dict[float, int]], fresh: bool = False,
           dropped: frozenset[str] = frozenset()) -> str:
    """The real answer with ``more`` requests per histogram and bucket bound; ``fresh``: as
    a server that has answered nothing before; ``dropped``: TTFT ``le`` texts left out (a
    vLLM with another layout)."""
    lines = []
    for line in REAL.splitlines():
        name = line.split("_bucket{", 1)[0] if "_bucket{" in line else None
        if name is not None and not line.startswith("#"):
            le = line.split('le="')[1].split('"')[0]
            if name == TTFT and le in dropped:
                continue
            labels, value = line.rsplit(" ", 1)
            start = 0.0 if fresh else float(value)
            added = sum(n for at, n in more.get(name, {}).items() if at <= float(le))
            line = f"{labels} {start + added}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def handed_on(before: str, after: str) -> tuple[Cumulative, Cumulative]:
    """The two scrapes as reconcile's steps receive them: the memory and the probe record."""
    memory = Cumulative.from_record(json.loads(json.dumps(read_latency(before).record())))
    probe = Probe(True, Models.LISTS, latency=read_latency(after))
    received = probe_from_record(json.loads(json.dumps(probe_record(probe))))
    return memory, received.latency


def expected(latency: Latency, servers: tuple[str, ...] | None, histogram: str = TTFT,
             figure: str = "ttft") -> list[Expected]:
    values = [(0.5, getattr(latency, f"{figure}_p50_s")),
              (0.95, getattr(latency, f"{figure}_p95_s"))]
    assert None not in [value for _, value in values], latency
    return [Expected(quantile, value, servers, histogram) for quantile, value in values]


CASES = {
    # The operator's report: 10 + 10 requests in (0.02, 0.04] after a start; p50 0.03.
    "empty buckets below": {
        "a": (answer({}, fresh=True), answer({TTFT: {0.04: 10}}, fresh=True)),
        "b": (answer({}, fresh=True), answer({TTFT: {0.04: 10}}, fresh=True))},
    "servers in other buckets": {
        "a": (answer({}), answer({TTFT: {0.01: 7, 0.06: 2}, E2E: {0.8: 9}})),
        "b": (answer({}), answer({TTFT: {0.5: 5, 2.5: 1}, E2E: {5.0: 6}}))},
    "other layouts": {
        "a": (answer({}), answer({TTFT: {0.02: 4, 0.1: 4}})),
        "b": (answer({}, dropped=frozenset({"0.02", "0.04", "0.75", "2.5"})),
              answer({TTFT: {0.25: 3, 5.0: 2}}, dropped=frozenset({"0.02", "0.04", "0.75",
                                                                   "2.5"})))},
}


@pytest.mark.parametrize("case", list(CASES))
def test_server_and_model_quantiles_are_prometheus_s(case):
    scrapes = CASES[case]
    pairs = {server: handed_on(*texts) for server, texts in scrapes.items()}
    checks = []
    for server, pair in pairs.items():
        checks += expected(interval_latency([pair]), (server,))
    model = interval_latency(pairs.values())
    checks += expected(model, None)
    if case == "servers in other buckets":
        checks += expected(model, None, E2E, "e2e")
    assert model.note is None
    disagreement = promtool_disagreement(scrapes, checks)
    assert disagreement is None, f"{model}\n{disagreement}"
    if case == "empty buckets below":
        assert model.ttft_p50_s == pytest.approx(0.03)
