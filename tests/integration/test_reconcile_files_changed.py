"""A reconcile pass acts on one version of the fleet files.

An operator saves ``config.yaml`` while a pass runs (the timer does not wait for them): had the
steps after the save read the new file while the probes were made from the old one, the pass
would have written LiteLLM from a mix of both (box TLS turned on mid-pass put an ``https://``
route on a box the probe had reached over plain HTTP). Here the real playbook runs against the
real ``llmao-server`` and the LiteLLM contract fake, over one box whose ``/metrics`` drips so
that its probe lasts; the file is saved while the probe is under way. That pass prints why and
ends without writing (and gives its lease back); the next one registers the box.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import FILES_CHANGED
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import LlmaoAdmin
from rig.boxes import free_port
from rig.hostile_vllm import hostile_vllm
from rig.local_fleet import LocalFleet, loopback_boxes, one_model_hosts
from tests.llmao_process import start_llmao_server
from tests.reconcile_run import forget_routes, run_reconcile

pytestmark = pytest.mark.slow

CONNECT_S, TIMEOUT_S = 1, 2


def wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_pass_whose_files_are_saved_while_it_probes_writes_nothing(
        tmp_path: Path, fake_litellm, litellm_master_key):
    (box_name,) = loopback_boxes(1)
    local = LocalFleet(tmp_path / "fleet", one_model_hosts([box_name]))
    port = free_port()
    fleet = local.write_reconciled(fake_litellm.url, litellm_master_key, port,
                                   tmp_path / "state.sqlite3",
                                   fleet={"probe_connect_timeout_s": CONNECT_S,
                                          "probe_timeout_s": TIMEOUT_S})
    (server,) = fleet.servers()
    litellm = LiteLLM.from_settings(fleet.settings)
    try:
        with start_llmao_server(local.config_path, local.models_path, tmp_path, port=port,
                                workers=1) as llmao, \
                hostile_vllm(box_name, server.listen_port, server.served_model_name, 0.2,
                             {"/metrics": "drip_body"}) as box, \
                ThreadPoolExecutor(1) as runner:
            running = runner.submit(run_reconcile, local.inventory_path, timeout=120)
            wait_for(lambda: "/metrics" in box.requests, "the pass's scrape")
            local.write(fleet={"probe_connect_timeout_s": CONNECT_S,
                               "probe_timeout_s": TIMEOUT_S + 1})
            changed = running.result()
            assert changed.returncode == 0, changed.output
            assert FILES_CHANGED in changed.output
            assert server.id not in {route.id for route in litellm.routes()}
            assert LlmaoAdmin(llmao.url, local.admin_token).observations().verdicts == {}

            box.set_faults({})
            after = run_reconcile(local.inventory_path, timeout=120)
            assert after.returncode == 0, after.output
            assert "this pass ends without writing" not in after.output  # the lease came back
            assert FILES_CHANGED not in after.output
            assert server.id in {route.id for route in litellm.routes()}, after.output
    finally:
        forget_routes(fleet)
