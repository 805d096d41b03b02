"""``playbooks/reconcile.yml`` reads what each vLLM is doing: one server oversized, one saturated
by a client, one healthy, all stub vLLM servers on loopback telling the truth in vLLM's metric
names, against the real ``llmao-server`` and the real LiteLLM proxy. What the pass posted
is then read back as an operator sees it: llmao-server's ``/metrics`` and its dashboard."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import LlmaoAdmin
from rig.boxes import free_port
from rig.local_fleet import LocalFleet, loopback_boxes, start_stubs, stop_stubs
from tests.llmao_process import start_llmao_server
from tests.reconcile_run import forget_routes, run_reconcile
from tests.reliability.admin_http import login, request

pytestmark = [pytest.mark.slow, pytest.mark.litellm]

# 8 blocks of 16 = 128 tokens of KV cache behind a 4096-token context: vLLM would hang.
OVERSIZED = {"max_model_len": 4096, "args": ["--num-gpu-blocks-override", "8"]}
# One request at a time in 4 blocks (64 tokens), a context that fits: a 55-word prompt fills it.
BUSY = {"max_model_len": 64, "args": ["--num-gpu-blocks-override", "4", "--max-num-seqs", "1"]}
HOLD_S = 60


def ask(box: str, port: int, key: str, words: int) -> None:
    """A chat request the busy server runs for HOLD_S seconds (or queues); the answer is moot."""
    body = json.dumps({"model": "busy", "messages": [
        {"role": "user", "content": " ".join(["w"] * words)}]}).encode()
    request = urllib.request.Request(f"http://{box}:{port}/v1/chat/completions", data=body,
                                     headers={"Authorization": f"Bearer {key}",
                                              "Content-Type": "application/json"})
    with contextlib.suppress(OSError), urllib.request.urlopen(
            request, timeout=HOLD_S + 5) as answer:
        answer.read()


def test_oversized_saturated_and_healthy_in_one_pass(tmp_path: Path, real_litellm,
                                                     litellm_master_key):
    roomy_box, big_box, busy_box = loopback_boxes(3)
    hosts = {roomy_box: [["roomy", 8001]], big_box: [["big", 8001]], busy_box: [["busy", 8001]]}
    local = LocalFleet(tmp_path / "fleet", hosts, models=("roomy", "big", "busy"),
                       recipes={"big": OVERSIZED, "busy": BUSY})
    port = free_port()
    fleet = local.write_reconciled(real_litellm.url, litellm_master_key, port,
                                   tmp_path / "state.sqlite3",
                                   fleet={"cost_per_hour": {busy_box: 0.8}})
    stubs = start_stubs(fleet, {busy_box: {"*": {"generation_delay_s": HOLD_S}}})
    busy = next(server for server in fleet.servers() if server.box == busy_box)
    clients = [threading.Thread(target=ask, args=(busy_box, 8001, busy.api_key, 55),
                                daemon=True) for _ in range(2)]
    try:
        with start_llmao_server(local.config_path, local.models_path, tmp_path, port=port,
                                workers=1) as server:
            for client in clients:
                client.start()
                time.sleep(0.3)
            done = run_reconcile(local.inventory_path)
            verdicts = LlmaoAdmin(server.url, local.admin_token).observations().verdicts
            exposition = request(server, "GET", "/metrics").text  # loopback: no token needed
            cookie = login(server, local.admin_token).cookie() or ""
            dashboard = request(server, "GET", "/fleet", headers={"Cookie": cookie}).text
            routed = {route.id.split(":")[1] for route in
                      LiteLLM.from_settings(fleet.settings).routes()
                      if route.id.startswith("llmao:")}
    finally:
        stop_stubs(stubs)
        forget_routes(fleet)
    assert done.returncode == 0, done.output
    assert {roomy_box, big_box, busy_box} <= routed, "every Healthy server is routed in LiteLLM"
    assert (f"{big_box} big (big): OVERSIZED: serves max_model_len 4096 but its KV cache "
            "holds 128 tokens, so vLLM accepts a request that needs the space and then hangs on "
            "it; lower max_model_len to at most 128 in models.yaml, or give the model more "
            "memory (vram_gb: a larger GPU)") in done.output
    assert done.output.count("OVERSIZED") == 1
    assert "busy: 1 of 1 server(s) Healthy, capacity 1 full-context request(s) at once, " \
           "running 1, waiting 1" in done.output
    assert "0.800 $/h" in done.output and "it needs another box" in done.output
    roomy_line = next(line for line in done.output.splitlines() if "roomy: 1 of 1" in line)
    assert "capacity 8 full-context" in roomy_line and "SATURATED" not in roomy_line
    by_model = {verdict["model_name"]: verdict for verdict in verdicts.values()}
    assert by_model["big"]["oversized"] is True and by_model["big"]["saturated"] is False
    assert by_model["busy"]["saturated"] is True
    assert by_model["busy"]["metrics"]["kv_cache_usage_ratio"] == 1.0
    assert by_model["busy"]["memory"]["waiting_passes"] == 1
    assert by_model["roomy"]["metrics"]["kv_cache_tokens"] == 65536
    assert (by_model["roomy"]["oversized"], by_model["roomy"]["saturated"]) == (False, False)
    seen = {(sample.name, sample.labels.get("model")): sample.value
            for family in text_string_to_metric_families(exposition)
            for sample in family.samples}
    assert seen[("llmao_server_oversized", "big")] == 1
    assert seen[("llmao_server_oversized", "roomy")] == 0
    assert seen[("llmao_model_saturated", "busy")] == 1
    assert seen[("llmao_model_saturated", "roomy")] == 0
    assert seen[("llmao_server_kv_cache_tokens", "roomy")] == 65536
    assert seen[("llmao_server_up", "roomy")] == 1
    assert seen[("llmao_model_cost_usd_per_hour", "busy")] == 0.8
    assert ("llmao_model_cost_usd_per_hour", "roomy") not in seen  # no price: absent, not 0
    strip = dashboard[dashboard.index('<section class="attention"'):]
    strip = strip[:strip.index("</section>")]
    assert f"{big_box} big :8001" in strip and "its KV cache holds 128 tokens" in strip
    assert '<span class="subject">busy</span>' in strip
    assert '<article class="model" data-model="roomy">' in dashboard
    assert '<article class="model saturated" data-model="busy">' in dashboard
