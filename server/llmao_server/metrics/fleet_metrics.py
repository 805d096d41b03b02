"""``GET /metrics``: the fleet in Prometheus text, for Grafana and Alertmanager.

Every scrape builds the fleet's figures from the shared store, through a
collector made for that scrape: none is kept in a process, so every worker and
every instance on one database answers the same. Only the server's own figures
are not the store's: the box API's counts (:mod:`..box_api_stats`, shared by the
workers of one server) and the answering worker's ``process_*`` series. Figures
reconcile could not read are left out (a missing series), never written as 0.
``docs/metrics.md`` lists the series; ``docs/alerts/llmao-rules.yml`` alerts on them.

``metrics.token`` in ``config.yaml`` is the bearer a scraper presents; without
one the endpoint answers loopback peers only (a Prometheus on the same machine).
"""

from __future__ import annotations

import hmac
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from flask import Blueprint, Response, request
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ansible_collections.llmao.fleet.plugins.module_utils.bearer import is_placeholder
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Drift, State
from ansible_collections.llmao.fleet.plugins.module_utils.server_load import read_load_document
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import (
    MetricsRecordError,
)

from ..addresses import is_loopback
from ..api_errors import RequestRefused
from ..bearer_header import presented_bearer
from ..build_info import package_version
from ..state import ServerState, app_state, waiting_unknowns
from ..store import ReconcilePass
from ..tls.cert_expiry import certificate_expiries
from .pool_metrics import pool_metrics

bp = Blueprint("fleet_metrics", __name__)

SERVER_LABELS = ("box", "server", "model")
# Per server: series name, help, the ServerMetrics figure it shows.
SERVER_GAUGES = (
    ("llmao_server_kv_cache_tokens", "KV cache size in tokens (vLLM's blocks x block size).",
     "kv_cache_tokens"),
    ("llmao_server_kv_cache_usage_ratio", "Share of the KV cache in use, 0 to 1.",
     "kv_cache_usage_ratio"),
    ("llmao_server_requests_running", "Requests vLLM is running.", "requests_running"),
    ("llmao_server_requests_waiting", "Requests waiting in vLLM's queue.", "requests_waiting"),
    ("llmao_server_max_model_len_tokens", "The context vLLM serves (/v1/models).",
     "max_model_len"),
)
SERVER_COUNTERS = (
    ("llmao_server_prompt_tokens", "Prompt tokens vLLM processed since it started.",
     "prompt_tokens_total"),
    ("llmao_server_generation_tokens", "Tokens vLLM generated since it started.",
     "generation_tokens_total"),
)
# Per model: series name, help, the ModelLoad field it shows.
MODEL_GAUGES = (
    ("llmao_model_servers", "Servers of the model in the fleet.", "servers"),
    ("llmao_model_healthy_servers", "Healthy servers of the model.", "healthy"),
    ("llmao_model_capacity_requests", "Full-context requests its Healthy servers hold at once.",
     "capacity"),
    ("llmao_model_requests_running", "Requests running on its Healthy servers.",
     "requests_running"),
    ("llmao_model_requests_waiting", "Requests waiting on its Healthy servers.",
     "requests_waiting"),
    ("llmao_model_oversized_servers", "Its servers whose context exceeds their KV cache.",
     "oversized"),
    ("llmao_model_generation_tokens_per_second", "Tokens its Healthy servers generate per second.",
     "generation_tokens_per_s"),
    ("llmao_model_cost_usd_per_hour", "What its servers cost per hour in USD (their boxes' "
     "shares).", "cost_per_hour"),
    ("llmao_model_cost_usd_per_million_generated_tokens", "Its cost in USD per million "
     "generated tokens.", "cost_per_million_tokens"),
)


@bp.get("/metrics")
def metrics() -> Response:
    require_scraper(app_state().fleet.settings.metrics.token)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(app_state(), time.time()))
    ProcessCollector(registry=registry)  # this worker's CPU, memory and open files
    return Response(generate_latest(registry), 200, content_type=CONTENT_TYPE_LATEST,
                    headers={"Cache-Control": "no-store"})


