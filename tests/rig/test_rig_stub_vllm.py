"""The vLLM stub on loopback: the parts of vLLM's behaviour the fleet's probes rely on."""

from __future__ import annotations

import json
import socket
import time

import pytest

from rig import web
from rig.boxes import free_port
from rig.stub_vllm import Behaviour, load_behaviour, parse_args

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
    [None, "Bearer wrong", f"Bearer {KEY}x", KEY, f"bearer {KEY}", f"Basic {KEY}"],
    ids=["missing", "wrong", "longer", "no-scheme", "lowercase-scheme", "basic"],
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
        (KEY, {**chat_body(), "stream": True}, 400),
    ],
    ids=["no-key", "wrong-key", "other-model", "no-messages", "stream"],
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


def test_behaviour_file_missing_means_defaults(tmp_path):
    assert load_behaviour(str(tmp_path / "none.json"), 8001) == Behaviour()


@pytest.mark.parametrize(
    "table",
    [{"*": {"load_delay": 1}}, {"8001": {"fail": "crash"}}, ["not", "an", "object"]],
    ids=["unknown-key", "unknown-failure", "not-an-object"],
)
def test_behaviour_file_mistakes_are_refused(tmp_path, table):
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(table))
    with pytest.raises(SystemExit, match="stub-vllm"):
        load_behaviour(str(path), 8001)
