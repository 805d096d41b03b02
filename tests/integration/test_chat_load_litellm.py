"""The acceptance rig through LiteLLM's real proxy: a steady chat load and a watch of the routes,
while one of two routes of a model is deleted. Streams in flight on the deleted route end whole
(LiteLLM forgets a deployment for new requests only), which is what a drain relies on; the
watch sees the model go from two routes to one and never to none."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import PUBLIC_BASE_KEY
from rig.boxes import LocalStub
from rig.chat_load import ChatLoad, Shape
from rig.litellm_process import LiteLLMProcess
from rig.route_watch import RouteWatch

pytestmark = pytest.mark.litellm

MODEL = "load-model"
PACE_S = 0.05
LONG = Shape(stream=True, min_tokens=60)  # 3 s of tokens


def body(stub: LocalStub, box: str, bearer: str) -> dict:
    return {"model_name": MODEL,
            "litellm_params": {"model": f"hosted_vllm/{MODEL}", "api_base": f"{stub.url}/v1",
                               "api_key": bearer},
            "model_info": {"id": deployment_id(box, stub.port, MODEL),
                           PUBLIC_BASE_KEY: f"{stub.url}/v1"}}


@pytest.fixture
def two_routes(real_litellm: LiteLLMProcess, litellm_master_key: str,
               local_stub_factory: Callable[..., LocalStub]) -> Iterator[tuple[LiteLLM, list]]:
    """Two paced stubs of one model, each registered in the real proxy; removed afterwards."""
    client = LiteLLM(real_litellm.url, litellm_master_key, 60)
    bearer = "sk-vllm-" + secrets.token_urlsafe(16)
    routes = []
    for box in (f"load-a-{secrets.token_hex(2)}", f"load-b-{secrets.token_hex(2)}"):
        stub = local_stub_factory(served_name=MODEL, model="org/load", api_key=bearer,
                                  box_name=box, behaviour={"*": {"token_delay_s": PACE_S}})
        client.register(body(stub, box, bearer))
        routes.append((box, stub, deployment_id(box, stub.port, MODEL)))
    yield client, routes
    for _, _, route_id in routes:
        if client.route(route_id) is not None:
            client.delete(route_id)


def test_deleting_a_route_under_load_fails_no_request(real_litellm, litellm_master_key,
                                                      two_routes):
    client, [(_, _, kept), (gone_box, gone_stub, gone)] = two_routes
    mix = (Shape(stream=False), LONG, Shape(stream=True), LONG)
    with RouteWatch(client, MODEL, interval_s=0.3) as watch, \
            ChatLoad(real_litellm.url, litellm_master_key, MODEL, rate_per_s=4, count=32,
                     max_s=30, mix=mix) as load:
        time.sleep(3.0)
        client.delete(gone)
        deleted_at = time.monotonic()
        assert load.join(timeout=120)
    summary = f"{load.summary()}\n{watch.summary()}"
    assert len(load.outcomes()) == 32, summary
    assert load.failures() == [], summary
    assert watch.fewest() == 1 and watch.errors == [], summary
    assert {len(sample.routes) for sample in watch.samples} == {1, 2}, summary
    assert watch.samples[-1].routes == {kept}, summary
    # Streams were in flight on the deleted route and ended whole after it was gone.
    on_gone = [outcome for outcome in load.outcomes()
               if outcome.answered_by == f"{gone_box}:{gone_stub.port}"]
    assert any(o.ended > deleted_at and o.shape == LONG for o in on_gone), summary
    # Requests started after the delete settled (LiteLLM's router refreshes) reach the other.
    late = [outcome for outcome in load.outcomes() if outcome.started > deleted_at + 2]
    assert late and all(outcome.answered_by != f"{gone_box}:{gone_stub.port}"
                        for outcome in late), summary
