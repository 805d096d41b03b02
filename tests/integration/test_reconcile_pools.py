"""``playbooks/reconcile.yml`` with a pool: the real llmao-server, the LiteLLM contract fake, a
local serving box and the fake Vast rent API. ``--check --diff`` shows the rent with its offer
and price and creates nothing; a real pass rents one labelled box, audited; the next pass does
not double it; the stranger's instance is never touched; no secret in the output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.pool_config import read_label
from rig.boxes import free_port
from rig.litellm_process import LiteLLMProcess
from rig.local_fleet import MODEL, LocalFleet, loopback_boxes, one_model_hosts
from rig.rent_api import RentApi, serve_rent_api, vast_offer
from tests.llmao_process import start_llmao_server
from tests.reconcile_run import run_reconcile

pytestmark = pytest.mark.slow
VAST_KEY = "vast-rent-key-" + "w" * 30


@pytest.fixture
def pooled(tmp_path: Path, fake_litellm: LiteLLMProcess,
           litellm_master_key: str) -> Iterator[tuple[LocalFleet, RentApi]]:
    with serve_rent_api() as api:
        api.vast_offers = [vast_offer(31, "RTX 4090", 0.42), vast_offer(32, "RTX 4090", 0.9)]
        local = LocalFleet(tmp_path / "fleet", one_model_hosts(loopback_boxes(1)))
        port = free_port()
        local.write_reconciled(
            fake_litellm.url, litellm_master_key, port, tmp_path / "state.sqlite3",
            providers={"vast": {"api_key": VAST_KEY, "url": api.vast_url}},
            pools={"chat": {"provider": "vast", "boxes": {"min": 1, "max": 2},
                            "serve": [[MODEL, 8001]],
                            "offer": {"gpu_names": ["RTX 4090"], "max_usd_per_hour": 0.6}}},
            budget={"max_usd_per_hour": 2.0})
        with start_llmao_server(local.config_path, local.models_path, tmp_path, port=port,
                                workers=1):
            yield local, api


def labelled(api: RentApi) -> list[str]:
    return [i.instance_id for i in api.instances.values() if read_label(i.label)]


def test_a_pass_rents_the_pool_its_box_check_shows_it_and_nothing_is_doubled(pooled):
    local, api = pooled
    stranger = api.add_unlabelled("vast")
    checked = run_reconcile(local.inventory_path, "--check", "--diff")
    assert checked.returncode == 0, checked.output[-3000:]
    assert "chat: would rent" in checked.output and '"usd_per_hour": 0.42' in checked.output
    assert labelled(api) == []

    first = run_reconcile(local.inventory_path)
    assert first.returncode == 0, first.output[-3000:]
    assert len(labelled(api)) == 1 and "chat: rent chat-" in first.output
    audit = (local.folder / "llmao-audit.jsonl").read_text()
    assert [json.loads(line)["action"] for line in audit.splitlines()
            if json.loads(line).get("kind") == "pool"] == ["rent"]

    second = run_reconcile(local.inventory_path)
    assert second.returncode == 0, second.output[-3000:]
    assert len(labelled(api)) == 1 and stranger.instance_id in api.instances
    for secret in (*local.secrets(), VAST_KEY):
        assert secret not in first.output + second.output + checked.output + audit
