"""Box TLS end to end (docs/box-tls.md): the real llmao server with ``box_tls``, a container box
(real supervisord, the real box program, the image's own ``openssl``) named by its provider id,
``ansible-playbook playbooks/reconcile.yml``, and the real LiteLLM proxy streaming to the box's
stub vLLM over HTTPS:

1. a first pass lists the box (its address comes from the container engine's listing) while
   it serves nothing yet;
2. the box boots: its key is made on the box (0600), its certificate names that address, and
   vLLM runs with it;
3. the next passes probe it over HTTPS, find it Healthy and register an ``https://`` api_base
   that verifies against the fleet CA;
4. a chat streams through LiteLLM to it; the same chat through a tap on the path to the box
   carries neither the bearer nor the prompt in its bytes;
5. a box answering with another CA's certificate at a listed address is Rejected, never
   registered.

No secret appears in any output or the server's log.
"""

from __future__ import annotations

import json
import secrets
import ssl
import time

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.listings import Endpoint
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import deployment_body
from llmao_server.fleet_ca_cli import init
from rig import web
from rig.boxes import free_port, host_gateway_address
from rig.fleet_files import strong_secret
from rig.litellm_process import LiteLLMProcess, start_litellm
from rig.local_fleet import MODEL, LocalFleet
from rig.processes import stop_all
from rig.tls import make_server_tls
from rig.wire_tap import tapped
from tests.box_pull import SERVER, plan_line, pull_assignment
from tests.llmao_process import start_llmao_server
from tests.reconcile_run import PlaybookRun, run_reconcile
from tests.tls_files import make_test_ca

pytestmark = [pytest.mark.docker, pytest.mark.litellm, pytest.mark.slow]

PROMPT = "a prompt nobody on the path may read " + secrets.token_hex(6)


def routes(litellm: LiteLLMProcess, master_key: str) -> dict[str, str]:
    status, text = web.call(f"{litellm.url}/model/info",
                            headers=web.authorization(master_key), timeout=30)
    assert status == 200, text
    return {entry["model_info"]["id"]: entry["litellm_params"].get("api_base")
            for entry in json.loads(text)["data"]
            if str(entry["model_info"].get("id", "")).startswith("llmao:")}


def stream(litellm: LiteLLMProcess, master_key: str, model: str) -> str:
    body = {"model": model, "stream": True, "min_tokens": 5,
            "messages": [{"role": "user", "content": PROMPT}]}
    status, received = web.events(f"{litellm.url}/v1/chat/completions",
                                  headers=web.authorization(master_key), body=body, timeout=60)
    assert status == 200, received
    assert received[-1][1] == "[DONE]"
    return "".join(json.loads(data)["choices"][0]["delta"].get("content") or ""
                   for _, data in received[:-1])


