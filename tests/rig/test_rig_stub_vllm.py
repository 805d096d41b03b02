"""The vLLM stub on loopback: the parts of vLLM's behaviour the fleet's probes rely on."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from rig import web
from rig.boxes import free_port
from rig.stub_vllm import Behaviour, load_behaviour, parse_args, refused_argument

KEY = "sk-vllm-test-bearer-0123456789"


def call(url: str, *, key: str | None = None, body: dict | None = None,
         auth: str | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    """One HTTP request to the stub; returns (status, body) whatever the status."""
    return web.call(url, headers={"Content-Type": "application/json",
                                  **web.authorization(key, auth)}, body=body, timeout=timeout)


def chat_body(model: str = "m") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "say hi"}]}


@pytest.fixture
def stub(local_stub_factory):
    return local_stub_factory(served_name="m", model="org/weights", api_key=KEY, box_name="box-a")


def test_health_needs_no_key(stub):
    assert call(f"{stub.url}/health") == (200, b"")


@pytest.mark.parametrize(
    "auth",
    [None, "Bearer wrong", f"Bearer {KEY}x", KEY, f"Bearer  {KEY}", f"Basic {KEY}"],
    ids=["missing", "wrong", "longer", "no-scheme", "two-spaces", "basic"],
)
def test_models_refuses_anything_but_the_bearer(stub, auth):
    status, body = call(f"{stub.url}/v1/models", auth=auth)
    assert status == 401
    assert json.loads(body) == {"error": "Unauthorized"}


def test_models_lists_the_served_name(stub):
    status, body = call(f"{stub.url}/v1/models", key=KEY)
    assert status == 200
    listing = json.loads(body)
    assert listing["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"], m["root"]) for m in listing["data"]] == [
        ("m", "model", "vllm", "org/weights")
    ]


def test_chat_answer_names_box_and_port(stub):
    status, body = call(f"{stub.url}/v1/chat/completions", key=KEY, body=chat_body())
    assert status == 200
    answer = json.loads(body)
    assert answer["object"] == "chat.completion"
    assert answer["model"] == "m"
    assert answer["choices"][0]["message"] == {
        "role": "assistant",
        "content": f"answered by box-a port {stub.port}",
    }
    assert answer["usage"]["total_tokens"] > 0


@pytest.mark.parametrize(
    ("key", "body", "status"),
    [
        (None, chat_body(), 401),
        ("wrong", chat_body(), 401),
        (KEY, chat_body("other-model"), 404),
        (KEY, {"model": "m"}, 400),
    ],
    ids=["no-key", "wrong-key", "other-model", "no-messages"],
)
def test_chat_refusals(stub, key, body, status):
    assert call(f"{stub.url}/v1/chat/completions", key=key, body=body)[0] == status


def test_metrics_are_prometheus_text_and_count_answers(stub):
    call(f"{stub.url}/v1/chat/completions", key=KEY, body=chat_body())
    status, body = call(f"{stub.url}/metrics")
    text = body.decode()
    assert status == 200
    assert "# TYPE vllm:num_requests_running gauge" in text
    assert 'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0' in text
    assert ('vllm:request_success_total{engine="0",model_name="m",finished_reason="stop"} 1.0'
            in text)


def test_log_has_one_line_per_request_and_never_the_key(stub):
    call(f"{stub.url}/v1/models", key=KEY)
    call(f"{stub.url}/v1/models", key="a-wrong-key-value")
    log = stub.log()
    assert log.count("GET /v1/models") == 2
    assert KEY not in log
    assert "a-wrong-key-value" not in log


def test_without_a_key_configured_v1_is_open(local_stub_factory):
    stub = local_stub_factory(served_name="m", model="m", api_key="")
    assert call(f"{stub.url}/v1/models")[0] == 200


def test_load_delay_keeps_the_port_closed_until_loaded(local_stub_factory):
    stub = local_stub_factory(
        served_name="m", model="m", api_key=KEY, behaviour={"*": {"load_delay_s": 1.5}}, wait=False
    )
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", stub.port)):
        pass
    stub.wait_ready()
    assert call(f"{stub.url}/health")[0] == 200


def test_reject_mode_refuses_the_right_key(local_stub_factory):
    stub = local_stub_factory(
        served_name="m", model="m", api_key=KEY, behaviour={"*": {"fail": "reject"}}
    )
    assert call(f"{stub.url}/health")[0] == 200
    assert call(f"{stub.url}/v1/models", key=KEY)[0] == 401
    assert call(f"{stub.url}/v1/chat/completions", key=KEY, body=chat_body())[0] == 401


def test_health_500_mode(local_stub_factory):
    stub = local_stub_factory(
        served_name="m", model="m", api_key=KEY, behaviour={"*": {"fail": "health_500"}}
    )
    assert call(f"{stub.url}/health")[0] == 500
    assert call(f"{stub.url}/v1/models", key=KEY)[0] == 200


def test_exit_mode_exits_1_without_listening(local_stub_factory):
    stub = local_stub_factory(
        served_name="m", model="m", api_key=KEY, behaviour={"*": {"fail": "exit"}}, wait=False
    )
    assert stub.process.wait(10) == 1


def test_port_entry_overrides_the_star_entry(local_stub_factory):
    port = free_port()
    behaviour = {"*": {"fail": "reject"}, str(port): {"fail": None}}
    stub = local_stub_factory(port, served_name="m", model="m", api_key=KEY, behaviour=behaviour)
    assert call(f"{stub.url}/v1/models", key=KEY)[0] == 200


def test_answer_delay_applies_to_every_answer(local_stub_factory):
    stub = local_stub_factory(
        served_name="m", model="m", api_key=KEY, behaviour={"*": {"answer_delay_s": 0.4}}
    )
    started = time.monotonic()
    call(f"{stub.url}/health")
    call(f"{stub.url}/v1/models", key="wrong")
    assert time.monotonic() - started >= 0.8


def read_answers(sock: socket.socket, count: int) -> bytes:
    """Bytes from ``sock`` until ``count`` empty-bodied answers (as /health's) have come."""
    seen = b""
    while seen.count(b"\r\n\r\n") < count:
        chunk = sock.recv(4096)
        assert chunk, "the stub closed the connection"
        seen += chunk
    return seen


def test_round_trip_answers_a_pipelined_flight_together_and_a_later_request_alone(
        local_stub_factory):
    """round_trip_s: three requests sent in one flight come back one round trip later, not
    three (the server is quick); a request sent after that waits a round trip of its own."""
    stub = local_stub_factory(served_name="m", model="m", api_key=KEY,
                              behaviour={"*": {"round_trip_s": 0.4}})
    request = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{stub.port}\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", stub.port), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(request * 3)
        assert read_answers(sock, 3).count(b"HTTP/1.1 200 OK") == 3
        flight = time.monotonic() - started
        sock.sendall(request)
        read_answers(sock, 1)
        second = time.monotonic() - started - flight
    assert 0.4 <= flight < 0.8
    assert second >= 0.4


def test_command_line_accepts_vllm_flags_it_does_not_use():
    args, ignored = parse_args(
        [
            "serve",
            "google/gemma",
            "--host",
            "0.0.0.0",
            "--port",
            "8001",
            "--served-model-name",
            "gemma",
            "--gpu-memory-utilization",
            "0.45",
            "--max-model-len",
            "4096",
            "--reasoning-parser",
            "gemma",
            "--enable-prefix-caching",
        ]
    )
    assert (args.model, args.host, args.port) == ("google/gemma", "0.0.0.0", 8001)
    assert (args.served_model_name, args.gpu_memory_utilization, args.max_model_len) == (
        ["gemma"],
        0.45,
        4096,
    )
    assert ignored == ["--reasoning-parser", "gemma", "--enable-prefix-caching"]


def test_the_devices_endpoint_reports_the_cards_and_parallel_sizes_given(local_stub_factory):
    stub = local_stub_factory(served_name="m", model="org/weights", api_key=KEY,
                              args=["--tensor-parallel-size", "2", "-pp", "2",
                                    "--gpu-memory-utilization", "0.45"],
                              env={"CUDA_VISIBLE_DEVICES": "1,3,4,6",
                                   "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    status, body = call(f"{stub.url}/stub/devices")
    assert status == 200
    assert json.loads(body) == {"cuda_visible_devices": "1,3,4,6",
                                "cuda_device_order": "PCI_BUS_ID",
                                "tensor_parallel_size": 2, "pipeline_parallel_size": 2,
                                "gpu_memory_utilization": 0.45}


def test_without_cards_given_the_devices_endpoint_says_null(stub):
    devices = json.loads(call(f"{stub.url}/stub/devices")[1])
    assert devices["cuda_visible_devices"] is None and devices["tensor_parallel_size"] == 1


def test_behaviour_file_missing_means_defaults(tmp_path):
    assert load_behaviour(str(tmp_path / "none.json"), 8001) == Behaviour()


@pytest.mark.parametrize(
    "table",
    [{"*": {"load_delay": 1}}, {"8001": {"fail": "crash"}}, ["not", "an", "object"],
     {"*": {"refuse_args": "--enforce-eager"}}, {"*": {"refuse_args": ["enforce-eager"]}}],
    ids=["unknown-key", "unknown-failure", "not-an-object", "refuse-not-a-list",
         "refuse-not-a-flag"],
)
def test_behaviour_file_mistakes_are_refused(tmp_path, table):
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(table))
    with pytest.raises(SystemExit, match="stub-vllm"):
        load_behaviour(str(path), 8001)


@pytest.mark.parametrize(
    ("argv", "refused", "found"),
    [
        (["--max-model-len", "4096"], ("--max-model-len=4096",), "--max-model-len=4096"),
        (["--max-model-len=4096"], ("--max-model-len=4096",), "--max-model-len=4096"),
        (["--max-model-len", "2048"], ("--max-model-len=4096",), None),
        (["--max-model-len", "2048"], ("--max-model-len",), "--max-model-len=2048"),
        (["--enforce-eager", "--port", "8001"], ("--enforce-eager",), "--enforce-eager"),
        (["--enforce-eager"], ("--enforce-eager=1",), None),
        (["--port", "8001"], (), None),
    ],
    ids=["spaced-value", "equals-value", "other-value", "any-value", "bare-flag",
         "bare-flag-not-the-value", "nothing-refused"],
)
def test_refused_argument_matches_a_flag_or_its_value(argv, refused, found):
    assert refused_argument(["serve", "m", *argv], refused) == found


def test_a_refused_argument_exits_2_without_listening_and_says_which(local_stub_factory):
    stub = local_stub_factory(
        served_name="m", model="m", api_key=KEY, wait=False,
        behaviour={"*": {"refuse_args": ["--max-model-len=4096"]}},
        args=["--max-model-len", "4096"])
    assert stub.process.wait(10) == 2
    assert "argument --max-model-len=4096 refused" in stub.log()


def test_the_same_flag_with_another_value_serves(local_stub_factory):
    stub = local_stub_factory(
        served_name="m", model="m", api_key=KEY,
        behaviour={"*": {"refuse_args": ["--max-model-len=4096"]}},
        args=["--max-model-len", "2048"])
    status, body = call(f"{stub.url}/v1/models", key=KEY)
    assert status == 200 and json.loads(body)["data"][0]["max_model_len"] == 2048


# --- streaming and /v1/completions --------------------------------------------------------------


def stream(stub, path: str, body: dict) -> tuple[int, list[tuple[float, str]]]:
    return web.events(f"{stub.url}{path}", headers=web.authorization(KEY), body=body)


def chunks_of(received: list[tuple[float, str]]) -> list[dict]:
    """The JSON chunks of a stream that ended with `[DONE]`."""
    assert received[-1][1] == "[DONE]"
    return [json.loads(data) for _, data in received[:-1]]


def test_streamed_chat_sends_one_chunk_per_token_then_done(stub):
    status, received = stream(stub, "/v1/chat/completions", {**chat_body(), "stream": True})
    assert status == 200
    chunks = chunks_of(received)
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk["id"] for chunk in chunks}) == 1
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    text = "".join(delta.get("content", "") for delta in deltas)
    assert text == f"answered by box-a port {stub.port}"
    assert len(deltas) == 2 + len(text.split())
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks][-2:] == [None, "stop"]


