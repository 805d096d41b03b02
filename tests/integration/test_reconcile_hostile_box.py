"""One hostile box among honest ones cannot stop the fleet (issue 18's acceptance).

Real ``playbooks/reconcile.yml`` passes against the real ``llmao-server`` and the LiteLLM
contract fake, over a local fleet of three boxes: two honest vLLM stubs and one
``rig/hostile_vllm.py`` that answers each pass with another fault (a ``/metrics`` body
announced as 10^9 bytes and dripped, two of the issue's absurd figures, a 64 KB status
line; the probe's unit tests take every other fault). Every pass finishes within the honest
pass's time plus the probe phase's bound, ``2 × (probe_connect_timeout_s +
probe_timeout_s)``; the honest boxes stay routed
with their figures read; llmao's dashboard and ``/metrics`` answer 200; the hostile box's
figures are unknown, with a short reason in its verdict.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import LlmaoAdmin
from rig.boxes import free_port
from rig.hostile_vllm import hostile_vllm
from rig.local_fleet import LocalFleet, loopback_boxes, one_model_hosts, start_stubs, stop_stubs
from tests.llmao_process import start_llmao_server
from tests.reconcile_run import forget_routes, run_reconcile
from tests.reliability.admin_http import login, request

pytestmark = pytest.mark.slow

CONNECT_S, TIMEOUT_S = 1, 1
# The probe phase's bound for a fleet within the probe concurrency (docs/metrics.md).
PROBE_BOUND_S = 2 * (CONNECT_S + TIMEOUT_S)
# What a loaded two-core machine adds to a pass's own variation.
SLACK_S = 10.0
DRIP_S = 0.5   # under probe_timeout_s: each read is quick, the answer never ends
# One pass each: the fault on the hostile box, and whether its figures can be read at all.
PASSES = [
    ({"/metrics": "drip_body"}, "figures unknown: /metrics: timed out"),
    ({"/metrics": "squared"}, "figures unknown: vllm:cache_config_info: num_gpu_blocks is not"),
    ({"/metrics": "overflow"}, "figures unknown: vllm:num_requests_running is out of bounds"),
    ({"/health": "status_line"}, "not answering (BadStatusLine: "),
]


def timed_pass(local: LocalFleet) -> float:
    started = time.monotonic()
    done = run_reconcile(local.inventory_path, timeout=120)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.output
    return elapsed


def test_one_hostile_box_never_stops_a_pass(tmp_path: Path, fake_litellm, litellm_master_key):
    *honest, hostile = loopback_boxes(3)
    local = LocalFleet(tmp_path / "fleet", one_model_hosts([*honest, hostile]))
    port = free_port()
    fleet = local.write_reconciled(fake_litellm.url, litellm_master_key, port,
                                   tmp_path / "state.sqlite3",
                                   fleet={"probe_connect_timeout_s": CONNECT_S,
                                          "probe_timeout_s": TIMEOUT_S})
    ids = {server.box: f"llmao:{server.box}:{server.listen_port}:{server.name}"
           for server in fleet.servers()}
    served = next(s.served_model_name for s in fleet.servers() if s.box == hostile)
    stubs = start_stubs(local.of_boxes(honest, "honest"))
    try:
        with start_llmao_server(local.config_path, local.models_path, tmp_path, port=port,
                                workers=1) as server, \
                hostile_vllm(hostile, 8001, served, DRIP_S) as box:
            admin = LlmaoAdmin(server.url, local.admin_token)
            baseline = timed_pass(local)   # every box honest
            cookie = login(server, local.admin_token).cookie() or ""
            for faults, reason in PASSES:
                box.set_faults(faults)
                elapsed = timed_pass(local)
                assert elapsed <= baseline + PROBE_BOUND_S + SLACK_S, (faults, elapsed)
                verdicts = admin.observations().verdicts
                mine = verdicts[ids[hostile]]
                assert reason in mine["reason"] and len(mine["reason"]) < 300, (faults, mine)
                assert mine["metrics"] is None or mine["metrics"]["requests_running"] is None
                routed = {route.id for route in LiteLLM.from_settings(fleet.settings).routes()}
                for box_name in honest:
                    assert ids[box_name] in routed
                    assert verdicts[ids[box_name]]["state"] == "Healthy"
                    assert verdicts[ids[box_name]]["reason"] == \
                        "serving its model with our bearer"
                    assert verdicts[ids[box_name]]["metrics"]["kv_cache_tokens"] == 4096 * 16
                exposition = request(server, "GET", "/metrics")
                assert exposition.status == 200
                kv = {sample.labels.get("box"): sample.value
                      for family in text_string_to_metric_families(exposition.text)
                      for sample in family.samples
                      if sample.name == "llmao_server_kv_cache_tokens"}
                assert kv == {box_name: 4096 * 16 for box_name in honest}, faults
                page = request(server, "GET", "/fleet", headers={"Cookie": cookie})
                assert page.status == 200 and "\x1b" not in page.text
    finally:
        stop_stubs(stubs)
        forget_routes(fleet)