def require_scraper(token: str | None) -> None:
    """The bearer ``metrics.token`` when one is set; a loopback peer otherwise."""
    if is_placeholder(token):
        if not is_loopback(request.remote_addr or ""):
            raise RequestRefused(403, "metrics_loopback_only",
                                 "without metrics.token in config.yaml, /metrics answers loopback "
                                 "peers only; set metrics.token and scrape with it as bearer")
        return
    presented = presented_bearer(request.headers.get("Authorization", ""))
    if presented is None:
        raise RequestRefused(401, "metrics_token_required",
                             "present the metrics token as 'Authorization: Bearer <metrics.token>'")
    if not hmac.compare_digest(presented.encode(), token.encode()):
        raise RequestRefused(403, "metrics_token_wrong", "the metrics token is not this server's")


class FleetCollector:
    """The series of one scrape, read from the store when Prometheus asks."""

    def __init__(self, state: ServerState, now: float):
        self.state = state
        self.now = now

    def collect(self) -> Iterator[Metric]:
        build = GaugeMetricFamily("llmao_build_info", "Always 1; the version label says which "
                                  "llmao fleet answers.", labels=["version"])
        build.add_metric([package_version()], 1)
        yield build
        yield from self.state.box_api_stats.metrics()
        last = self.state.store.last_pass()
        approvals = self.state.store.approvals()
        unknown = waiting_unknowns(self.state.fleet, self.state.store.unknown_boxes(), approvals)
        yield GaugeMetricFamily("llmao_unknown_boxes",
                                "Names presenting the fleet key that are not in fleet.hosts "
                                "nor approved.", value=len(unknown))
        yield from binding_metrics(self.state)
        yield from pool_metrics(self.state.store.pools())
        served = set(self.state.fleet_in_force(approvals).assignments)
        yield from box_checkins(served, self.state.store.fetch_times(),
                                self.state.store.check_times(),
                                self.state.store.applied_reports())
        follow_s = self.state.fleet.settings.rollout.follow_s
        if follow_s is not None:
            yield GaugeMetricFamily("llmao_rollout_follow_interval_seconds",
                                    "How often a following box checks its assignment "
                                    "(rollout.follow_s).", value=follow_s)
        if last is None:
            return  # no pass yet: every figure reconcile gives is unknown
        yield GaugeMetricFamily("llmao_reconcile_last_pass_timestamp_seconds",
                                "When the latest reconcile pass ran.", value=last.pass_at)
        yield from pass_metrics(last)


def binding_metrics(state: ServerState) -> Iterator[Metric]:
    """Bound box names, and the refused claims of each (a series per bound name only, so a
    caller cannot grow it: docs/box-identity.md)."""
    bound = [binding for binding in state.store.bindings_since(0) if binding.bound]
    yield GaugeMetricFamily("llmao_bound_boxes", "Box names bound to the box that first "
                            "fetched them (fleet.binding).", value=len(bound))
    claims = CounterMetricFamily("llmao_box_claims_refused",
                                 "Calls refused for presenting a bound box's name without its "
                                 "token, since the binding was made.", labels=["box"])
    for conflict in state.store.binding_conflicts():
        claims.add_metric([conflict.box], conflict.count)
    yield claims


def box_checkins(served: set[str], fetches: Mapping[str, float], checks: Mapping[str, float],
                 applied: Mapping[str, Any]) -> Iterator[Metric]:
    """Per box of the fleet: when it last asked for its config (a fetch or a follow check)
    and when it last reported an applied revision; a box that never did has no sample."""
    fetched = GaugeMetricFamily("llmao_box_last_fetch_timestamp_seconds",
                                "When the box last asked for its config (GET /vllm/config, "
                                "a fetch or a follow check).", labels=["box"])
    reported = GaugeMetricFamily("llmao_box_last_applied_timestamp_seconds",
                                 "When the box last reported the revision it applied "
                                 "(POST /vllm/applied).", labels=["box"])
    for box in sorted(served):
        asked = [when for when in (fetches.get(box), checks.get(box)) if when is not None]
        if asked:
            fetched.add_metric([box], max(asked))
        if box in applied:
            reported.add_metric([box], applied[box].reported_at)
    yield fetched
    yield reported


