"""Reconcile end to end: the real llmao server, container boxes that pull their assignment, the
real LiteLLM proxy, and ``ansible-playbook playbooks/reconcile.yml`` run as an operator runs it.

One scenario, pass after pass, because each pass builds on the memory the one before left:

1. a box whose vLLM loads slowly is Loading; a box answering with another key is Rejected;
2. ``--check`` (with ``--diff``) shows the registration and changes nothing;
3. the slow box is Healthy and registered; a chat through LiteLLM is answered by it; the
   rejecting box, named by the container engine's listing, stays Rejected;
4. a second pass changes nothing (``changed=0``);
5. its vLLM stopped (``supervisorctl stop``): one failed probe deletes nothing, the second
   (the threshold) makes it Unhealthy and deletes its deployment;
6. the rejecting box's container gone and something else answering at its address, no listing
   names it: Foreign;
7. LiteLLM stopped: the pass fails, says so, and nothing is deleted or recorded.

No secret appears in any output, the audit log or the server's log.
"""

from __future__ import annotations

import json
import secrets
import urllib.request

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import LlmaoAdmin
from rig import web
from rig.boxes import LocalStub, free_port, host_gateway_address
from rig.fleet_files import strong_secret
from rig.litellm_process import LiteLLMProcess, start_litellm
from rig.local_fleet import MODEL, LocalFleet, loopback_boxes
from rig.processes import stop_all
from rig.tls import make_server_tls
from tests.box_pull import SERVER, plan_line, pull_assignment
from tests.llmao_process import start_llmao_server
from tests.reconcile_run import PlaybookRun, run_reconcile

pytestmark = [pytest.mark.docker, pytest.mark.litellm, pytest.mark.slow]

LOAD_DELAY_S = 15


