"""The LiteLLM contract reconcile relies on, checked on the fake and on LiteLLM itself.

Every test here runs twice through the `litellm_proxy` fixture: against
rig/fake_litellm.py and against LiteLLM's real proxy app (rig/litellm_harness.py,
marked `litellm`). A difference between the two fails one of the pair, which is
what keeps the fake honest for the fast tests that use it alone.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
from collections.abc import Callable, Iterator

import pytest

from rig import web
from rig.boxes import LocalStub
from rig.litellm_process import LiteLLMProcess, LiteLLMStartError, start_litellm

MODEL = "gemma4-26b"
WEIGHTS = "google/gemma-4-26b-it"
BOX = "contract-box"
INFO_PATHS = ["/model/info", "/v1/model/info"]


def call(proxy: LiteLLMProcess, method: str, path: str, body: object = None, *,
         key: str | None, raw: bytes | None = None,
         authorization: str | None = None) -> tuple[int, str]:
    """One request to the proxy; (status, body text) whatever the status."""
    headers = {"Content-Type": "application/json", **web.authorization(key, authorization)}
    status, answer = web.call(proxy.url + path, headers=headers, body=body, raw=raw,
                              method=method, timeout=60)
    return status, answer.decode()


def deployment_body(stub: LocalStub, bearer: str, name: str) -> dict:
    """The body reconcile sends for one server: its id names box, port and server name."""
    base = f"{stub.url}/v1"
    return {
        "model_name": MODEL,
        "litellm_params": {"model": f"hosted_vllm/{MODEL}", "api_base": base, "api_key": bearer},
        "model_info": {"id": f"llmao-{BOX}-{stub.port}-{name}", "llmao_public_base": base},
    }


def listed_ids(proxy: LiteLLMProcess, key: str) -> list[str]:
    status, text = call(proxy, "GET", "/model/info", key=key)
    assert status == 200, text
    return [entry["model_info"]["id"] for entry in json.loads(text)["data"]]


def chat(proxy: LiteLLMProcess, key: str, model: str = MODEL) -> tuple[int, str]:
    body = {"model": model, "messages": [{"role": "user", "content": "who answers?"}]}
    return call(proxy, "POST", "/v1/chat/completions", body, key=key)


@pytest.fixture
def bearer() -> str:
    return "sk-vllm-" + secrets.token_urlsafe(16)


@pytest.fixture
def stub(local_stub_factory: Callable[..., LocalStub], bearer: str) -> LocalStub:
    """A vLLM stub on loopback that requires this test's bearer."""
    return local_stub_factory(served_name=MODEL, model=WEIGHTS, api_key=bearer, box_name=BOX)


@pytest.fixture
def registered(
    litellm_proxy: LiteLLMProcess,
    litellm_master_key: str,
    stub: LocalStub,
    bearer: str,
    request: pytest.FixtureRequest,
) -> Iterator[dict]:
    """A deployment of the stub registered for this test, removed afterwards if still there."""
    body = deployment_body(stub, bearer, request.node.originalname)
    status, text = call(litellm_proxy, "POST", "/model/new", body, key=litellm_master_key)
    assert status == 200, text
    yield body
    model_id = body["model_info"]["id"]
    if model_id in listed_ids(litellm_proxy, litellm_master_key):
        call(litellm_proxy, "POST", "/model/delete", {"id": model_id}, key=litellm_master_key)


# --- registering and reading back -------------------------------------------------------------


def test_new_deployment_answers_with_its_id(litellm_proxy, litellm_master_key, stub, bearer):
    body = deployment_body(stub, bearer, "new")
    status, text = call(litellm_proxy, "POST", "/model/new", body, key=litellm_master_key)
    try:
        assert status == 200, text
        answer = json.loads(text)
        assert answer["model_id"] == body["model_info"]["id"]
        assert answer["model_name"] == MODEL
        assert bearer not in text
    finally:
        call(litellm_proxy, "POST", "/model/delete", {"id": body["model_info"]["id"]},
             key=litellm_master_key)


