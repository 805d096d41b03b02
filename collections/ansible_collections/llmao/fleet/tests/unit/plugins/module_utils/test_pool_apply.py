"""What a pool pass reads: the pass's plan as box signals and saturated models, the listing's
labelled instances as members (nothing else), what a box must have, and the memory file."""

from __future__ import annotations

from types import MappingProxyType

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import HostRow
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    ListedBox,
    index_listings,
)
from ansible_collections.llmao.fleet.plugins.module_utils.pool_apply import (
    load_memory,
    members_of,
    save_memory,
    signals_of,
)
from ansible_collections.llmao.fleet.plugins.module_utils.pool_config import (
    Offer,
    Pool,
    instance_label,
)
from ansible_collections.llmao.fleet.plugins.module_utils.pool_plan import (
    BoxSignal,
    Member,
    PoolMemory,
)
from ansible_collections.llmao.fleet.plugins.module_utils.server_load import ServerLoad
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import ServerMetrics

POOL = Pool("chat", "vast", Offer(("RTX 4090",), 0.6), 1, 3,
            (HostRow(0, "gemma", 8001, "gemma"),), "img")


def server(box, state, running, saturated=False, model="gemma"):
    load = ServerLoad(metrics=None if running is None else ServerMetrics(
        requests_running=running), saturated=saturated)
    return {"id": f"llmao:{box}:8001:{model}", "box": box, "model_name": model,
            "state": state, **load.record()}


def test_the_plan_gives_each_box_its_stalled_flag_and_requests_and_the_saturated_models():
    plan = {"servers": [server("chat-aaaaaaaa", "Healthy", 2),
                        server("chat-aaaaaaaa", "Healthy", 1, model="qwen", saturated=True),
                        server("chat-bbbbbbbb", "Stalled", None),
                        "garbage"],
            "models": {"gemma": {"saturated": True}, "qwen": {"saturated": None}}}
    signals, saturated = signals_of(plan)
    assert signals == {"chat-aaaaaaaa": BoxSignal(False, 3),
                       "chat-bbbbbbbb": BoxSignal(True, None)}
    assert saturated == {"gemma", "qwen"}
    assert signals_of({}) == ({}, set())


def test_members_are_only_the_pools_labelled_instances_of_its_provider():
    listed = [
        ListedBox("vast", ("101",), "198.51.100.1", price_per_hour=0.4,
                  status="running", tag=instance_label("chat", "chat-aaaaaaaa")),
        ListedBox("vast", ("102",), "198.51.100.2", status="exited",
                  tag=instance_label("chat", "chat-bbbbbbbb")),
        ListedBox("vast", ("103",), "198.51.100.3", tag="chat"),
        ListedBox("vast", ("104",), "198.51.100.4", tag=instance_label("other", "other-aaaaaaaa")),
        ListedBox("runpod", ("pod9",), "", tag=instance_label("chat", "chat-cccccccc")),
    ]
    members = members_of(POOL, index_listings(["vast", "runpod"], listed, {}))
    assert members == (Member("chat-aaaaaaaa", "101", "running", False, 0.4),
                       Member("chat-bbbbbbbb", "102", "exited", True, None))


def test_the_memory_file_round_trips_and_a_broken_one_is_no_memory(tmp_path):
    path = str(tmp_path / "pools.json")
    memory = {"chat": PoolMemory(2, 5.0, MappingProxyType({"chat-aaaaaaaa": (1.0, 0.4)}))}
    save_memory(path, memory)
    assert load_memory(path, ["chat", "new"]) == {"chat": memory["chat"], "new": PoolMemory()}
    (tmp_path / "pools.json").write_text("{not json")
    assert load_memory(path, ["chat"]) == {"chat": PoolMemory()}
    assert load_memory(str(tmp_path / "missing.json"), ["chat"]) == {"chat": PoolMemory()}
