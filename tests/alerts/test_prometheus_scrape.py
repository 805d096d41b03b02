"""A real Prometheus scrapes a real llmao-server and sees the fleet, and the rules fire.

Debian's ``prometheus`` runs on loopback with a throwaway data folder, scraping
``llmao-server`` (gunicorn, three workers, so successive scrapes land on
different workers) every second with ``metrics.token`` as its bearer, and the
shipped rules loaded. A pass is posted through the admin API as reconcile posts
it; the test then asks Prometheus's HTTP API what it scraped. Bounded in time,
stopped by PID.
"""

from __future__ import annotations

import copy
import json
import secrets
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from llmao_server.build_info import package_version
from rig.boxes import free_port
from rig.processes import stop_child
from tests.llmao_process import LlmaoServer, start_llmao_server
from tests.server.fleet_pair import ADMIN_TOKEN, CONFIG, KNOWN, LEGACY, box_headers, write_pair
from tests.server.loaded_pass import a_pass, pass_document

PROMETHEUS = shutil.which("prometheus")
RULES = Path(__file__).resolve().parents[2] / "docs" / "alerts" / "llmao-rules.yml"
METRICS_TOKEN = secrets.token_urlsafe(32)
START_TIMEOUT_S = 60.0
SEEN_TIMEOUT_S = 60.0
WORKERS = 3

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not "
                                 "installed (apt-get install prometheus)")]


@pytest.fixture
def llmao(tmp_path: Path) -> Iterator[LlmaoServer]:
    document = copy.deepcopy(CONFIG)
    document["metrics"] = {"token": METRICS_TOKEN}
    document.setdefault("server", {})["state"] = str(tmp_path / "state.sqlite3")
    config, models = write_pair(tmp_path / "fleet", document)
    with start_llmao_server(Path(config), Path(models), tmp_path, workers=WORKERS) as server:
        yield server


@pytest.fixture
def prometheus(tmp_path: Path, llmao: LlmaoServer) -> Iterator[str]:
    """Prometheus scraping ``llmao`` every second; yields its API's base URL."""
    token_file = write_token(tmp_path, METRICS_TOKEN)
    shutil.copy(RULES, tmp_path / RULES.name)
    with run_prometheus(tmp_path, {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [RULES.name],
        "scrape_configs": [{
            "job_name": "llmao",
            "authorization": {"credentials_file": str(token_file)},
            "static_configs": [{"targets": [llmao.url.removeprefix("http://")]}],
        }],
    }) as url:
        yield url


def write_token(folder: Path, token: str) -> Path:
    """The metrics token in a file only its owner reads, as Prometheus's credentials_file."""
    token_file = folder / "metrics-token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    return token_file


@contextmanager
def run_prometheus(folder: Path, config: dict[str, Any]) -> Iterator[str]:
    """Debian's Prometheus on loopback with ``config`` (its files beside it in ``folder``)
    and a throwaway data folder, until ready; yields its API's base URL, stops it by PID."""
    (folder / "prometheus.yml").write_text(json.dumps(config))
    port = free_port("127.0.0.1")
    log_path = folder / "prometheus.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [PROMETHEUS or "prometheus", f"--config.file={folder / 'prometheus.yml'}",
             f"--storage.tsdb.path={folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: api(url, "/-/ready", raw=True), START_TIMEOUT_S,
                 lambda: log_path.read_text(errors="replace")[-3000:])
        yield url
    finally:
        stop_child(process, 30.0)


def api(base: str, path: str, raw: bool = False, **query: str) -> Any:
    """A GET on Prometheus's HTTP API; None when it does not answer (yet)."""
    target = f"{base}{path}?{urllib.parse.urlencode(query)}" if query else f"{base}{path}"
    try:
        with urllib.request.urlopen(target, timeout=5) as answer:
            body = answer.read()
    except OSError:
        return None
    return body if raw else json.loads(body)["data"]