def chat(litellm: LiteLLMProcess, master_key: str) -> str:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "who?"}]})
    request = urllib.request.Request(
        f"{litellm.url}/v1/chat/completions", data=body.encode(), method="POST",
        headers={"Authorization": f"Bearer {master_key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)["choices"][0]["message"]["content"]


def owned_routes(litellm: LiteLLMProcess, master_key: str) -> list[str]:
    request = urllib.request.Request(f"{litellm.url}/model/info",
                                     headers={"Authorization": f"Bearer {master_key}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return [entry["model_info"]["id"] for entry in json.load(answer)["data"]
                if str(entry["model_info"].get("id", "")).startswith("llmao:")]


def test_reconcile_end_to_end(tmp_path, monkeypatch, box_factory, local_stub_factory):
    gateway = host_gateway_address()
    tls = make_server_tls(tmp_path / "tls", [gateway, "127.0.0.1"])
    master_key = strong_secret("sk-e2e-master-")
    suffix = secrets.token_hex(3)
    slow = f"e2e-slow-{suffix}"
    (rejecting,) = loopback_boxes(1)  # an address: once unlisted it is dialled by its name
    local = LocalFleet(tmp_path / "fleet", {slow: [[MODEL, 8001, SERVER]],
                                            rejecting: [[MODEL, 8001, SERVER]]})
    knobs = {"health_grace_s": 300, "health_fail_threshold": 2, "rejected_passes": 2,
             "probe_connect_timeout_s": 2, "probe_timeout_s": 5}
    litellm = start_litellm("real", master_key=master_key, log_dir=tmp_path)
    server = None
    try:
        port = free_port(gateway)
        local.write(fleet=knobs, providers={"docker": {"label": "llmao.box"}},
                    litellm={"url": litellm.url, "master_key": master_key},
                    server={"url": f"https://{gateway}:{port}",
                            "state": str(tmp_path / "state.sqlite3")})
        server = start_llmao_server(local.config_path, local.models_path, tmp_path,
                                    host=gateway, port=port,
                                    tls=(tls.ca_file, tls.certfile, tls.keyfile))
        env = {"SSL_CERT_FILE": str(tls.ca_file)}
        monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_file))  # this test reads llmao too
        audit = local.folder / "llmao-audit.jsonl"
        runs: list[PlaybookRun] = []

        def reconcile(*flags: str) -> PlaybookRun:
            runs.append(run_reconcile(local.inventory_path, *flags, env=env))
            return runs[-1]

        slow_box = box_factory(slow, behaviour={"*": {"load_delay_s": LOAD_DELAY_S}})
        rejecting_box = box_factory(rejecting, behaviour={"*": {"fail": "reject"}})
        pull_assignment(slow_box, server, local, tls.ca_file)
        pull_assignment(rejecting_box, server, local, tls.ca_file)

        # 1. Loading, and Rejected.
        first = reconcile()
        assert first.returncode == 0, first.output
        assert ": Loading: fetched its config" in plan_line(first, slow), first.output
        assert ": Rejected: 401 to our bearer (1 pass(es))" in plan_line(first, rejecting)
        assert owned_routes(litellm, master_key) == []

        # 2. --check shows the registration and changes nothing.
        web.wait_answering(f"{slow_box.url(8001)}/health", 60.0)
        checked = reconcile("--check", "--diff")
        assert checked.returncode == 0, checked.output
        assert "=> register: Healthy, not in LiteLLM" in plan_line(checked, slow)
        assert '"api_key": "********"' in checked.output, checked.output
        assert checked.changed >= 1
        assert owned_routes(litellm, master_key) == []
        assert not audit.exists()

        # 3. Healthy and registered; LiteLLM routes a chat to it; listed, so still Rejected.
        third = reconcile()
        assert third.returncode == 0, third.output
        assert "Loading -> Healthy" in plan_line(third, slow), third.output
        assert owned_routes(litellm, master_key) == [f"llmao:{slow}:8001:{SERVER}"]
        assert chat(litellm, master_key) == f"answered by {slow} port 8001"
        assert ": Rejected: 401 to our bearer (2 pass(es))" in plan_line(third, rejecting)

        # 4. Nothing changed: nothing to do.
        fourth = reconcile()
        assert (fourth.returncode, fourth.changed) == (0, 0), fourth.output

        # 5. vLLM stopped: below the threshold nothing is deleted, at it the route goes.
        slow_box.supervisorctl("stop", SERVER, check=True)
        below = reconcile()
        assert "(1 of 2 failures before it is Unhealthy)" in plan_line(below, slow), below.output
        assert owned_routes(litellm, master_key) == [f"llmao:{slow}:8001:{SERVER}"]
        at = reconcile()
        assert "Healthy -> Unhealthy" in plan_line(at, slow), at.output
        assert "=> delete: Unhealthy" in plan_line(at, slow)
        assert owned_routes(litellm, master_key) == []
        actions = [json.loads(line)["action"] for line in audit.read_text().splitlines()]
        assert actions == ["register", "delete"]

        # 6. No listing names the rejecting box any more, and something answers at its name.
        rejecting_box.remove()
        impostor: LocalStub = local_stub_factory(8001, served_name=MODEL, model="x/y",
                                                 api_key="sk-vllm-not-ours", host=rejecting)
        assert impostor.port == 8001
        foreign = reconcile()
        assert foreign.returncode == 0, foreign.output
        assert "Rejected -> Foreign" in plan_line(foreign, rejecting), foreign.output

        # 7. LiteLLM stopped: the pass fails clearly and changes nothing.
        admin = LlmaoAdmin(server.url, local.admin_token)
        recorded = admin.observations().pass_at
        litellm.stop()
        down = reconcile()
        assert down.returncode != 0 and down.failed == 1, down.output
        assert f"LiteLLM at {litellm.url} unreachable" in down.output
        assert "nothing was changed" in down.output
        assert [json.loads(line)["action"] for line in audit.read_text().splitlines()] == \
            actions
        assert admin.observations().pass_at == recorded

        texts = [run.output for run in runs] + [audit.read_text(), server.log()]
        for secret in local.secrets():
            assert not any(secret in text for text in texts)
    finally:
        stop_all(litellm, server)