def pass_metrics(last: ReconcilePass) -> Iterator[Metric]:
    """What one recorded pass says: states, drift, and the loads it read."""
    states = Counter(str(verdict.get("state")) for verdict in last.verdicts.values())
    servers = GaugeMetricFamily("llmao_servers", "Servers by their state in the latest pass.",
                                labels=["state"])
    for state in State:
        servers.add_metric([state.value], states.get(state.value, 0))
    yield servers
    kinds = Counter(str(item.get("kind")) for item in last.drift)
    drift = GaugeMetricFamily("llmao_drift", "Drift the latest pass reported, by kind.",
                              labels=["kind"])
    for kind in Drift:
        drift.add_metric([kind.value], kinds.get(kind.value, 0))
    yield drift
    try:
        loads, models, boxes = read_load_document(
            {"verdicts": last.verdicts, "models": last.models, "boxes": last.boxes})
    except MetricsRecordError:
        loads, models, boxes = {}, {}, {}
    yield from server_metrics(last.verdicts, loads)
    yield from model_metrics(models)
    expiry = GaugeMetricFamily("llmao_box_certificate_expiry_timestamp_seconds",
                               "When the TLS certificate a box served in the latest pass "
                               "expires (box_tls).", labels=["box"])
    for box, when in certificate_expiries(last.verdicts).items():
        expiry.add_metric([box], when)
    yield expiry
    box_cost = GaugeMetricFamily("llmao_box_cost_usd_per_hour", "A box's price per hour in USD.",
                                 labels=["box", "provider"])
    for box, cost in boxes.items():
        if cost.cost_per_hour is not None:
            box_cost.add_metric([box, cost.provider], cost.cost_per_hour)
    yield box_cost


# The latency figures (vllm_latency.Latency) as series: name, help, figure prefix.
LATENCY_SERIES = (
    ("time_to_first_token_seconds", "Time to first token over the last pass interval.",
     "ttft"),
    ("e2e_request_latency_seconds", "End-to-end request latency over the last pass interval.",
     "e2e"),
    ("inter_token_latency_seconds", "Inter-token latency over the last pass interval.", "itl"),
)
QUANTILE_LABELS = (("0.5", "p50"), ("0.95", "p95"))


class LatencyFamilies:
    """``llmao_<scope>_<latency>{..., quantile}`` and ``llmao_<scope>_preemptions``."""

    def __init__(self, scope: str, labels: list[str]):
        self.quantiles = {figure: GaugeMetricFamily(
            f"llmao_{scope}_{name}", f"{text} Quantiles of vLLM's histogram deltas between "
            "two passes.", labels=[*labels, "quantile"]) for name, text, figure in LATENCY_SERIES}
        self.preemptions = GaugeMetricFamily(
            f"llmao_{scope}_preemptions", "Requests vLLM preempted over the last pass "
            "interval.", labels=labels)

    def add(self, labels: list[str], latency: Any) -> None:
        """The known figures of a :class:`Latency` (None: all unknown)."""
        if latency is None:
            return
        for figure, family in self.quantiles.items():
            for quantile, suffix in QUANTILE_LABELS:
                add_known(family, [*labels, quantile], getattr(latency, f"{figure}_{suffix}_s"))
        add_known(self.preemptions, labels, latency.preemptions)

    def families(self) -> Iterator[Metric]:
        yield from self.quantiles.values()
        yield self.preemptions


def server_labels(verdict: Mapping[str, Any]) -> list[str] | None:
    """box, server, model of a verdict; None for one without them (not a server's)."""
    labels = [verdict.get("box"), verdict.get("name"), verdict.get("model_name")]
    return [str(label) for label in labels] if all(labels) else None