def wait_for(check, timeout_s: float, why=lambda: "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"not seen within {timeout_s} s. {why()}")


def query(base: str, promql: str) -> dict[str, float]:
    """Instant query: each result's labels (as sorted key=value text) → value."""
    data = api(base, "/api/v1/query", query=promql) or {"result": []}
    return {",".join(f"{k}={v}" for k, v in sorted(item["metric"].items())
                     if k not in ("__name__", "job", "instance")): float(item["value"][1])
            for item in data["result"]}


def post_pass(server: LlmaoServer) -> None:
    body = json.dumps(pass_document(a_pass(time.time()))).encode()
    request = urllib.request.Request(f"{server.url}/admin/api/verdicts", data=body,
                                     method="POST",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=15) as answer:
        assert answer.status == 200


def test_prometheus_scrapes_llmao_server_and_the_rules_fire(llmao: LlmaoServer,
                                                             prometheus: str) -> None:
    # Before a pass: the target is up and the unknown-box count is there.
    wait_for(lambda: query(prometheus, 'up{job="llmao"} == 1'), SEEN_TIMEOUT_S)
    assert query(prometheus, "llmao_unknown_boxes") == {"": 0.0}
    post_pass(llmao)
    oversized = wait_for(lambda: query(prometheus, "llmao_server_oversized"), SEEN_TIMEOUT_S)
    assert oversized == {f"box={KNOWN},model=gemma,server=gemma": 1.0,
                         f"box={LEGACY},model=gemma,server=gemma": 0.0}
    assert query(prometheus, "llmao_model_saturated") == {"model=gemma": 0.0, "model=qwen": 1.0}
    assert query(prometheus, 'llmao_servers{state="Healthy"}') == {"state=Healthy": 3.0}
    assert query(prometheus, "llmao_box_cost_usd_per_hour") == {
        f"box={KNOWN},provider=local": 0.8, f"box={LEGACY},provider=local": 0.6}
    # The unknown KV size of qwen is absent, not 0.
    assert set(query(prometheus, "llmao_server_kv_cache_tokens")) == {
        f"box={KNOWN},model=gemma,server=gemma", f"box={LEGACY},model=gemma,server=gemma"}
    # The oversized rule has no `for`: it fires at its next evaluation.
    firing = wait_for(lambda: [alert for alert in (api(prometheus, "/api/v1/alerts") or
                                                   {"alerts": []})["alerts"]
                               if alert["labels"]["alertname"] == "LlmaoServerOversized"
                               and alert["state"] == "firing"], SEEN_TIMEOUT_S)
    assert [alert["labels"]["box"] for alert in firing] == [KNOWN]


def fetch_config(server: LlmaoServer) -> None:
    request = urllib.request.Request(f"{server.url}/vllm/config", headers=box_headers())
    with urllib.request.urlopen(request, timeout=15) as answer:
        assert answer.status == 200


def test_every_worker_counts_into_the_same_box_api_counters(llmao: LlmaoServer,
                                                             prometheus: str) -> None:
    """Scrapes land on each of the three workers; the counts they show never disagree."""
    fetches = 6
    for _ in range(fetches):
        fetch_config(llmao)
    config_2xx = 'llmao_box_api_requests_total{path="/vllm/config",code="2xx"}'
    wait_for(lambda: query(prometheus, config_2xx) == {"code=2xx,path=/vllm/config": fetches},
             SEEN_TIMEOUT_S)
    time.sleep(5)  # five more scrapes, on whichever workers
    for over_time in ("min_over_time", "max_over_time"):
        assert query(prometheus, f"{over_time}({config_2xx}[5s])") == {
            "code=2xx,path=/vllm/config": fetches}
    counted = query(prometheus, 'llmao_box_api_request_duration_seconds_count'
                                '{path="/vllm/config"}')
    assert counted == {"path=/vllm/config": fetches}
    assert query(prometheus, "llmao_build_info") == {f"version={package_version()}": 1.0}
    assert query(prometheus, "process_start_time_seconds > 0")
    assert query(prometheus, f'llmao_box_last_fetch_timestamp_seconds{{box="{KNOWN}"}}')