def test_stream_pace_spreads_tokens_over_time(local_stub_factory):
    stub = local_stub_factory(served_name="m", model="m", api_key=KEY,
                              behaviour={"*": {"token_delay_s": 0.15}})
    body = {**chat_body(), "stream": True, "min_tokens": 12}
    status, received = stream(stub, "/v1/chat/completions", body)
    assert status == 200
    tokens = [(at, chunk) for (at, _), chunk in zip(received, chunks_of(received), strict=False)
              if chunk["choices"][0]["delta"].get("content")]
    assert len(tokens) == 12
    gaps = [later[0] - earlier[0] for earlier, later in zip(tokens, tokens[1:], strict=False)]
    assert min(gaps) >= 0.1, gaps
    assert received[-1][0] - received[0][0] >= 13 * 0.15 * 0.9


def test_streamed_chat_ends_with_usage_when_asked(stub):
    body = {**chat_body(), "stream": True, "stream_options": {"include_usage": True}}
    last = chunks_of(stream(stub, "/v1/chat/completions", body)[1])[-1]
    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}


def test_text_completion_answers_whole_and_max_tokens_cuts_it(stub):
    body = {"model": "m", "prompt": "once upon a time", "max_tokens": 2}
    status, answer = call(f"{stub.url}/v1/completions", key=KEY, body=body)
    assert status == 200
    answer = json.loads(answer)
    assert answer["object"] == "text_completion"
    assert answer["model"] == "m"
    assert [(c["text"], c["finish_reason"]) for c in answer["choices"]] == [
        ("answered by", "length")]
    assert answer["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}


def test_text_completion_streams(stub):
    body = {"model": "m", "prompt": ["say", "hi"], "stream": True, "min_tokens": 7}
    status, received = stream(stub, "/v1/completions", body)
    assert status == 200
    chunks = chunks_of(received)
    assert {chunk["object"] for chunk in chunks} == {"text_completion"}
    text = "".join(chunk["choices"][0]["text"] for chunk in chunks)
    assert text == f"answered by box-a port {stub.port} token token"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("key", "body", "status"),
    [
        (None, {"model": "m", "prompt": "x"}, 401),
        (KEY, {"model": "other", "prompt": "x"}, 404),
        (KEY, {"model": "m", "messages": []}, 400),
        (KEY, {"model": "m", "prompt": 5}, 400),
    ],
    ids=["no-key", "other-model", "no-prompt", "prompt-not-text"],
)
def test_text_completion_refusals(stub, key, body, status):
    assert call(f"{stub.url}/v1/completions", key=key, body=body)[0] == status
    assert call(f"{stub.url}/v1/completions", key=key, body={**body, "stream": True})[0] == status


