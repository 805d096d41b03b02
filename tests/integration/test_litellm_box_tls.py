"""LiteLLM's real proxy and a box serving HTTPS with a certificate of the fleet CA
(docs/box-tls.md): the deployment llmao registers (``https`` base, ``ssl_verify`` = the fleet
CA) streams, and the bytes on the wire to the box hold neither the bearer nor the prompt; a
box with another CA's certificate is refused by LiteLLM itself."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from types import SimpleNamespace

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id
from ansible_collections.llmao.fleet.plugins.module_utils.listings import Endpoint
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import deployment_body
from rig import web
from rig.boxes import start_local_stub
from rig.wire_tap import tapped
from tests.tls_files import make_test_ca

pytestmark = [pytest.mark.litellm, pytest.mark.slow]

PROMPT = "the secret prompt " + secrets.token_hex(8)


class Server:
    """The parts of an intended server deployment_body reads."""

    def __init__(self, name: str, bearer: str):
        self.box, self.listen_port, self.name, self.model_name = "127.0.0.1", 8001, name, name
        self.api_key = bearer
        self.id = deployment_id(self.box, self.listen_port, name)
        self.entry = SimpleNamespace(litellm_params={"model": f"hosted_vllm/{name}"},
                                     model_info={})


def register(proxy, master_key, server, endpoint, ca_path):
    body = deployment_body(server, endpoint, ca_path)
    status, text = web.call(f"{proxy.url}/model/new", headers=web.authorization(master_key),
                            body=body, timeout=60)
    assert status == 200, text
    return body["model_info"]["id"]


def chat(proxy, master_key, model):
    body = {"model": model, "stream": True, "min_tokens": 5,
            "messages": [{"role": "user", "content": PROMPT}]}
    return web.events(f"{proxy.url}/v1/chat/completions",
                      headers=web.authorization(master_key), body=body, timeout=60)


def test_litellm_streams_over_verified_tls_and_the_wire_holds_no_secret(
        real_litellm, litellm_master_key, tmp_path: Path):
    ca = make_test_ca(tmp_path / "ca")
    key, cert = ca.leaf(tmp_path / "box", "127.0.0.1")
    bearer = "sk-vllm-" + secrets.token_urlsafe(24)
    name = "tls-" + secrets.token_hex(4)
    stub = start_local_stub(0, served_name=name, model="org/m", api_key=bearer,
                            args=["--ssl-keyfile", str(key), "--ssl-certfile", str(cert)])
    ids = []
    try:
        with tapped(("127.0.0.1", stub.port)) as tap:
            endpoint = Endpoint("127.0.0.1", tap.port, "given", "https")
            ids.append(register(real_litellm, litellm_master_key, Server(name, bearer),
                                endpoint, str(ca.cert)))
            status, received = chat(real_litellm, litellm_master_key, name)
            assert status == 200, received
            assert received[-1][1] == "[DONE]"
            text = "".join(json.loads(data)["choices"][0]["delta"].get("content") or ""
                           for _, data in received[:-1])
            assert text  # the stub answered through LiteLLM
            wire = tap.captured
        assert tap.connections >= 1 and len(wire) > 1000
        for secret in (bearer, PROMPT, "Authorization", "/v1/chat/completions"):
            assert secret.encode() not in wire
        # another CA's certificate at the same address: LiteLLM refuses to talk to it
        other = make_test_ca(tmp_path / "other")
        stranger_key, stranger_cert = other.leaf(tmp_path / "stranger", "127.0.0.1")
        stranger = start_local_stub(0, served_name=name + "-x", model="org/m", api_key=bearer,
                                    args=["--ssl-keyfile", str(stranger_key),
                                          "--ssl-certfile", str(stranger_cert)])
        try:
            endpoint = Endpoint("127.0.0.1", stranger.port, "given", "https")
            ids.append(register(real_litellm, litellm_master_key,
                                Server(name + "-x", bearer), endpoint, str(ca.cert)))
            _, received = chat(real_litellm, litellm_master_key, name + "-x")
            assert "CERTIFICATE_VERIFY_FAILED" in str(received)
        finally:
            stranger.stop()
    finally:
        stub.stop()
        for deployment in ids:
            web.call(f"{real_litellm.url}/model/delete",
                     headers=web.authorization(litellm_master_key), body={"id": deployment},
                     timeout=60)
