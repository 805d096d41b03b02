"""Ask the real Prometheus (Debian's ``promtool``) what ``histogram_quantile`` says of two
scrapes, so that llmao's latency figures are checked against Prometheus itself, not against
a second copy of the same arithmetic.

Each server's two ``/metrics`` answers become one minute of input series (the first answer at
0, the second at 1m, labelled ``instance=<server>``); ``increase(...[1m])`` at 1m then spans
exactly the two samples, so Prometheus extrapolates nothing and the interval is the one
reconcile reads between two passes. ``promtool test rules`` compares every expected figure
with what Prometheus computes and prints both when they differ. The answers are read with
prometheus_client's parser, not llmao's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

PROMTOOL = shutil.which("promtool")
TTFT = "vllm:time_to_first_token_seconds"


@dataclass(frozen=True)
class Expected:
    """``histogram_quantile(quantile, ...)`` of ``histogram`` over the named servers (all of
    them when None), summed by ``le`` on the bounds they all have, should be ``value``."""

    quantile: float
    value: float
    servers: tuple[str, ...] | None = None
    histogram: str = TTFT


def bucket_lines(text: str, histogram: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The ``_bucket`` samples of ``histogram`` in one answer: label pairs -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{histogram}_bucket":
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def _series(scrapes: Mapping[str, tuple[str, str]], histogram: str) -> list[dict[str, str]]:
    series = []
    for server, (before, after) in scrapes.items():
        first, second = bucket_lines(before, histogram), bucket_lines(after, histogram)
        for labels, value in second.items():
            text = ",".join(f'{name}={json.dumps(val)}'
                            for name, val in (*labels, ("instance", server)))
            old = first.get(labels, 0.0)
            series.append({"series": f"{histogram}_bucket{{{text}}}",
                           "values": f"{old!r} {value!r}"})
    return series


def _common_le(scrapes: Mapping[str, tuple[str, str]], servers: tuple[str, ...],
               histogram: str) -> list[str]:
    """The ``le`` texts every one of ``servers`` writes."""
    each = [{dict(labels)["le"] for labels in bucket_lines(scrapes[name][1], histogram)}
            for name in servers]
    return sorted(set.intersection(*each))


def _expression(scrapes: Mapping[str, tuple[str, str]], expected: Expected) -> str:
    servers = expected.servers or tuple(scrapes)
    instances = "|".join(servers)
    bounds = "|".join(le.replace("+", "\\\\+").replace(".", "\\\\.")
                      for le in _common_le(scrapes, servers, expected.histogram))
    selector = f'{expected.histogram}_bucket{{instance=~"{instances}",le=~"{bounds}"}}'
    return (f"histogram_quantile({expected.quantile!r}, sum by (le) "
            f"(increase({selector}[1m])))")


def promtool_disagreement(scrapes: Mapping[str, tuple[str, str]],
                          expected: list[Expected]) -> str | None:
    """None when Prometheus computes every expected figure from ``scrapes`` (server ->
    its answer before and after); else promtool's report of what it got instead."""
    if PROMTOOL is None:
        raise RuntimeError("promtool is not installed (apt-get install prometheus)")
    histograms = sorted({item.histogram for item in expected})
    test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [line for name in histograms for line in _series(scrapes, name)],
        "promql_expr_test": [{"expr": _expression(scrapes, item), "eval_time": "1m",
                              "exp_samples": [{"labels": "{}", "value": item.value}]}
                             for item in expected]}]}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "quantiles.yml"
        path.write_text(json.dumps(test))  # JSON is YAML
        done = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True,
                              text=True, timeout=60, check=False)
    return None if done.returncode == 0 else done.stdout + done.stderr