def test_box_tls_end_to_end(tmp_path, monkeypatch, box_factory):
    gateway = host_gateway_address()
    server_tls = make_server_tls(tmp_path / "server-tls", [gateway, "127.0.0.1"])
    ca_cert, ca_key = init(str(tmp_path / "fleet-ca"), "e2e fleet CA")
    master_key = strong_secret("sk-e2e-master-")
    name = f"e2e-tls-{secrets.token_hex(3)}"
    local = LocalFleet(tmp_path / "fleet", {name: [[MODEL, 8001, SERVER]]})
    knobs = {"health_grace_s": 300, "health_fail_threshold": 2, "rejected_passes": 2,
             "probe_connect_timeout_s": 2, "probe_timeout_s": 5}
    litellm = start_litellm("real", master_key=master_key, log_dir=tmp_path)
    server = None
    runs: list[PlaybookRun] = []
    try:
        port = free_port(gateway)
        local.write(fleet=knobs, providers={"docker": {"label": "llmao.box"}},
                    litellm={"url": litellm.url, "master_key": master_key},
                    server={"url": f"https://{gateway}:{port}",
                            "state": str(tmp_path / "state.sqlite3")},
                    box_tls={"ca_cert": ca_cert, "ca_key": ca_key, "leaf_days": 7},
                    rollout={"follow_s": 3600})
        server = start_llmao_server(local.config_path, local.models_path, tmp_path,
                                    host=gateway, port=port,
                                    tls=(server_tls.ca_file, server_tls.certfile,
                                         server_tls.keyfile))
        env = {"SSL_CERT_FILE": str(server_tls.ca_file)}
        monkeypatch.setenv("SSL_CERT_FILE", str(server_tls.ca_file))

        def reconcile() -> PlaybookRun:
            runs.append(run_reconcile(local.inventory_path, env=env))
            assert runs[-1].returncode == 0, runs[-1].output
            return runs[-1]

        # 1. Listed, serving nothing yet: the listing gives the address a certificate names.
        box = box_factory(name)
        public_port = box.public_port(8001)
        assert f"-> 127.0.0.1:{public_port})" in plan_line(reconcile(), name)

        # 2. The box boots: key on the box, certificate for the listed address, vLLM on HTTPS.
        pull_assignment(box, server, local, server_tls.ca_file)
        key_mode = box.exec(["stat", "-c", "%a", "/data/llmao/tls/key.pem"]).stdout.strip()
        assert key_mode == b"600"
        program = box.read_file(f"/etc/supervisor/conf.d/llmao-{SERVER}.conf").decode()
        assert "--ssl-certfile /data/llmao/tls/cert.pem --enable-ssl-refresh" in program
        web.wait_answering(f"https://127.0.0.1:{public_port}/health", 60.0,
                           ssl.create_default_context(cafile=ca_cert))

        # 3. Healthy over HTTPS and registered with an https api_base.
        for _ in range(3):
            run = reconcile()
            if "Healthy" in plan_line(run, name) and routes(litellm, master_key):
                break
        assert routes(litellm, master_key) == {
            f"llmao:{name}:8001:{SERVER}": f"https://127.0.0.1:{public_port}/v1"}

        # 4. A chat streams through LiteLLM; through a tap, no bearer and no prompt on the wire.
        assert name in stream(litellm, master_key, MODEL)
        bearer = next(iter(local.load().servers())).api_key
        with tapped(("127.0.0.1", public_port)) as tap:
            server_entry = next(iter(local.load().servers()))
            tapped_model = f"{MODEL}-tapped"
            body = deployment_body(server_entry, Endpoint("127.0.0.1", tap.port, "given",
                                                          "https"), ca_cert)
            body["model_name"] = tapped_model
            body["model_info"]["id"] = f"tap-{name}"
            status, text = web.call(f"{litellm.url}/model/new",
                                    headers=web.authorization(master_key), body=body, timeout=60)
            assert status == 200, text
            try:
                assert stream(litellm, master_key, tapped_model)
            finally:
                web.call(f"{litellm.url}/model/delete", headers=web.authorization(master_key),
                         body={"id": f"tap-{name}"}, timeout=60)
            wire = tap.captured
        assert tap.connections >= 1 and len(wire) > 1000
        for secret in (bearer, PROMPT, "/v1/chat/completions"):
            assert secret.encode() not in wire

        # 5. The listed address answers with another CA's certificate (the files swapped on
        # the box, which vLLM reloads): not ours, Rejected, its route deleted.
        stranger_ca = make_test_ca(tmp_path / "stranger-ca")
        key, cert = stranger_ca.leaf(tmp_path / "stranger", "127.0.0.1")
        box.put_file("/data/llmao/tls/key.pem", key.read_bytes(), 0o600)
        box.put_file("/data/llmao/tls/cert.pem", cert.read_bytes())
        deadline = time.monotonic() + 30
        while ssl.get_server_certificate(("127.0.0.1", public_port)) != cert.read_text():
            assert time.monotonic() < deadline, "the box never served the stranger's certificate"
            time.sleep(0.5)
        rejected = reconcile()
        assert ": Rejected: a certificate the fleet CA did not sign" in plan_line(rejected, name)
        assert routes(litellm, master_key) == {}

        said = [run.output for run in runs] + [server.log()]
        for secret in local.secrets():
            assert not any(secret in text for text in said)
    finally:
        stop_all(litellm, server)