def server_metrics(verdicts: Mapping[str, Mapping[str, Any]],
                   loads: Mapping[str, Any]) -> Iterator[Metric]:
    up = GaugeMetricFamily("llmao_server_up", "1 when the server is Healthy, else 0.",
                           labels=list(SERVER_LABELS))
    in_state = GaugeMetricFamily("llmao_server_state", "1 for the server's state in the latest "
                                 "pass, 0 for every other state.",
                                 labels=[*SERVER_LABELS, "state"])
    plain = GaugeMetricFamily("llmao_server_plain_http", "1 when the box answered the TLS "
                              "hello in plain HTTP under box TLS (a possible downgrade).",
                              labels=list(SERVER_LABELS))
    gauges = {name: GaugeMetricFamily(name, text, labels=list(SERVER_LABELS))
              for name, text, _ in SERVER_GAUGES}
    counters = {name: CounterMetricFamily(name, text, labels=list(SERVER_LABELS))
                for name, text, _ in SERVER_COUNTERS}
    verdict_gauges = {
        "llmao_server_oversized": ("1 when the served context exceeds the KV cache (vLLM "
                                   "would hang on a long request).", "oversized"),
        "llmao_server_saturated": ("1 when requests keep waiting or the KV cache is nearly "
                                   "full.", "saturated"),
        "llmao_server_generation_tokens_per_second": ("Tokens generated per second since the "
                                                      "pass before.", "generation_tokens_per_s"),
        "llmao_server_cost_usd_per_hour": ("The server's share of its box's price per hour, "
                                           "in USD.", "cost_per_hour"),
    }
    verdict_families = {name: GaugeMetricFamily(name, text, labels=list(SERVER_LABELS))
                        for name, (text, _) in verdict_gauges.items()}
    latencies = LatencyFamilies("server", list(SERVER_LABELS))
    for key, verdict in verdicts.items():
        labels = server_labels(verdict)
        if labels is None:
            continue
        state = str(verdict.get("state"))
        up.add_metric(labels, 1 if state == State.HEALTHY.value else 0)
        for each in State:
            in_state.add_metric([*labels, each.value], 1 if state == each.value else 0)
        plain.add_metric(labels, 1 if verdict.get("plain_http") is True else 0)
        load = loads.get(key)
        if load is None:
            continue
        for name, (_, field) in verdict_gauges.items():
            add_known(verdict_families[name], labels, getattr(load, field))
        latencies.add(labels, load.latency)
        if load.metrics is None:
            continue
        for name, _, field in SERVER_GAUGES:
            add_known(gauges[name], labels, getattr(load.metrics, field))
        for name, _, field in SERVER_COUNTERS:
            add_known(counters[name], labels, getattr(load.metrics, field))
    yield up
    yield in_state
    yield plain
    yield from gauges.values()
    yield from counters.values()
    yield from verdict_families.values()
    yield from latencies.families()


def model_metrics(models: Mapping[str, Any]) -> Iterator[Metric]:
    families = {name: GaugeMetricFamily(name, text, labels=["model"])
                for name, text, _ in MODEL_GAUGES}
    saturated = GaugeMetricFamily("llmao_model_saturated", "1 when the model needs another "
                                  "box (one of its Healthy servers is saturated).",
                                  labels=["model"])
    latencies = LatencyFamilies("model", ["model"])
    for model, load in models.items():
        for name, _, field in MODEL_GAUGES:
            add_known(families[name], [model], getattr(load, field))
        add_known(saturated, [model], load.saturated)
        latencies.add([model], load.latency)
    yield from families.values()
    yield saturated
    yield from latencies.families()


def add_known(family: GaugeMetricFamily | CounterMetricFamily, labels: list[str],
              value: float | bool | None) -> None:
    """A sample for a known figure; an unknown one is left out, never written as 0."""
    if value is not None:
        family.add_metric(labels, float(value))
