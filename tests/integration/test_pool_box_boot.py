"""A pool's rent boots a real box: the fake Vast (RunPod) starts a local box that runs Vast's
(RunPod's) ``provision.sh`` with the env the create gave; the box presents its bootstrap token
on its first fetch (``fleet.binding: enrolled``: nothing else could bind the name), is bound
and confirmed at once, and serves at the address the listing gives; when the provider
interrupts it, its servers stop. The real llmao-server (2 workers), the real box program.

Until llmao-server serves a pool member its pool's rows (the identity work's side of pools),
the rented name is also a ``fleet.hosts`` key here, so the server has rows to serve it."""

from __future__ import annotations

import time
import urllib.request
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
)
from llmao_server.store import open_store
from rig.rent_api import runpod_gpu, serve_rent_api, vast_offer
from tests.llmao_process import start_llmao_server
from tests.pool_boxes import RentedBoxes
from tests.server.fleet_pair import MASTER_KEY, config, write_pair

pytestmark = pytest.mark.slow
SUFFIX = "b00tb0x1"
BOX = f"chat-{SUFFIX}"


@pytest.fixture(params=["vast", "runpod"])
def booted(request, tmp_path: Path) -> Iterator[tuple]:
    provider = request.param
    boxes = RentedBoxes(tmp_path / "boxes")
    with serve_rent_api() as api:
        api.vast_offers = [vast_offer(41, "RTX 4090", 0.4)]
        api.runpod_gpus = [runpod_gpu("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.44, 0.31)]
        api.starter, api.stopper = boxes.start, boxes.stop
        document = config(hosts={BOX: [["gemma", 8001]]}, legacy_servers=None,
                          binding="enrolled")
        document["server"] = {"state": str(tmp_path / "state.sqlite3")}
        url = api.vast_url if provider == "vast" else api.runpod_url
        document["providers"] = {provider: {"api_key": "rent-key-" + "q" * 30, "url": url}}
        document["pools"] = {"chat": {"provider": provider, "boxes": {"min": 1, "max": 1},
                                      "serve": [["gemma", 8001]],
                                      "offer": {"gpu_names": ["RTX 4090"],
                                                "max_usd_per_hour": 0.5}}}
        document["budget"] = {"max_usd_per_hour": 1.0}
        paths = write_pair(tmp_path / "fleet", document)
        server = start_llmao_server(Path(paths[0]), Path(paths[1]), tmp_path, workers=2)
        document["server"]["url"] = server.url
        paths = write_pair(tmp_path / "fleet", document)
        try:
            yield api, boxes, load_fleet(*paths), tmp_path
        finally:
            boxes.stop_all()
            server.stop()


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def test_a_rented_box_boots_with_its_token_is_bound_and_stops_when_interrupted(booted):
    api, boxes, fleet, folder = booted
    done = observe(fleet, {}, load_memory(str(folder / "pools.json"), ["chat"]), 5.0)
    plan_pass(done, 5.0)
    hands = Hands(fleet, LlmaoAdmin.from_settings(fleet.settings, 5.0),
                  LiteLLM("http://127.0.0.1:9", MASTER_KEY), 5.0, lambda entry: None,
                  names=lambda: SUFFIX)
    apply_pass(done, hands)
    (instance,) = api.instances.values()
    deadline = time.monotonic() + 120
    health = f"http://{instance.address}:8001/health"
    while not answers(health) and boxes.alive(instance.instance_id) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert answers(health), (folder / "boxes" / instance.instance_id /
                             "supervisord.out").read_text()[-2000:]
    boot = boxes.boots[instance.instance_id]
    if instance.provider == "vast":  # Vast's script ends; RunPod's became the supervisord
        assert boot is not None and boot.returncode == 0, (boot.stdout + boot.stderr)[-2000:]
        assert instance.env["LLMAO_BOOTSTRAP_TOKEN"] not in boot.stdout + boot.stderr
    output = (folder / "boxes" / instance.instance_id / "supervisord.out").read_text()
    assert instance.env["LLMAO_BOOTSTRAP_TOKEN"] not in output
    store = open_store(str(folder / "state.sqlite3"))
    try:
        binding = {b.box: b for b in store.bindings_since(0)}[BOX]
    finally:
        store.close()
    assert binding.confirmed and binding.pool == "chat"
    api.interrupt(instance.instance_id)
    assert not answers(health)