@pytest.mark.parametrize("path", INFO_PATHS)
def test_model_info_reads_back_base_and_custom_keys_but_never_the_key(
    litellm_proxy, litellm_master_key, registered, bearer, path
):
    status, text = call(litellm_proxy, "GET", path, key=litellm_master_key)
    assert status == 200, text
    wanted = registered["model_info"]["id"]
    [entry] = [e for e in json.loads(text)["data"] if e["model_info"]["id"] == wanted]
    assert entry["model_name"] == MODEL
    assert entry["litellm_params"]["model"] == f"hosted_vllm/{MODEL}"
    assert entry["litellm_params"]["api_base"] == registered["litellm_params"]["api_base"]
    assert entry["model_info"]["llmao_public_base"] == registered["model_info"]["llmao_public_base"]
    assert "api_key" not in entry["litellm_params"]
    assert bearer not in text


def test_model_info_filters_by_id(litellm_proxy, litellm_master_key, registered):
    model_id = registered["model_info"]["id"]
    status, text = call(
        litellm_proxy, "GET", f"/model/info?litellm_model_id={model_id}", key=litellm_master_key
    )
    assert status == 200, text
    assert [e["model_info"]["id"] for e in json.loads(text)["data"]] == [model_id]


def test_model_info_for_an_unknown_id_is_a_400(litellm_proxy, litellm_master_key):
    status, text = call(
        litellm_proxy, "GET", "/model/info?litellm_model_id=llmao-nowhere", key=litellm_master_key
    )
    assert status == 400, text
    assert "llmao-nowhere" in text


def test_registering_the_same_id_twice_is_refused(litellm_proxy, litellm_master_key, registered):
    status, text = call(litellm_proxy, "POST", "/model/new", registered, key=litellm_master_key)
    assert status == 500, text
    assert json.loads(text)["error"]["code"] == "500"
    assert listed_ids(litellm_proxy, litellm_master_key).count(registered["model_info"]["id"]) == 1


# --- traffic through the proxy ----------------------------------------------------------------


def test_chat_through_the_proxy_reaches_the_stub(
    litellm_proxy, litellm_master_key, registered, stub
):
    status, text = chat(litellm_proxy, litellm_master_key)
    assert status == 200, text
    answer = json.loads(text)
    assert answer["choices"][0]["message"]["content"] == f"answered by {BOX} port {stub.port}"
    assert answer["model"] == MODEL


def test_chat_for_an_unknown_model_is_a_400(litellm_proxy, litellm_master_key):
    status, text = chat(litellm_proxy, litellm_master_key, model="no-such-model")
    assert status == 400, text
    assert json.loads(text)["error"]["type"] == "invalid_request_error"


# --- deleting -----------------------------------------------------------------------------------


def test_delete_by_id_removes_the_deployment_and_its_route(
    litellm_proxy, litellm_master_key, registered
):
    model_id = registered["model_info"]["id"]
    status, text = call(litellm_proxy, "POST", "/model/delete", {"id": model_id},
                        key=litellm_master_key)
    assert status == 200, text
    assert model_id in json.loads(text)["message"]
    assert model_id not in listed_ids(litellm_proxy, litellm_master_key)
    assert chat(litellm_proxy, litellm_master_key)[0] == 400


def test_deleting_an_unknown_id_is_a_400_naming_it(litellm_proxy, litellm_master_key):
    status, text = call(litellm_proxy, "POST", "/model/delete", {"id": "llmao-gone-8001-x"},
                        key=litellm_master_key)
    assert status == 400, text
    error = json.loads(text)["error"]
    assert error["code"] == "400"
    assert "llmao-gone-8001-x" in error["message"]


# --- auth -----------------------------------------------------------------------------------------

REFUSED_ID = "llmao-refused-8001-m"
WRONG_KEY_CALLS = {
    "model-info": ("GET", "/model/info", None),
    "model-new": ("POST", "/model/new", {
        "model_name": "m",
        "litellm_params": {"model": "hosted_vllm/m", "api_base": "http://127.0.0.1:9/v1"},
        "model_info": {"id": REFUSED_ID},
    }),
    "model-delete": ("POST", "/model/delete", {"id": REFUSED_ID}),
    "chat": ("POST", "/v1/chat/completions", {"model": MODEL, "messages": []}),
}


@pytest.mark.parametrize(
    ("method", "path", "body"), WRONG_KEY_CALLS.values(), ids=WRONG_KEY_CALLS.keys()
)
def test_a_wrong_master_key_is_refused(litellm_proxy, litellm_master_key, method, path, body):
    """Without a database LiteLLM looks no other key up: 400 no_db_connection on every route."""
    status, text = call(litellm_proxy, method, path, body, key=litellm_master_key + "x")
    assert status == 400, text
    assert json.loads(text)["error"]["type"] == "no_db_connection"
    assert REFUSED_ID not in listed_ids(litellm_proxy, litellm_master_key)


