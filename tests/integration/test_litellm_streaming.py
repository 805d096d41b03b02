"""Streams through LiteLLM's real proxy: the stub's server-sent events reach a client token by
token, as they would from vLLM, which is what a drain waiting for requests in flight needs."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator

import pytest

from rig import web
from rig.boxes import LocalStub
from rig.litellm_process import LiteLLMProcess

pytestmark = pytest.mark.litellm

MODEL = "stream-model"
BOX = "stream-box"
PACE_S = 0.2
TOKENS = 10


@pytest.fixture
def paced_stub(local_stub_factory: Callable[..., LocalStub]) -> tuple[LocalStub, str]:
    bearer = "sk-vllm-" + secrets.token_urlsafe(16)
    stub = local_stub_factory(served_name=MODEL, model="org/stream", api_key=bearer,
                              box_name=BOX, behaviour={"*": {"token_delay_s": PACE_S}})
    return stub, bearer


@pytest.fixture
def routed(real_litellm: LiteLLMProcess, litellm_master_key: str,
           paced_stub: tuple[LocalStub, str]) -> Iterator[LocalStub]:
    """The paced stub registered in the real proxy for this test, removed afterwards."""
    stub, bearer = paced_stub
    model_id = f"llmao-{BOX}-{stub.port}-stream"
    body = {"model_name": MODEL,
            "litellm_params": {"model": f"hosted_vllm/{MODEL}", "api_base": f"{stub.url}/v1",
                               "api_key": bearer},
            "model_info": {"id": model_id}}
    headers = web.authorization(litellm_master_key)
    status, text = web.call(f"{real_litellm.url}/model/new", headers=headers, body=body,
                            timeout=60)
    assert status == 200, text
    yield stub
    web.call(f"{real_litellm.url}/model/delete", headers=headers, body={"id": model_id},
             timeout=60)


def test_a_chat_stream_through_litellm_arrives_token_by_token(
        real_litellm, litellm_master_key, routed):
    body = {"model": MODEL, "stream": True, "min_tokens": TOKENS,
            "messages": [{"role": "user", "content": "stream please"}]}
    status, received = web.events(f"{real_litellm.url}/v1/chat/completions",
                                  headers=web.authorization(litellm_master_key), body=body,
                                  timeout=60)
    assert status == 200, received
    assert received[-1][1] == "[DONE]"
    chunks = [json.loads(data) for _, data in received[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    arrivals = [at for (at, _), chunk in zip(received, chunks, strict=False)
                if chunk["choices"] and chunk["choices"][0]["delta"].get("content")]
    text = "".join(chunk["choices"][0]["delta"].get("content") or ""
                   for chunk in chunks if chunk["choices"])
    assert text.split()[:5] == ["answered", "by", BOX, "port", str(routed.port)]
    assert len(text.split()) == TOKENS
    # Token by token: the proxy passes each on as it comes, not the whole answer at the end.
    assert len(arrivals) == TOKENS
    assert arrivals[-1] - arrivals[0] >= (TOKENS - 1) * PACE_S * 0.7
