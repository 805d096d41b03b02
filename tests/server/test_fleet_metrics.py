"""``GET /metrics``: who may scrape it, and that it says what the store holds (unknown left out).

The answer is parsed with prometheus_client's own text parser, so a malformed
exposition fails here before any Prometheus sees it.
"""

from __future__ import annotations

import copy
import secrets
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from llmao_server.build_info import package_version
from llmao_server.state import ServerState, app_state
from llmao_server.store import AppliedReport, UnknownBox
from tests.server.fleet_pair import (
    CONFIG,
    FLEET_KEY,
    KNOWN,
    LEGACY,
    OTHER_KNOWN,
    UNKNOWN,
    bound_headers,
    box_headers,
    config,
)
from tests.server.loaded_pass import OTHER_QWEN, a_pass

METRICS_TOKEN = secrets.token_urlsafe(32)
REMOTE = {"REMOTE_ADDR": "198.51.100.99"}


def samples(answer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) → value."""
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert answer.mimetype == "text/plain"
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(answer.get_data(as_text=True))
            for sample in family.samples}


def of_the_fleet(seen: dict) -> dict:
    """The samples that say something of the fleet: not the process's nor the box API's own."""
    return {key: value for key, value in seen.items()
            if not key[0].startswith(("process_", "llmao_box_api_", "llmao_build_info"))}


def at(labels: tuple[tuple[str, str], ...], quantile: str) -> tuple[tuple[str, str], ...]:
    """``labels`` with a quantile, sorted as :func:`samples` keys them."""
    return tuple(sorted((*labels, ("quantile", quantile))))


def server(box: str, name: str, model: str) -> tuple[tuple[str, str], ...]:
    return (("box", box), ("model", model), ("server", name))


@pytest.fixture
def token_app(make_app: Callable[..., Flask]) -> Flask:
    document = copy.deepcopy(CONFIG)
    document["metrics"] = {"token": METRICS_TOKEN}
    return make_app(document, folder="with-token")


def test_without_a_token_only_loopback_peers_are_answered(client: FlaskClient) -> None:
    assert client.get("/metrics").status_code == 200
    assert client.get("/metrics", environ_base={"REMOTE_ADDR": "::1"}).status_code == 200
    refused = client.get("/metrics", environ_base=REMOTE)
    assert refused.status_code == 403
    assert refused.json["error"]["code"] == "metrics_loopback_only"


@pytest.mark.parametrize(("headers", "status"), [
    ({}, 401),
    ({"Authorization": METRICS_TOKEN}, 401),
    ({"Authorization": f"Bearer {METRICS_TOKEN[:-1]}"}, 403),
    ({"Authorization": f"Bearer {FLEET_KEY}"}, 403),
    ({"Authorization": f"Bearer {METRICS_TOKEN}"}, 200),
])
def test_with_a_token_every_peer_presents_it(token_app: Flask, headers, status) -> None:
    for peer in (REMOTE, {"REMOTE_ADDR": "127.0.0.1"}):
        answer = token_app.test_client().get("/metrics", headers=headers, environ_base=peer)
        assert answer.status_code == status
        assert METRICS_TOKEN not in answer.get_data(as_text=True)


def test_before_any_pass_only_what_the_server_saw_is_there(client: FlaskClient,
                                                           state: ServerState) -> None:
    state.store.note_unknown([UnknownBox(UNKNOWN, 1.0, 2.0, 3)])
    seen = samples(client.get("/metrics"))
    assert of_the_fleet(seen) == {("llmao_unknown_boxes", ()): 1.0,
                                  ("llmao_bound_boxes", ()): 0.0}
    assert seen[("llmao_build_info", (("version", package_version()),))] == 1
    assert seen[("process_cpu_seconds_total", ())] > 0
    assert seen[("process_resident_memory_bytes", ())] > 0


def test_a_pass_shows_states_loads_verdicts_and_costs(client: FlaskClient,
                                                      state: ServerState) -> None:
    now = time.time()
    state.store.record_pass(a_pass(now))
    seen = samples(client.get("/metrics"))
    gemma, qwen = server(KNOWN, "gemma", "gemma"), server(KNOWN, "qwen", "qwen")
    other = server(OTHER_KNOWN, "qwen", "qwen")
    assert seen[("llmao_servers", (("state", "Healthy"),))] == 3
    assert seen[("llmao_servers", (("state", "Stalled"),))] == 1
    assert seen[("llmao_servers", (("state", "Rejected"),))] == 0
    assert seen[("llmao_server_up", gemma)] == 1
    assert seen[("llmao_server_up", other)] == 0
    assert seen[("llmao_server_state", (*gemma, ("state", "Healthy")))] == 1
    assert seen[("llmao_server_state", (*other, ("state", "Stalled")))] == 1
    assert seen[("llmao_server_state", (*other, ("state", "Healthy")))] == 0
    assert sum(value for (name, labels), value in seen.items()
               if name == "llmao_server_state" and labels[:3] == other) == 1
    assert len([key for key in seen if key[0] == "llmao_server_state"
                and key[1][:3] == other]) == 9, "one series per state, 0 or 1"
    assert seen[("llmao_server_kv_cache_tokens", gemma)] == 2048
    assert seen[("llmao_server_kv_cache_usage_ratio", gemma)] == 0.25
    assert seen[("llmao_server_requests_waiting", qwen)] == 7
    assert seen[("llmao_server_generation_tokens_total", gemma)] == 900
    assert seen[("llmao_server_oversized", gemma)] == 1
    assert seen[("llmao_server_saturated", qwen)] == 1
    assert seen[("llmao_model_saturated", (("model", "qwen"),))] == 1
    assert seen[("llmao_model_capacity_requests", (("model", "gemma"),))] == 2
    assert seen[("llmao_model_cost_usd_per_million_generated_tokens", (("model", "gemma"),))] \
        == 5.291
    assert seen[("llmao_drift", (("kind", "orphan_route"),))] == 2
    assert seen[("llmao_drift", (("kind", "revision_behind"),))] == 1
    assert seen[("llmao_drift", (("kind", "model_mismatch"),))] == 0
    assert seen[("llmao_box_cost_usd_per_hour", (("box", KNOWN), ("provider", "local")))] == 0.8
    assert seen[("llmao_reconcile_last_pass_timestamp_seconds", ())] == pytest.approx(now - 30)
    assert seen[("llmao_unknown_boxes", ())] == 0
    # Unknown is absent, never 0: qwen's KV size and oversized, the unscraped server's
    # figures, the unpriced box, qwen-served's capacity.
    assert ("llmao_server_kv_cache_tokens", qwen) not in seen
    assert ("llmao_server_oversized", qwen) not in seen
    assert not [key for key in seen if key[1][:3] == other
                and key[0] not in ("llmao_server_up", "llmao_server_state",
                                   "llmao_server_plain_http")]
    assert not [key for key in seen if dict(key[1]).get("box") == OTHER_KNOWN
                and key[0] == "llmao_box_cost_usd_per_hour"]
    assert not [key for key in seen if "cost_per_hour" in key[0] and "usd" not in key[0]]
    assert ("llmao_model_capacity_requests", (("model", "qwen"),)) not in seen
    # Latency over the last interval, by quantile; unknown absent.
    assert seen[("llmao_server_time_to_first_token_seconds", at(gemma, "0.95"))] \
        == 0.2
    assert seen[("llmao_server_e2e_request_latency_seconds", at(gemma, "0.5"))] \
        == 1.5
    assert ("llmao_server_e2e_request_latency_seconds", at(gemma, "0.95")) \
        not in seen
    assert seen[("llmao_server_inter_token_latency_seconds", at(gemma, "0.5"))] \
        == 0.02
    assert seen[("llmao_server_preemptions", gemma)] == 1
    assert not [key for key in seen if "latency" in key[0] or "first_token" in key[0]
                if dict(key[1]).get("box") == KNOWN and dict(key[1]).get("server") == "qwen"]
    assert seen[("llmao_model_time_to_first_token_seconds",
                 (("model", "gemma"), ("quantile", "0.5")))] == 0.05
    assert seen[("llmao_model_preemptions", (("model", "gemma"),))] == 1
    assert ("llmao_model_preemptions", (("model", "qwen"),)) not in seen


def test_every_worker_answers_the_same(make_app: Callable[..., Flask]) -> None:
    """Two apps on one store (two workers, or two instances on one database)."""
    first, second = make_app(), make_app()
    app_state(first).store.record_pass(a_pass(time.time()))
    answers = [of_the_fleet(samples(app.test_client().get("/metrics")))
               for app in (first, second)]
    assert answers[0] == answers[1]
    assert [key for key in answers[0] if key[0] == "llmao_server_oversized"]


def test_a_box_that_answered_tls_in_plain_http_is_1_every_other_server_0(
        client: FlaskClient, state: ServerState) -> None:
    recorded = a_pass(time.time())
    verdicts = copy.deepcopy(dict(recorded.verdicts))
    verdicts[OTHER_QWEN]["plain_http"] = True
    verdicts[OTHER_QWEN]["reason"] = f"plain HTTP under box TLS: {verdicts[OTHER_QWEN]['reason']}"
    state.store.record_pass(type(recorded)(recorded.pass_at, verdicts, recorded.drift,
                                           recorded.recorded_at, recorded.models,
                                           recorded.boxes))
    plain = {labels: value for (name, labels), value in samples(client.get("/metrics")).items()
             if name == "llmao_server_plain_http"}
    assert plain == {server(OTHER_KNOWN, "qwen", "qwen"): 1,
                     server(KNOWN, "gemma", "gemma"): 0, server(KNOWN, "qwen", "qwen"): 0,
                     server(LEGACY, "gemma", "gemma"): 0}


def test_each_box_shows_the_earliest_expiry_of_the_certificates_it_served(
        client: FlaskClient, state: ServerState) -> None:
    now = time.time()
    recorded = a_pass(now)
    verdicts = copy.deepcopy(dict(recorded.verdicts))
    gemma, qwen = (key for key, v in verdicts.items() if v["box"] == KNOWN)
    verdicts[gemma]["cert_not_after"] = now + 5 * 86400
    verdicts[qwen]["cert_not_after"] = now + 4 * 86400
    state.store.record_pass(type(recorded)(recorded.pass_at, verdicts, recorded.drift,
                                           recorded.recorded_at, recorded.models,
                                           recorded.boxes))
    seen = samples(client.get("/metrics"))
    expiry = {labels: value for (name, labels), value in seen.items()
              if name == "llmao_box_certificate_expiry_timestamp_seconds"}
    assert expiry == {(("box", KNOWN),): pytest.approx(now + 4 * 86400)}



def test_each_box_says_when_it_last_checked_in(make_app: Callable[..., Flask]) -> None:
    """A fetch or a follow check, whichever is later; an applied report; the follow interval."""
    app = make_app(config(), folder="plain")
    store = app_state(app).store
    store.note_fetches({KNOWN: 1000.0, OTHER_KNOWN: 1500.0, UNKNOWN: 1700.0})
    store.note_checks({KNOWN: 1200.0})
    store.record_applied(AppliedReport(KNOWN, "0123456789abcdef", "2026-01-31T12:00:00Z", (),
                                       1100.0))
    seen = samples(app.test_client().get("/metrics"))
    assert seen[("llmao_box_last_fetch_timestamp_seconds", (("box", KNOWN),))] == 1200.0
    assert seen[("llmao_box_last_fetch_timestamp_seconds", (("box", OTHER_KNOWN),))] == 1500.0
    assert seen[("llmao_box_last_applied_timestamp_seconds", (("box", KNOWN),))] == 1100.0
    assert ("llmao_box_last_applied_timestamp_seconds", (("box", OTHER_KNOWN),)) not in seen
    assert not [key for key in seen if dict(key[1]).get("box") == UNKNOWN], \
        "only boxes of the fleet: the labels stay bounded"
    assert ("llmao_rollout_follow_interval_seconds", ()) not in seen  # boxes do not follow
    following = copy.deepcopy(CONFIG)
    following["rollout"] = {"follow_s": 60}
    followed = samples(make_app(following, folder="following").test_client().get("/metrics"))
    assert followed[("llmao_rollout_follow_interval_seconds", ())] == 60


def test_the_box_api_counts_its_requests_and_their_latency(client: FlaskClient) -> None:
    bound = bound_headers(client)  # the box's first fetch, before the counts are read
    before = samples(client.get("/metrics"))
    assert client.get("/vllm/config", headers=bound).status_code == 200
    assert client.get("/vllm/config", headers=box_headers(key="wrong")).status_code == 403
    assert client.post("/vllm/applied", headers=bound, data=b"{").status_code == 400
    assert client.get("/vllm/nowhere", headers=box_headers()).status_code == 404
    assert client.post("/vllm/cert", headers=box_headers(), json={}).status_code // 100 == 4
    seen = samples(client.get("/metrics"))
    config_path = ("path", "/vllm/config")

    def grew(name: str, labels: tuple) -> float:
        return seen[(name, labels)] - before[(name, labels)]

    assert grew("llmao_box_api_requests_total", (("code", "2xx"), config_path)) == 1
    assert grew("llmao_box_api_requests_total", (("code", "4xx"), config_path)) == 1
    assert grew("llmao_box_api_requests_total", (("code", "4xx"), ("path", "/vllm/applied"))) \
        == 1
    assert grew("llmao_box_api_requests_total", (("code", "4xx"), ("path", "/vllm/cert"))) == 1
    assert grew("llmao_box_api_request_duration_seconds_count", (config_path,)) == 2
    assert grew("llmao_box_api_request_duration_seconds_bucket",
                (("le", "+Inf"), config_path)) == 2
    assert 0 < grew("llmao_box_api_request_duration_seconds_sum", (config_path,)) < 5
    assert not [key for key in seen if dict(key[1]).get("path") == "/vllm/nowhere"], \
        "only the box API's own paths: the labels stay bounded"


def test_metrics_read_the_server_state_not_the_dashboard_view() -> None:
    # /metrics answers from what sits next to the server state; the dashboard's page code
    # is not loaded to count the unknown boxes.
    code = ("import sys; import llmao_server.metrics.fleet_metrics; "
            "sys.exit('llmao_server.web.fleet_view' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
