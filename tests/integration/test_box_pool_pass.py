"""Pool passes (``pool_apply``, the core of ``llmao.fleet.box_pool``) with the real llmao-server
(2 workers) and the fake Vast rent API: a rent enrolls its box in the pool and creates the
instance with the token and llmao's label; the next pass does not double it; an interrupted
instance is replaced (rent first) and returned, its binding released; an instance without the
label is never touched; a 429 backs the pool off; a timed-out create is never doubled; a pool
asking past the budget rents what fits and says why not more; every
rent and return is audited, no secret in any line."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import LlmaoAdmin
from ansible_collections.llmao.fleet.plugins.module_utils.pool_apply import (
    Hands,
    apply_pass,
    load_memory,
    observe,
    plan_pass,
    save_memory,
)
from ansible_collections.llmao.fleet.plugins.module_utils.pool_config import read_label
from rig.fake_litellm import FakeLiteLLM
from rig.rent_api import RentApi, serve_rent_api, vast_offer
from tests.llmao_process import start_llmao_server
from tests.server.fleet_pair import FLEET_KEY, MASTER_KEY, SECRETS, config, write_pair

pytestmark = pytest.mark.slow
VAST_KEY = "vast-rent-key-" + "v" * 30


class PoolRig:
    """llmao-server, a contract LiteLLM and the fake Vast, with a one-pool fleet."""

    def __init__(self, folder: Path, api: RentApi) -> None:
        self.api, self.folder = api, folder
        self.litellm = FakeLiteLLM(("127.0.0.1", 0), MASTER_KEY)
        threading.Thread(target=self.litellm.serve_forever, daemon=True).start()
        document = config()
        document["server"] = {"state": str(folder / "state.sqlite3")}
        self.paths = write_pair(folder / "fleet", document)
        self.server = start_llmao_server(Path(self.paths[0]), Path(self.paths[1]), folder)
        document["server"]["url"] = self.server.url
        document["litellm"]["url"] = f"http://127.0.0.1:{self.litellm.server_address[1]}"
        document["providers"] = {"vast": {"api_key": VAST_KEY, "url": api.vast_url}}
        document["pools"] = {"chat": {
            "provider": "vast", "boxes": {"min": 1, "max": 2}, "serve": [["gemma", 8001]],
            "env": {"DATA_DIRECTORY": "/workspace"}, "onstart": "bash /opt/llmao/start.sh",
            "offer": {"gpu_names": ["RTX 4090"], "max_usd_per_hour": 0.6, "disk_gb": 60}}}
        document["budget"] = {"max_usd_per_hour": 1.0}
        self.document = document
        self.paths = write_pair(folder / "fleet", document)
        self.server.reload()
        self.fleet = load_fleet(*self.paths)
        self.memory_path = str(folder / "pools.json")
        self.audit: list[dict] = []

    def resize(self, low: int, high: int) -> None:
        """Ask the pool for more boxes (the budget stays): a reload, as an operator's edit."""
        self.document["pools"]["chat"]["boxes"] = {"min": low, "max": high}
        self.paths = write_pair(self.folder / "fleet", self.document)
        self.server.reload()
        self.fleet = load_fleet(*self.paths)

    def run_pass(self, now: float) -> list[str]:
        memory = load_memory(self.memory_path, self.fleet.settings.pools)
        done = observe(self.fleet, {}, memory, 5.0, now=now)
        plan_pass(done, 5.0)
        hands = Hands(self.fleet, LlmaoAdmin.from_settings(self.fleet.settings, 5.0),
                      LiteLLM.from_settings(self.fleet.settings, 5.0), 2.0, self.audit.append)
        save_memory(self.memory_path, apply_pass(done, hands))
        return done.lines

    def stop(self) -> None:
        self.server.stop()
        self.litellm.shutdown()
        self.litellm.server_close()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[PoolRig]:
    with serve_rent_api() as api:
        api.vast_offers = [vast_offer(21, "RTX 4090", 0.45), vast_offer(22, "RTX 4090", 0.5)]
        served = PoolRig(tmp_path, api)
        try:
            yield served
        finally:
            served.stop()


def pool_instances(api: RentApi) -> dict[str, str]:
    return {i.instance_id: read_label(i.label)[1] for i in api.instances.values()
            if read_label(i.label)}


def test_a_pool_rents_replaces_and_returns_only_its_own_boxes(rig):
    stranger = rig.api.add_unlabelled("vast")
    rig.run_pass(1000.0)
    ((first_id, first_box),) = pool_instances(rig.api).items()
    created = rig.api.instances[first_id]
    assert created.env["LLMAO_POOL_BOX"] == first_box and created.env["FLEET_KEY"] == FLEET_KEY
    assert created.env["LLMAO_BOOTSTRAP_TOKEN"] and created.price == 0.45
    assert created.env["DATA_DIRECTORY"] == "/workspace"
    assert created.onstart == "bash /opt/llmao/start.sh"
    assert [entry["action"] for entry in rig.audit] == ["rent"]

    rig.run_pass(1030.0)                       # listed now: never doubled
    assert list(pool_instances(rig.api)) == [first_id]

    rig.api.interrupt(first_id)
    lines = rig.run_pass(1060.0)
    assert first_id not in rig.api.instances, lines
    ((second_id, second_box),) = pool_instances(rig.api).items()
    assert second_box != first_box and rig.api.instances[second_id].price == 0.5
    assert [entry["action"] for entry in rig.audit] == ["rent", "rent", "return"]
    assert stranger.instance_id in rig.api.instances
    assert not any(path.endswith(f"/{stranger.instance_id}/")
                   for method, path in rig.api.calls if method == "DELETE")
    text = json.dumps(rig.audit) + "".join(lines)
    assert not any(secret in text for secret in (*SECRETS, VAST_KEY,
                                                 created.env["LLMAO_BOOTSTRAP_TOKEN"]))


def test_a_throttled_rent_backs_off_and_a_timed_out_create_is_not_doubled(rig):
    rig.api.throttled_creates = [120]
    rig.run_pass(1000.0)
    assert not rig.api.instances and rig.audit[-1]["action"] == "rent_failed"
    rig.run_pass(1060.0)                       # the provider asked for 120 s
    assert not rig.api.instances
    rig.api.hanging_creates = [3.0]
    rig.run_pass(1130.0)                       # made, but the answer never came
    assert len(pool_instances(rig.api)) == 1 and rig.audit[-1]["action"] == "rent_failed"
    rig.run_pass(1160.0)
    rig.run_pass(1190.0)
    assert len(pool_instances(rig.api)) == 1


def test_a_pool_asking_past_the_budget_rents_what_fits_and_says_why_not_more(rig):
    rig.api.vast_offers.append(vast_offer(23, "RTX 4090", 0.55))
    rig.resize(3, 3)
    lines = rig.run_pass(1000.0) + rig.run_pass(1030.0)
    prices = sorted(rig.api.instances[i].price for i in pool_instances(rig.api))
    assert prices == [0.45, 0.5] and sum(prices) <= rig.fleet.settings.budget.max_usd_per_hour
    assert any("past budget.max_usd_per_hour 1" in line for line in lines), lines
