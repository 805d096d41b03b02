"""The vLLM stub and the real vLLM (CPU build, tiny model) answer what llmao relies on alike.

Every test here runs against both: the stub, and the session's one real `vllm serve` (started
once, a minute or two; skipped with the reason where `make setup-vllm` could not install it).
A test that passes on the real server and fails on the stub is a belief of the stub the real
server does not share. The real model's text is noise: tests assert shapes and token counts.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Models
from ansible_collections.llmao.fleet.plugins.module_utils.listings import Endpoint
from ansible_collections.llmao.fleet.plugins.module_utils.probe import Target, probe_one
from ansible_collections.llmao.fleet.plugins.module_utils.prometheus_text import (
    parse_exposition,
)
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import READ, read_metrics
from rig import real_vllm as real
from rig.boxes import start_local_stub
from rig.fleet_files import strong_secret
from rig.web import authorization, call, events

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CONTEXT = 1024  # the --max-model-len both are started with (real.KV_CACHE_ARGS)


@dataclass(frozen=True)
class Server:
    kind: str
    url: str
    api_key: str
    served_name: str

    def bearer(self) -> dict[str, str]:
        return authorization(self.api_key)


@pytest.fixture(scope="module")
def stub_server() -> Iterator[Server]:
    key = strong_secret("stub-key-")
    with start_local_stub(0, served_name=real.SERVED_NAME, model=str(real.MODEL_DIR),
                          api_key=key, args=["--max-model-len", str(CONTEXT)]) as stub:
        yield Server("stub", stub.url, key, real.SERVED_NAME)


@pytest.fixture(params=["stub", "real"])
def server(request: pytest.FixtureRequest) -> Server:
    if request.param == "stub":
        return request.getfixturevalue("stub_server")
    running = request.getfixturevalue("real_vllm")
    return Server("real", running.url, running.api_key, running.served_name)


def chat(server: Server, tokens: int, **extra: object) -> dict:
    """A chat request whose answer is exactly ``tokens`` long (min_tokens = max_tokens)."""
    return {"model": server.served_name, "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": tokens, "min_tokens": tokens, **extra}


def headers_of(url: str, request_headers: dict[str, str] | None = None,
               body: dict | None = None) -> dict[str, str]:
    """The answer's headers, lowercased names (read whole, the connection then closed)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={
        "Content-Type": "application/json", **(request_headers or {})})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only
    with opener.open(request, timeout=60) as answer:
        answer.read()
        return {name.lower(): value for name, value in answer.headers.items()}


def test_content_types_are_vllms(server):
    health = headers_of(f"{server.url}/health")
    assert health["content-length"] == "0" and "content-type" not in health
    assert headers_of(f"{server.url}/metrics")["content-type"] == \
        "text/plain; version=1.0.0; charset=utf-8"
    assert headers_of(f"{server.url}/v1/models", server.bearer())["content-type"] == \
        "application/json"
    stream = headers_of(f"{server.url}/v1/chat/completions", server.bearer(),
                        chat(server, 2, stream=True))
    assert stream["content-type"] == "text/event-stream; charset=utf-8"


def test_health_and_metrics_take_no_bearer(server):
    assert call(f"{server.url}/health") == (200, b"")
    status, body = call(f"{server.url}/metrics")
    assert status == 200 and "vllm:num_requests_running" in body.decode()


@pytest.mark.parametrize("header", [None, "Bearer wrong-key", "{key}", "Bearer  {key}",
                                    "Basic {key}", "Bearer {key}x"])
def test_v1_refuses_anything_but_the_whole_bearer(server, header):
    headers = {} if header is None else {"Authorization": header.format(key=server.api_key)}
    status, body = call(f"{server.url}/v1/models", headers=headers)
    assert (status, json.loads(body)) == (401, {"error": "Unauthorized"})


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_bearer_scheme_is_read_in_any_case(server, scheme):
    headers = {"Authorization": f"{scheme} {server.api_key}"}
    assert call(f"{server.url}/v1/models", headers=headers)[0] == 200


def test_models_lists_the_served_name_and_its_context(server):
    status, body = call(f"{server.url}/v1/models", headers=server.bearer())
    assert status == 200
    (entry,) = json.loads(body)["data"]
    assert {key: entry[key] for key in ("id", "object", "owned_by", "root", "max_model_len")} \
        == {"id": server.served_name, "object": "model", "owned_by": "vllm",
            "root": str(real.MODEL_DIR), "max_model_len": CONTEXT}


def test_the_probe_reads_every_figure_and_tells_a_wrong_key(server):
    """reconcile's own probe: /health, the scrape pipelined on its connection, /v1/models."""
    host, port = server.url.removeprefix("http://").split(":")
    endpoint = Endpoint(host, int(port), "test")
    probe = probe_one(Target("t", endpoint, server.served_name, server.api_key), 5, 10)
    assert (probe.health_ok, probe.models) == (True, Models.LISTS), probe
    figures = probe.metrics.record()
    assert figures["max_model_len"] == CONTEXT
    assert None not in figures.values(), figures
    assert 0 <= figures["kv_cache_usage_ratio"] <= 1 and figures["kv_cache_tokens"] > 0
    wrong = probe_one(Target("t", endpoint, server.served_name, "wrong-key"), 5, 10)
    assert (wrong.health_ok, wrong.models, wrong.metrics) == (True, Models.REJECTED, None)


