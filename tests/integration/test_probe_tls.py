"""Probes and scrapes under box TLS, against stub vLLMs serving HTTPS: the chain and the
address are verified, a certificate from another CA or for another address is rejected (not
ours), and only a box allowed to (not on TLS yet) is taken at its plain HTTP word."""

from __future__ import annotations

import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.box_tls import box_context
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Models
from ansible_collections.llmao.fleet.plugins.module_utils.listings import Endpoint
from ansible_collections.llmao.fleet.plugins.module_utils.probe import Target, probe_one
from rig.boxes import free_port
from rig.hostile_vllm import hostile_vllm
from tests.tls_files import make_test_ca

KEY = "sk-vllm-test-bearer-0123456789"


@pytest.fixture
def fleet_ca(tmp_path):
    return make_test_ca(tmp_path / "ca")


def tls_stub(local_stub_factory, ca, folder, *names):
    key, cert = ca.leaf(folder, *names)
    return local_stub_factory(served_name="m", model="org/weights", api_key=KEY,
                              args=["--ssl-keyfile", str(key), "--ssl-certfile", str(cert)])


def probe(host, port, ca, plain_allowed=False, previous=None):
    more = [str(previous.cert)] if previous else []
    target = Target("k", Endpoint(host, port, "given", "https"), "m", KEY,
                    box_context(str(ca.cert), *more), plain_allowed)
    return probe_one(target, 3.0, 10.0)


def test_a_box_with_the_fleet_cas_certificate_for_its_address_is_probed_and_scraped(
        local_stub_factory, fleet_ca, tmp_path):
    stub = tls_stub(local_stub_factory, fleet_ca, tmp_path / "box", "127.0.0.1")
    seen = probe("127.0.0.1", stub.port, fleet_ca)
    assert (seen.health_ok, seen.models, seen.plain_http) == (True, Models.LISTS, False)
    assert seen.metrics is not None and seen.metrics.kv_cache_tokens
    # the leaf lives 7 days: its expiry as served is kept for the dashboard and /metrics
    assert abs(seen.cert_not_after - (time.time() + 7 * 86400)) < 120


def test_one_connection_carries_the_whole_probe(local_stub_factory, fleet_ca, tmp_path):
    # /health, /v1/models and /metrics pipelined on one connection: the box shakes hands
    # once a probe, and the bearer goes out only once that handshake has verified it.
    stub = tls_stub(local_stub_factory, fleet_ca, tmp_path / "box", "127.0.0.1")
    before = len(stub.log())  # (the stub's readiness check was served over TLS too)
    seen = probe("127.0.0.1", stub.port, fleet_ca)
    assert seen.models is Models.LISTS and seen.metrics is not None
    log = stub.log()[before:]
    assert log.count("TLS handshake") == 1 and "TLS handshake (full)" in log, log
    for path in ("/health", "/v1/models", "/metrics"):
        assert log.count(f"GET {path} ") == 1, log


class ClosingBox(BaseHTTPRequestHandler):
    """A box over HTTP/1.0: it closes the connection after every answer, so what was
    pipelined behind /health must be asked again."""

    protocol_version = "HTTP/1.0"
    paths: list = []
    # How long it takes over each answer after /health's.
    slow_s = 0.0

    def do_GET(self):
        ClosingBox.paths.append((self.path, self.connection.session_reused))
        if self.path != "/health":
            time.sleep(self.slow_s)
        body = b'{"data": [{"id": "m"}]}' if self.path == "/v1/models" else b""
        if self.path == "/metrics":
            body = b"vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 4\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def closing_box_probe(fleet_ca, folder, slow_s=0.0, timeouts=(3.0, 10.0)):
    """One probe of a :class:`ClosingBox` with the fleet CA's certificate, and its time."""
    key, cert = fleet_ca.leaf(folder, "127.0.0.1")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), ClosingBox)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ClosingBox.paths, ClosingBox.slow_s = [], slow_s
    try:
        target = Target("k", Endpoint("127.0.0.1", server.server_address[1], "given", "https"),
                        "m", KEY, box_context(str(fleet_ca.cert)))
        began = time.monotonic()
        return probe_one(target, *timeouts), time.monotonic() - began
    finally:
        server.shutdown()
        server.server_close()


def test_what_a_closing_box_did_not_answer_is_asked_again_on_a_resumed_session(
        fleet_ca, tmp_path):
    seen, _elapsed = closing_box_probe(fleet_ca, tmp_path / "box")
    assert (seen.health_ok, seen.models, seen.detail) == (True, Models.LISTS, "")
    assert seen.metrics is not None and seen.metrics.requests_waiting == 4
    # /health on the first connection; each request after it on a new one, resumed
    assert ClosingBox.paths == [("/health", False), ("/v1/models", True), ("/metrics", True)]


def test_a_closing_box_wins_no_time_by_closing(fleet_ca, tmp_path):
    # The requests behind /health share one deadline from its answer: asked again on a new
    # connection, each keeps it, so two slow answers in a row leave the second unread.
    seen, elapsed = closing_box_probe(fleet_ca, tmp_path / "box", slow_s=0.4,
                                      timeouts=(CONNECT_S, TIMEOUT_S))
    assert (seen.models, seen.detail) == (Models.LISTS, "figures unknown: /metrics: timed out")
    assert elapsed <= BOUND_S


