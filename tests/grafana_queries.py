"""The Grafana dashboard's queries (docs/grafana/llmao-fleet.json), as a real Prometheus is
asked them: the variables put in as Grafana does when every model is chosen, and which ones
come back without a series. Shared by the test on the example prometheus.yml and the one on
the demo's, so that both ask the same queries the same way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.alerts.test_prometheus_scrape import api

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana" / "llmao-fleet.json"
# What Grafana puts in for the dashboard's variables when every model is chosen.
VARIABLES = {"$model": ".*", "$__rate_interval": "1m"}


def grafana_queries() -> list[tuple[str, str]]:
    """Each panel's title and each of its queries, its variables put in."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], re.sub(r"\$\w+", lambda found: VARIABLES[found.group()],
                                    target["expr"]))
            for panel in dashboard["panels"] for target in panel.get("targets", [])]


def empty_queries(prometheus: str) -> list[str]:
    """The queries Prometheus answers with no series ("title: query"); a query it cannot
    parse fails at once."""
    empty = []
    for title, promql in grafana_queries():
        answer = api(prometheus, "/api/v1/query", query=promql)
        assert answer is not None, f"{title}: {promql} does not parse"
        if not answer["result"]:
            empty.append(f"{title}: {promql}")
    return empty