def test_metrics_carry_the_engine_and_model_name_labels(server):
    text = call(f"{server.url}/metrics")[1].decode()
    samples = parse_exposition(text, READ)
    per_request = [sample for sample in samples if sample.name != "vllm:cache_config_info"]
    assert {sample.name for sample in per_request} >= {
        "vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total"}
    assert all(sample.labels == {"engine": "0", "model_name": server.served_name}
               for sample in per_request), per_request
    (cache,) = [sample for sample in samples if sample.name == "vllm:cache_config_info"]
    assert int(cache.labels["num_gpu_blocks"]) * int(cache.labels["block_size"]) > CONTEXT


def test_an_unknown_model_is_a_404_naming_the_parameter(server):
    status, body = call(f"{server.url}/v1/chat/completions", headers=server.bearer(),
                        body={**chat(server, 2), "model": "no-such-model"})
    error = json.loads(body)["error"]
    assert (status, error["type"], error["param"], error["code"]) == \
        (404, "NotFoundError", "model", 404)
    assert error["message"].startswith("The model `no-such-model` does not exist.")


def test_a_prompt_longer_than_the_context_is_a_400(server):
    prompt = " ".join(["fleet box"] * CONTEXT)
    status, body = call(f"{server.url}/v1/completions", headers=server.bearer(),
                        body={"model": server.served_name, "prompt": prompt, "max_tokens": 2})
    error = json.loads(body)["error"]
    assert (status, error["type"], error["param"], error["code"]) == \
        (400, "BadRequestError", "input_tokens", 400)
    assert error["message"].startswith(f"This model's maximum context length is {CONTEXT} "
                                       "tokens.")


def test_a_request_without_messages_is_a_400_naming_the_field(server):
    status, body = call(f"{server.url}/v1/chat/completions", headers=server.bearer(),
                        body={"model": server.served_name})
    error = json.loads(body)["error"]
    assert (status, error["param"], error["code"]) == (400, "body.messages", 400)


def test_a_whole_chat_answer_counts_its_tokens(server):
    status, body = call(f"{server.url}/v1/chat/completions", headers=server.bearer(),
                        body=chat(server, 5), timeout=60)
    answer = json.loads(body)
    assert status == 200 and answer["object"] == "chat.completion"
    (choice,) = answer["choices"]
    assert (choice["message"]["role"], choice["finish_reason"]) == ("assistant", "length")
    assert answer["usage"]["completion_tokens"] == 5


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_a_stream_is_server_sent_events_ending_with_usage_and_done(server, path):
    body = chat(server, 6, stream=True, stream_options={"include_usage": True})
    if path == "/v1/completions":
        body = {key: value for key, value in body.items() if key != "messages"}
        body["prompt"] = "hello"
    status, received = events(f"{server.url}{path}", headers=server.bearer(), body=body,
                              timeout=60)
    assert status == 200
    data = [line for _, line in received]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(line) for line in data[:-1]]
    kind = "chat.completion.chunk" if path.endswith("chat/completions") else "text_completion"
    assert {chunk["object"] for chunk in chunks} == {kind}
    assert len({chunk["id"] for chunk in chunks}) == 1
    *with_choices, last = chunks
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 6
    finishes = [choice["finish_reason"] for chunk in with_choices for choice in chunk["choices"]]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    if kind == "chat.completion.chunk":
        assert with_choices[0]["choices"][0]["delta"]["role"] == "assistant"


def test_gauges_move_while_streams_are_held_open(real_vllm):
    """Four long streams on a cache that holds two whole ones: all four are scheduled at once
    (vLLM hands out KV blocks as answers grow, and pre-empts back to waiting when they run
    out), the usage climbs, and the token counters take every token served. The real server
    only: the stub's scheduler has its own tests (test_rig_stub_vllm_metrics.py)."""
    server = Server("real", real_vllm.url, real_vllm.api_key, real_vllm.served_name)
    scrape = f"{server.url}/metrics"
    before = read_metrics(call(scrape)[1].decode(), None, server.served_name, 0)
    tokens, streams = CONTEXT - 64, 4
    done: list[int] = []

    def stream() -> None:
        status, _ = events(f"{server.url}/v1/completions", headers=server.bearer(), timeout=120,
                           body={"model": server.served_name, "prompt": "hello",
                                 "max_tokens": tokens, "min_tokens": tokens, "stream": True})
        done.append(status)

    threads = [threading.Thread(target=stream) for _ in range(streams)]
    for thread in threads:
        thread.start()
    seen = []
    deadline = time.monotonic() + 120
    while any(thread.is_alive() for thread in threads) and time.monotonic() < deadline:
        seen.append(read_metrics(call(scrape)[1].decode(), None, server.served_name, 0))
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    after = read_metrics(call(scrape)[1].decode(), None, server.served_name, 0)
    assert done == [200] * streams
    assert max(s.requests_running for s in seen) >= 2
    assert max(s.requests_running + s.requests_waiting for s in seen) == streams
    assert 0.5 < max(s.kv_cache_usage_ratio for s in seen) <= 1
    assert (after.requests_running, after.requests_waiting) == (0, 0)
    assert after.generation_tokens_total - before.generation_tokens_total == streams * tokens