@pytest.mark.parametrize("authorization", [None, "{key}", "Token {key}"],
                         ids=["missing", "no-scheme", "other-scheme"])
def test_authorization_without_bearer_is_a_401(litellm_proxy, litellm_master_key, authorization):
    header = None if authorization is None else authorization.format(key=litellm_master_key)
    status, text = call(litellm_proxy, "GET", "/model/info", key=None, authorization=header)
    assert status == 401, text
    assert json.loads(text)["error"]["type"] == "auth_error"


# --- malformed bodies -------------------------------------------------------------------------

BAD_BODIES = {
    "new-no-model": ("/model/new", {"model_name": "m", "litellm_params": {}}, 422),
    "new-name-not-string": (
        "/model/new", {"model_name": 5, "litellm_params": {"model": "hosted_vllm/m"}}, 422),
    "new-no-params": ("/model/new", {"model_name": "m"}, 500),
    "delete-no-id": ("/model/delete", {}, 422),
    "delete-id-not-string": ("/model/delete", {"id": 5}, 422),
    "chat-no-messages": ("/v1/chat/completions", {"model": MODEL}, 400),
    "chat-model-not-string": (
        "/v1/chat/completions", {"model": 5, "messages": [{"role": "user", "content": "x"}]}, 400),
}


@pytest.mark.parametrize(("path", "body", "expected"), BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_malformed_bodies_get_litellms_status(
    litellm_proxy, litellm_master_key, path, body, expected
):
    status, text = call(litellm_proxy, "POST", path, body, key=litellm_master_key)
    assert status == expected, text


BROKEN_JSON_ANSWERS = {
    "/model/new": (422, "json_invalid"),
    "/model/delete": (422, "json_invalid"),
    "/v1/chat/completions": (400, "invalid_request_error"),
}


@pytest.mark.parametrize("path", BROKEN_JSON_ANSWERS)
@pytest.mark.parametrize("wrong_key", [False, True], ids=["master-key", "wrong-key"])
def test_broken_json_is_refused_before_the_key_is_checked(
    litellm_proxy, litellm_master_key, path, wrong_key
):
    key = litellm_master_key + ("x" if wrong_key else "")
    status, text = call(litellm_proxy, "POST", path, key=key, raw=b"{not json")
    expected_status, expected_type = BROKEN_JSON_ANSWERS[path]
    assert status == expected_status, text
    answer = json.loads(text)
    kind = answer["detail"][0]["type"] if "detail" in answer else answer["error"]["type"]
    assert kind == expected_type


# --- secrets stay out of the proxy's log --------------------------------------------------------


def test_no_master_key_or_bearer_in_the_proxy_log(
    litellm_proxy, litellm_master_key, registered, bearer
):
    assert chat(litellm_proxy, litellm_master_key)[0] == 200
    call(litellm_proxy, "GET", "/model/info", key=litellm_master_key + "x")
    log = litellm_proxy.log()
    assert litellm_master_key not in log
    assert bearer not in log


# --- the start/stop helper ----------------------------------------------------------------------


def test_stop_ends_the_process_by_its_pid(tmp_path):
    proxy = start_litellm("fake", master_key="sk-" + secrets.token_hex(8), log_dir=tmp_path)
    proxy.stop()
    assert proxy.process.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(proxy.pid, signal.SIG_DFL)


def test_a_port_already_served_is_refused_not_mistaken_for_ready(tmp_path):
    with start_litellm("fake", master_key="sk-" + secrets.token_hex(8), log_dir=tmp_path) as first:
        port = int(first.url.rsplit(":", 1)[1])
        with pytest.raises(LiteLLMStartError, match="already served"):
            start_litellm("fake", port=port, master_key="sk-x", log_dir=tmp_path)


def test_a_proxy_that_exits_at_start_reports_its_log(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))  # bound, not listening: the proxy's bind fails
        port = holder.getsockname()[1]
        with pytest.raises(LiteLLMStartError, match="exited with 1") as failure:
            start_litellm("fake", port=port, master_key="sk-x", log_dir=tmp_path)
    assert "Address already in use" in str(failure.value)
