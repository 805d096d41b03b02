"""Probing real stub vLLM processes on loopback: serving, rejected, down, wrong model."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils import probe as probe_module
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Models, Probe
from ansible_collections.llmao.fleet.plugins.module_utils.listings import Endpoint
from ansible_collections.llmao.fleet.plugins.module_utils.probe import Target, probe_many
from rig.boxes import free_port, start_local_stub

KEY = "sk-vllm-probe-test-key"


@pytest.fixture(scope="module")
def stubs():
    started = {
        "serving": start_local_stub(0, served_name="m", model="org/m", api_key=KEY),
        "reject": start_local_stub(0, served_name="m", model="org/m", api_key=KEY,
                                   behaviour={"*": {"fail": "reject"}}),
        "sick": start_local_stub(0, served_name="m", model="org/m", api_key=KEY,
                                 behaviour={"*": {"fail": "health_500"}}),
    }
    yield started
    for stub in started.values():
        stub.stop()


class LocalServer(ThreadingHTTPServer):
    """A local box for one test; a probe opens two connections at once, so the stdlib's
    backlog of 5 would hold some back (vLLM's is 2048)."""

    daemon_threads = True
    request_queue_size = 64


def target(key, port, served="m", api_key=KEY):
    return Target(key, Endpoint("127.0.0.1", port, "test"), served, api_key)


def test_outcomes(stubs):
    closed = free_port()
    probes = probe_many([
        target("serving", stubs["serving"].port),
        target("wrong-key", stubs["serving"].port, api_key="sk-vllm-not-ours"),
        target("other-model", stubs["serving"].port, served="not-m"),
        target("reject", stubs["reject"].port),
        target("sick", stubs["sick"].port),
        target("closed", closed),
        Target("nowhere", None, "m", KEY),
    ], connect_timeout=2, timeout=5)
    assert (probes["serving"].health_ok, probes["serving"].models) == (True, Models.LISTS)
    assert probes["wrong-key"].models is Models.REJECTED
    assert probes["other-model"].models is Models.OTHER
    assert probes["reject"].models is Models.REJECTED
    assert probes["sick"].health_ok is False
    assert probes["closed"].models is Models.SKIPPED
    assert probes["closed"].detail == "connection refused"
    assert probes["nowhere"].detail == "no public address known"
    assert all(KEY not in p.detail for p in probes.values())


def test_empty():
    assert probe_many([], 1, 1) == {}


def test_answering_servers_are_scraped_with_the_bearer(stubs):
    probes = probe_many([
        target("serving", stubs["serving"].port),
        target("other-model", stubs["serving"].port, served="not-m"),
        target("wrong-key", stubs["serving"].port, api_key="sk-vllm-not-ours"),
        target("closed", free_port()),
    ], connect_timeout=2, timeout=5)
    serving = probes["serving"].metrics
    assert serving.kv_cache_tokens == 4096 * 16 and serving.max_model_len == 8192
    assert serving.requests_waiting == 0 and serving.kv_cache_usage_ratio == 0.0
    assert serving.scraped_at == pytest.approx(time.time(), abs=30)
    assert probes["other-model"].metrics.kv_cache_tokens == 4096 * 16
    assert probes["other-model"].metrics.max_model_len is None   # not its served name
    assert probes["wrong-key"].metrics is None and probes["closed"].metrics is None
    log = stubs["serving"].log()
    assert "GET /metrics" in log and "GET /v1/metrics" not in log


def test_scrape_can_be_left_out(stubs):
    probe = probe_many([target("serving", stubs["serving"].port)], 2, 5, scrape=False)["serving"]
    assert probe.models is Models.LISTS and probe.metrics is None


class Unlike(BaseHTTPRequestHandler):
    """A server that lists the model and answers /metrics with whatever the test says."""

    protocol_version = "HTTP/1.1"
    metrics: tuple[int, bytes] = (200, b"")
    seen: list = []

    def do_GET(self):
        Unlike.seen.append((self.path, self.headers.get("Authorization")))
        if self.path == "/v1/models":
            status, body = 200, b'{"data": [{"id": "m", "max_model_len": 2048}]}'
        else:
            status, body = self.metrics if self.path == "/metrics" else (200, b"")
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def probe_local(handler: type) -> Probe:
    """One probe of a local server answering as ``handler`` does, stopped once probed."""
    server = LocalServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        return probe_many([target("local", server.server_address[1])], 2, 5)["local"]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("answer", [
    (404, b"not found"), (200, b"vllm:num_requests_waiting{a=1} 2\n"), (200, b"\xff\xfe"),
    (200, b"vllm:num_requests_waiting 2\n" * 200_000),
    (200, b"vllm:num_requests_waiting 1e300\nvllm:num_preemptions_total 3\n"),
])
def test_an_unreadable_metrics_answer_leaves_figures_unknown(answer):
    Unlike.metrics, Unlike.seen = answer, []
    probe = probe_local(Unlike)
    assert probe.models is Models.LISTS and probe.detail.startswith("figures unknown: ")
    assert probe.metrics.max_model_len == 2048
    assert probe.metrics.requests_waiting is None and probe.metrics.kv_cache_tokens is None
    assert probe.latency is None, "an answer not believed is not believed for its latency"
    assert ("/metrics", f"Bearer {KEY}") in Unlike.seen


class Crowd(BaseHTTPRequestHandler):
    """Holds each /health answer a moment and counts how many are held at once."""

    lock = threading.Lock()
    held = 0
    most = 0

    def do_GET(self):
        if self.path == "/health":
            with Crowd.lock:
                Crowd.held += 1
                Crowd.most = max(Crowd.most, Crowd.held)
            time.sleep(0.2)
            with Crowd.lock:
                Crowd.held -= 1
        self.send_response(200 if self.path == "/health" else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("room, most", [(4, 2), (1 << 20, 6)])
def test_the_pool_fits_the_descriptors_the_process_may_open(monkeypatch, room, most):
    """Two sockets a probe: a process allowed few descriptors probes fewer servers at once,
    and one allowed many probes them all at once (one wave, not two)."""
    monkeypatch.setattr(probe_module.resource, "getrlimit",
                        lambda which: (probe_module.RESERVED_DESCRIPTORS + room, 1 << 20))
    Crowd.most = 0
    server = LocalServer(("127.0.0.1", 0), Crowd)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        probes = probe_many([target(str(index), server.server_address[1])
                             for index in range(6)], 2, 5, scrape=False)
    finally:
        server.shutdown()
        server.server_close()
    assert all(probe.models is Models.REJECTED for probe in probes.values())
    assert Crowd.most == most


class Threads(Unlike):
    """Unlike, noting every thread alive while it answers."""

    alive: set = set()

    def do_GET(self):
        Threads.alive |= set(threading.enumerate())
        super().do_GET()


def test_every_probe_runs_in_the_calling_thread():
    """One event loop in the caller drives every probe: no thread is started for them."""
    Unlike.metrics, Threads.alive = (200, b"vllm:num_requests_waiting{a=\"1\"} 2\n"), set()
    server = LocalServer(("127.0.0.1", 0), Threads)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    before = set(threading.enumerate())
    try:
        probes = probe_many([target(str(index), server.server_address[1])
                             for index in range(20)], 2, 5)
    finally:
        server.shutdown()
        server.server_close()
    assert all(probe.models is Models.LISTS for probe in probes.values())
    started = {thread for thread in Threads.alive - before
               if "process_request_thread" not in thread.name}
    assert not started, sorted(thread.name for thread in started)


class Closing(Unlike):
    """Unlike over HTTP/1.0: the box closes the connection after every answer."""

    protocol_version = "HTTP/1.0"


def test_a_box_that_closes_after_health_is_scraped_on_a_new_connection():
    Unlike.metrics, Unlike.seen = (200, b"vllm:num_requests_waiting 2\n"), []
    probe = probe_local(Closing)
    assert (probe.health_ok, probe.models, probe.detail) == (True, Models.LISTS, "")
    assert probe.metrics.requests_waiting == 2 and probe.metrics.max_model_len == 2048
    assert [path for path, bearer in Unlike.seen].count("/metrics") == 1


def test_a_slow_name_fails_its_own_probe_and_stalls_no_other(stubs, monkeypatch):
    """A box dialled by a DNS name whose resolver never answers in time fails its own probe;
    the others (one by address, one by a name that resolves) are probed meanwhile."""
    real_lookup = probe_module.socket.getaddrinfo

    def lookup(host, *args, **kwargs):
        if host == "slow.invalid":
            time.sleep(3)
            raise OSError("the resolver gave up")
        if host == "stub.invalid":
            host = "127.0.0.1"
        return real_lookup(host, *args, **kwargs)

    monkeypatch.setattr(probe_module.socket, "getaddrinfo", lookup)
    port = stubs["serving"].port
    began = time.monotonic()
    probes = probe_many([
        Target("slow", Endpoint("slow.invalid", port, "test"), "m", KEY),
        Target("named", Endpoint("stub.invalid", port, "test"), "m", KEY),
        target("address", port),
    ], connect_timeout=0.5, timeout=2)
    assert time.monotonic() - began < 2.5
    assert (probes["slow"].models, probes["slow"].detail) == \
        (Models.SKIPPED, "OSError: name lookup timed out")
    assert probes["named"].models is Models.LISTS and probes["address"].models is Models.LISTS


class Held(Unlike):
    """Unlike, holding /health a moment; notes how many connections it had taken by the
    time /health answered, and on which connection each request came."""

    hold_s = 0.3
    connections: list = []
    at_health: list = []

    def setup(self):
        super().setup()
        Held.connections.append(self)

    def do_GET(self):
        if self.path == "/health":
            time.sleep(self.hold_s)
            Held.at_health.append(len(Held.connections))
        Held.seen.append((self.path, Held.connections.index(self)))
        super().do_GET()


def held_probe(handler: type, hold_s: float) -> Probe:
    Unlike.metrics, Held.hold_s = (200, b"vllm:num_requests_waiting 2\n"), hold_s
    Held.seen, Held.connections, Held.at_health = [], [], []
    return probe_local(handler)


def test_the_second_connection_is_open_while_health_is_awaited():
    """Over plain HTTP its connect costs the probe no time of its own."""
    probe = held_probe(Held, 0.3)
    assert (probe.models, probe.metrics.requests_waiting) == (Models.LISTS, 2)
    assert Held.at_health == [2]
    assert ("/v1/models", 1) in Held.seen and ("/metrics", 0) in Held.seen


class IdleClosing(Held):
    """Held, closing a connection that sends nothing for 0.1 s (as uvicorn's keep-alive)."""

    timeout = 0.1


def test_a_second_connection_the_box_closed_is_replaced():
    probe = held_probe(IdleClosing, 0.5)
    assert (probe.models, probe.detail) == (Models.LISTS, "")
    assert ("/v1/models", 2) in Held.seen


def test_a_second_connection_that_waited_too_long_is_not_used(monkeypatch):
    monkeypatch.setattr(probe_module, "SPARE_IDLE_S", 0.1)
    probe = held_probe(Held, 0.3)
    assert (probe.models, probe.detail) == (Models.LISTS, "")
    assert ("/v1/models", 2) in Held.seen and len(Held.connections) == 3
