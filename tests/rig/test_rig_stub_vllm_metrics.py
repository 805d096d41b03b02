"""The stub's /metrics tells the truth: vLLM's names, its KV size, load from requests served."""

from __future__ import annotations

import threading
import time

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import read_metrics
from tests.rig.test_rig_stub_vllm import KEY, call, chat_body

CHAT = "/v1/chat/completions"


def figures(stub):
    status, body = call(f"{stub.url}/metrics")
    assert status == 200
    models = call(f"{stub.url}/v1/models", key=KEY)[1]
    return read_metrics(body.decode(), models, "m", time.time())


def start(factory, *args, behaviour=None):
    return factory(served_name="m", model="org/weights", api_key=KEY, args=list(args),
                   behaviour=behaviour)


def chat(stub, words: int, timeout: float = 10):
    body = {"model": "m", "messages": [{"role": "user", "content": " ".join(["w"] * words)}]}
    return call(f"{stub.url}{CHAT}", key=KEY, body=body, timeout=timeout)


def test_defaults_and_counters_moved_by_served_requests(local_stub_factory):
    stub = start(local_stub_factory)
    before = figures(stub)
    assert before.kv_cache_tokens == 4096 * 16 and before.max_model_len == 8192
    assert (before.requests_running, before.requests_waiting) == (0, 0)
    assert before.kv_cache_usage_ratio == 0.0
    assert (before.prompt_tokens_total, before.generation_tokens_total) == (0, 0)
    call(f"{stub.url}{CHAT}", key=KEY, body=chat_body())
    chat(stub, 7)
    after = figures(stub)
    assert after.prompt_tokens_total == 2 + 7
    assert after.generation_tokens_total == 2 * 5  # "answered by localhost port N"


def test_kv_size_and_context_from_vllm_flags(local_stub_factory):
    stub = start(local_stub_factory, "--num-gpu-blocks-override", "8", "--block-size", "32",
                 "--max-model-len", "1024")
    seen = figures(stub)
    assert (seen.kv_cache_tokens, seen.max_model_len) == (256, 1024)


def test_too_long_a_prompt_is_refused_like_vllm(local_stub_factory):
    stub = start(local_stub_factory, "--max-model-len", "16")
    status, body = chat(stub, 17)
    assert status == 400 and b"maximum context length is 16 tokens" in body


def test_a_busy_server_queues_and_fills_its_cache(local_stub_factory):
    stub = start(local_stub_factory, "--max-num-seqs", "1", "--num-gpu-blocks-override", "10",
                 behaviour={"*": {"generation_delay_s": 1.5}})
    clients = [threading.Thread(target=chat, args=(stub, 30)) for _ in range(3)]
    for client in clients:
        client.start()
    time.sleep(0.7)
    busy = figures(stub)
    for client in clients:
        client.join(timeout=15)
    assert (busy.requests_running, busy.requests_waiting) == (1, 2)
    # 30 words + 5 answered = 35 tokens: 3 blocks of 16 out of 10.
    assert busy.kv_cache_usage_ratio == pytest.approx(0.3)
    done = figures(stub)
    assert (done.requests_running, done.requests_waiting, done.prompt_tokens_total) == (0, 0, 90)


def test_an_oversized_server_hangs_on_a_request_that_needs_the_space(local_stub_factory):
    stub = start(local_stub_factory, "--max-model-len", "4096", "--num-gpu-blocks-override", "4")
    assert figures(stub).kv_cache_tokens == 64 < 4096
    status, _ = chat(stub, 20)
    assert status == 200
    with pytest.raises(TimeoutError):
        chat(stub, 100, timeout=1.5)
    stuck = figures(stub)
    assert (stuck.requests_running, stuck.requests_waiting) == (0, 1)