def test_another_ca_or_another_address_is_rejected(local_stub_factory, fleet_ca, tmp_path):
    other = make_test_ca(tmp_path / "other")
    foreign = tls_stub(local_stub_factory, other, tmp_path / "foreign", "127.0.0.1")
    seen = probe("127.0.0.1", foreign.port, fleet_ca)
    assert seen.models is Models.REJECTED and not seen.health_ok
    assert "fleet CA did not sign" in seen.detail
    assert "GET /v1/models" not in foreign.log()  # the bearer never went out
    elsewhere = tls_stub(local_stub_factory, fleet_ca, tmp_path / "elsewhere", "127.0.0.2")
    seen = probe("127.0.0.1", elsewhere.port, fleet_ca)
    assert seen.models is Models.REJECTED and "mismatch" in seen.detail


def test_plain_http_is_taken_only_from_a_box_not_on_tls_yet(local_stub_factory, fleet_ca):
    plain = local_stub_factory(served_name="m", model="org/weights", api_key=KEY)
    refused = probe("127.0.0.1", plain.port, fleet_ca)
    assert refused.models is Models.SKIPPED and not refused.plain_http
    allowed = probe("127.0.0.1", plain.port, fleet_ca, plain_allowed=True)
    assert (allowed.models, allowed.plain_http) == (Models.LISTS, True)


def test_while_the_ca_is_rotated_a_box_of_the_previous_ca_is_ours(local_stub_factory,
                                                                  fleet_ca, tmp_path):
    """box_tls.previous_ca_cert: a box not yet renewed from the new CA stays Healthy."""
    previous = make_test_ca(tmp_path / "previous")
    stub = tls_stub(local_stub_factory, previous, tmp_path / "old-box", "127.0.0.1")
    assert probe("127.0.0.1", stub.port, fleet_ca).models is Models.REJECTED
    seen = probe("127.0.0.1", stub.port, fleet_ca, previous=previous)
    assert (seen.health_ok, seen.models) == (True, Models.LISTS)
    renewed = tls_stub(local_stub_factory, fleet_ca, tmp_path / "new-box", "127.0.0.1")
    assert probe("127.0.0.1", renewed.port, fleet_ca, previous=previous).models is Models.LISTS
    stranger = tls_stub(local_stub_factory, make_test_ca(tmp_path / "stranger"),
                        tmp_path / "stranger-box", "127.0.0.1")
    assert probe("127.0.0.1", stranger.port, fleet_ca,
                 previous=previous).models is Models.REJECTED


CONNECT_S, TIMEOUT_S, DRIP_S = 0.3, 0.3, 0.1
# Pipelined or not, a probe ends within 2 × (connect + timeout): /health by its deadline,
# and what was pipelined behind it by one more, counted from /health's answer.
BOUND_S = 2 * (CONNECT_S + TIMEOUT_S) + 1.0


def hostile_probe(fleet_ca, folder, faults):
    """One probe, over HTTPS, of a hostile box with the fleet CA's certificate."""
    key, cert = fleet_ca.leaf(folder, "127.0.0.1")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    port = free_port()
    with hostile_vllm("127.0.0.1", port, "m", DRIP_S, faults, tls=context):
        began = time.monotonic()
        seen = probe_one(Target("k", Endpoint("127.0.0.1", port, "given", "https"), "m",
                                "sk-key", box_context(str(fleet_ca.cert))),
                         CONNECT_S, TIMEOUT_S)
        return seen, time.monotonic() - began


@pytest.mark.parametrize("fault", ["drip_body", "drip_headers", "slow_status"])
def test_a_dripped_scrape_behind_the_others_leaves_figures_unknown_by_the_deadline(
        fleet_ca, tmp_path, fault):
    seen, elapsed = hostile_probe(fleet_ca, tmp_path / "box", {"/metrics": fault})
    assert elapsed <= BOUND_S
    assert (seen.health_ok, seen.models) == (True, Models.LISTS)
    assert seen.detail == "figures unknown: /metrics: timed out"


@pytest.mark.parametrize("path", ["/health", "/v1/models"])
@pytest.mark.parametrize("fault", ["drip_body", "slow_status"])
def test_a_dripped_answer_holds_what_is_pipelined_behind_it_only_until_the_deadline(
        fleet_ca, tmp_path, path, fault):
    seen, elapsed = hostile_probe(fleet_ca, tmp_path / "box", {path: fault})
    assert elapsed <= BOUND_S
    assert seen.models is not Models.LISTS and seen.detail == "timed out"


def test_a_huge_models_answer_is_refused_unread_over_tls(fleet_ca, tmp_path):
    seen, elapsed = hostile_probe(fleet_ca, tmp_path / "box", {"/v1/models": "huge_body"})
    assert seen.models is Models.OTHER and elapsed <= BOUND_S
