"""A real Prometheus runs ``docs/prometheus/prometheus.yml``: it finds every vLLM through
llmao-server's ``GET /metrics/targets`` and scrapes it, and every query of the Grafana
dashboard in ``docs/grafana/`` parses and returns data.

The fleet is local (stub vLLM servers on loopback, which export vLLM 0.32's metric names
and histograms), reconciled twice by the real playbook with requests in between, so the
llmao series carry loads, costs and the last interval's latency. Prometheus scrapes every
second; bounded in time, every process stopped by PID.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rig.boxes import free_port
from rig.litellm_process import LiteLLMProcess
from rig.local_fleet import LocalFleet, loopback_boxes, one_model_hosts, start_stubs, stop_stubs
from tests.alerts.test_prometheus_scrape import (
    PROMETHEUS,
    RULES,
    SEEN_TIMEOUT_S,
    api,
    query,
    run_prometheus,
    wait_for,
    write_token,
)
from tests.grafana_queries import DASHBOARD, empty_queries, grafana_queries
from tests.llmao_process import start_llmao_server
from tests.reconcile_run import run_reconcile

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "prometheus" / "prometheus.yml"
METRICS_TOKEN = secrets.token_urlsafe(32)
REQUESTS_PER_SERVER = 3

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not "
                                 "installed (apt-get install prometheus)")]


def ask(box: str, port: int, key: str, model: str) -> None:
    body = json.dumps({"model": model, "messages": [
        {"role": "user", "content": "how fast are you"}]}).encode()
    request = urllib.request.Request(f"http://{box}:{port}/v1/chat/completions", data=body,
                                     headers={"Authorization": f"Bearer {key}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=15) as answer:
        assert answer.status == 200


def check_in(llmao_url: str, fleet_key: str, box: str) -> None:
    request = urllib.request.Request(f"{llmao_url}/vllm/config", headers={
        "Authorization": f"Bearer {fleet_key}", "X-LLMAO-Host": box})
    with urllib.request.urlopen(request, timeout=15) as answer:
        assert answer.status == 200


def example_config(folder: Path, llmao_url: str) -> dict[str, Any]:
    """The shipped example, pointed at this llmao-server, scraping every second."""
    config = yaml.safe_load(EXAMPLE.read_text())
    token_file = str(write_token(folder, METRICS_TOKEN))
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["llmao"].update(scheme="http", authorization={"credentials_file": token_file},
                         static_configs=[{"targets": [llmao_url.removeprefix("http://")]}])
    (sd_config,) = jobs["vllm"]["http_sd_configs"]
    sd_config.update(url=f"{llmao_url}/metrics/targets", refresh_interval="1s")
    sd_config["authorization"]["credentials_file"] = token_file
    shutil.copy(RULES, folder / RULES.name)
    return config


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory, fake_litellm: LiteLLMProcess,
            litellm_master_key: str) -> Iterator[tuple[str, LocalFleet]]:
    """Prometheus on the example config, after two reconcile passes with requests between
    (once for the module: both tests only read)."""
    tmp_path = tmp_path_factory.mktemp("discovery")
    boxes = loopback_boxes(2)
    local = LocalFleet(tmp_path / "fleet", one_model_hosts(boxes))
    port = free_port()
    fleet = local.write_reconciled(fake_litellm.url, litellm_master_key, port,
                                   tmp_path / "state.sqlite3",
                                   metrics={"token": METRICS_TOKEN},
                                   fleet={"cost_per_hour": {box: 0.5 for box in boxes}})
    stubs = start_stubs(fleet)
    try:
        with start_llmao_server(local.config_path, local.models_path, tmp_path, port=port,
                                workers=1) as server:
            first = run_reconcile(local.inventory_path)
            assert first.returncode == 0, first.output
            for intended in fleet.servers():
                for _ in range(REQUESTS_PER_SERVER):
                    ask(intended.box, intended.listen_port, intended.api_key,
                        intended.served_model_name)
            second = run_reconcile(local.inventory_path)
            assert second.returncode == 0, second.output
            for box in fleet.assignments:  # each box checks in, as its box program does
                check_in(server.url, local.fleet_key, box)
            with run_prometheus(tmp_path, example_config(tmp_path, server.url)) as prometheus:
                yield prometheus, local
    finally:
        stop_stubs(stubs)


def targets(prometheus: str) -> list[tuple[str, str, str]]:
    """Each active target's job, address and last scrape error, as Prometheus reports them."""
    active = (api(prometheus, "/api/v1/targets") or {}).get("activeTargets", [])
    return [(target["labels"].get("job", ""), target["scrapeUrl"], target["lastError"])
            for target in active]


def test_prometheus_finds_and_scrapes_every_vllm(scraped) -> None:
    prometheus, local = scraped
    fleet = local.load()
    expected = {f"box={server.box},model={server.model_name},provider=local,"
                f"server={server.name}" for server in fleet.servers()}
    up = wait_for(lambda: (found := query(prometheus, 'up{job="vllm"} == 1'))
                  and set(found) == expected and found, SEEN_TIMEOUT_S,
                  lambda: f"up: {query(prometheus, 'up')}; targets: {targets(prometheus)}")
    assert set(up) == expected
    running = wait_for(lambda: query(prometheus, "vllm:num_requests_running"), SEEN_TIMEOUT_S)
    assert {dict(pair.split("=", 1) for pair in labels.split(","))["box"] for labels in running} \
        == set(fleet.assignments)


def test_every_grafana_query_parses_and_returns_data(scraped) -> None:
    prometheus, _local = scraped
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert len(grafana_queries()) >= 20
    assert all(target["datasource"]["uid"] == "${datasource}" for panel in dashboard["panels"]
               for target in panel.get("targets", []))
    wait_for(lambda: query(prometheus, 'up{job="vllm"} == 1'), SEEN_TIMEOUT_S)
    time.sleep(5)  # a few scrapes, so that rate() has two samples in its window
    empty = empty_queries(prometheus)
    assert not empty, "queries without data:\n" + "\n".join(empty)