def test_text_completion_is_post_only(stub):
    assert call(f"{stub.url}/v1/completions", key=KEY)[0] == 405


def test_a_stream_in_flight_runs_in_the_scheduler_and_counts_when_done(local_stub_factory):
    stub = local_stub_factory(served_name="m", model="m", api_key=KEY,
                              behaviour={"*": {"token_delay_s": 0.1}})
    body = {**chat_body(), "stream": True, "min_tokens": 20}
    streaming = threading.Thread(target=stream, args=(stub, "/v1/chat/completions", body))
    streaming.start()
    time.sleep(0.5)
    during = call(f"{stub.url}/metrics")[1].decode()
    streaming.join(10)
    after = call(f"{stub.url}/metrics")[1].decode()
    assert 'vllm:num_requests_running{engine="0",model_name="m"} 1.0' in during
    assert 'vllm:generation_tokens_total{engine="0",model_name="m"} 20.0' in after
    assert 'vllm:prompt_tokens_total{engine="0",model_name="m"} 2.0' in after


def test_a_client_hanging_up_mid_stream_frees_its_place(local_stub_factory):
    stub = local_stub_factory(served_name="m", model="m", api_key=KEY,
                              behaviour={"*": {"token_delay_s": 0.1}})
    raw = json.dumps({**chat_body(), "stream": True, "min_tokens": 50}).encode()
    with socket.create_connection(("127.0.0.1", stub.port), timeout=5) as client:
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                       + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(raw)}\r\n\r\n"
                       .encode() + raw)
        assert client.recv(4096).startswith(b"HTTP/1.1 200")
    deadline = time.monotonic() + 10
    while 'num_requests_running{engine="0",model_name="m"} 0.0' not in (
            call(f"{stub.url}/metrics")[1].decode()):
        assert time.monotonic() < deadline, "the stream kept its place after the client left"
        time.sleep(0.2)
    assert stub.process.poll() is None
