"""The fleet page for 1,000 servers: rendered as HTML against the same table's data as JSON.

One app over a synthetic fleet (``bench.fleetgen``) whose store holds a fetch
time and a reconcile verdict for every server with its load (KV cache, queue,
tokens per second, cost), six hours of load history (so every model's chart is
drawn as SVG), applied revisions, drift and unknown boxes. The JSON leg builds
the same page data (the charts' points included) and skips only the template.
Both legs go through Flask's test client the same way: the dashboard's
``GET /fleet`` (logged in, the template), and a route added here that reads
the same store, builds the same page data and answers ``json.dumps`` of it.
Legs alternate in rounds; the medians are compared. Nothing is asserted: the numbers are printed.

    python -m bench.bench_dashboard
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from flask import Flask, Response
from flask.testing import FlaskClient

from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import State
from ansible_collections.llmao.fleet.plugins.module_utils.server_load import (
    ServerLoad,
    model_load,
)
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import ServerMetrics
from bench.fleetgen import write_fleet
from llmao_server.app import create_app
from llmao_server.state import ServerState, app_state
from llmao_server.store import AppliedReport, ReconcilePass, UnknownBox
from llmao_server.web.fleet_view import build_page
from llmao_server.web.views import observe
from tests.dashboard.sessions import log_in

BOXES = 500  # one to three servers each: 999 servers
ROUNDS = 7
REQUESTS_PER_ROUND = 3
STATES = [State.HEALTHY] * 6 + [State.LOADING, State.STALLED, State.REJECTED, State.UNLISTED]
HISTORY_S, HISTORY_STEP_S = 6 * 3600.0, 300.0


def with_loads(verdicts: dict[str, dict], at: float) -> tuple[dict[str, dict], dict[str, dict]]:
    """The verdicts with a load each (Healthy ones scraped), and each model's load."""
    loaded, by_model = {}, {}
    for index, (key, verdict) in enumerate(verdicts.items()):
        healthy = verdict["state"] == State.HEALTHY.value
        load = ServerLoad(cost_per_hour=0.4)
        if healthy:
            wave = (index * 7 + int(at // HISTORY_STEP_S)) % 10
            metrics = ServerMetrics(65_536 if index % 13 else 4_096, wave / 10, wave, wave // 4,
                                    10_000, 50_000, 8_192, at)
            load = ServerLoad(metrics, 8_192, metrics.kv_cache_tokens < 8_192, wave > 8, 0,
                              10.0 * wave, 0.4)
        loaded[key] = {**verdict, **load.record()}
        by_model.setdefault(verdict["model_name"], []).append((load, healthy))
    return loaded, {name: model_load(loads).record() for name, loads in by_model.items()}


def seed(state: ServerState, now: float) -> None:
    """A store as a busy fleet leaves it: every box fetched, every server classified."""
    fleet, store = state.fleet, state.store
    boxes = list(fleet.assignments)
    store.note_fetches({box: now - 37.0 * index for index, box in enumerate(boxes)})
    for index, box in enumerate(boxes):
        revision = fleet.assignments[box].revision if index % 7 else "0123456789abcdef"
        store.record_applied(AppliedReport(box, revision, "2026-01-01T00:00:00Z", (), now))
    store.note_unknown([UnknownBox(f"192.0.2.{index}", now - 600, now - index, index + 1)
                        for index in range(1, 21)])
    verdicts = {}
    for index, server in enumerate(fleet.servers()):
        key = server.id
        verdict_state = STATES[index % len(STATES)]
        verdicts[key] = {"id": key, "box": server.box, "name": server.name,
                         "model_name": server.model_name, "listen_port": server.listen_port,
                         "public": f"{server.box}:{40000 + index % 20000}",
                         "state": verdict_state.value, "reason": f"{verdict_state.value} reason",
                         "in_litellm": verdict_state is State.HEALTHY, "change": None,
                         "provider": ("vast", "runpod")[index % 2], "memory": {}}
    drift = [{"kind": "unmanaged_route", "id": f"hand-{index}", "model_name": "qwen3-8b",
              "what": "route in LiteLLM that matches no intended server"} for index in range(5)]
    at = now - HISTORY_S
    while at <= now:
        loaded, models = with_loads(verdicts, at)
        store.record_pass(ReconcilePass(at, loaded, tuple(drift), at, models))
        at += HISTORY_STEP_S


def table_as_json() -> Response:
    """The baseline: the same store reads and page data as ``GET /fleet``, as JSON."""
    state: ServerState = app_state()
    now = time.time()
    page = build_page(state.fleet, observe(state.store, now), now)
    return Response(json.dumps(page.table()), mimetype="application/json")


def timed(client: FlaskClient, path: str) -> tuple[float, int]:
    started = time.perf_counter()
    answer = client.get(path)
    elapsed = time.perf_counter() - started
    if answer.status_code != 200:
        raise RuntimeError(f"GET {path} answered {answer.status_code}")
    return elapsed, len(answer.get_data())


def measure(client: FlaskClient) -> dict[str, tuple[float, int]]:
    """Median seconds and size of each leg, legs alternating within every round."""
    legs: dict[str, Callable[[], tuple[float, int]]] = {
        "html": lambda: timed(client, "/fleet"),
        "json": lambda: timed(client, "/bench/fleet.json"),
    }
    samples: dict[str, list[float]] = {name: [] for name in legs}
    sizes: dict[str, int] = {}
    for leg in legs.values():
        leg()  # warm: templates compiled, connections open
    for _ in range(ROUNDS):
        for name, leg in legs.items():
            for _ in range(REQUESTS_PER_ROUND):
                elapsed, sizes[name] = leg()
                samples[name].append(elapsed)
    return {name: (statistics.median(values), sizes[name]) for name, values in samples.items()}


def build_app(folder: Path) -> tuple[Flask, str]:
    """The app over a generated fleet, and that fleet's admin token."""
    fleet = write_fleet(folder / "fleet", BOXES)
    app = create_app({"TESTING": True, "LLMAO_CONFIG": str(fleet.config_path),
                      "LLMAO_MODELS": str(fleet.models_path),
                      "LLMAO_STATE": str(folder / "state.sqlite3")})
    app.add_url_rule("/bench/fleet.json", "bench_fleet_json", table_as_json)
    return app, fleet.keys.admin_token


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="llmao-bench-dashboard-") as folder:
        app, admin_token = build_app(Path(folder))
        state: ServerState = app_state(app)
        seed(state, time.time())
        client = app.test_client()
        assert log_in(client, admin_token, "bench").status_code == 302
        servers = sum(len(a.servers) for a in state.fleet.assignments.values())
        charts = len(state.store.last_pass().models)
        results = measure(client)
        state.close()
    html_s, html_bytes = results["html"]
    json_s, json_bytes = results["json"]
    print(f"bench_dashboard: fleet page for {servers} servers on {BOXES} boxes with "
          f"{charts} model charts, median of {ROUNDS * REQUESTS_PER_ROUND} requests per leg")
    print(f"  GET /fleet (HTML + SVG) {html_s * 1000:8.1f} ms  {html_bytes / 1024:7.0f} KiB")
    print(f"  same table as JSON      {json_s * 1000:8.1f} ms  {json_bytes / 1024:7.0f} KiB")
    print(f"  ratio HTML / JSON       {html_s / json_s:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
