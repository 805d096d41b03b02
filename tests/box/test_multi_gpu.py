"""Boxes of 1, 2, 4 and 8 cards under a real supervisord: each vLLM runs on the cards it was given.

The nvidia-smi double describes the cards; the box program places the servers and writes
their programs; supervisord starts the vLLM doubles, which say on a test-only endpoint which
cards (CUDA_VISIBLE_DEVICES) and parallel size they were started with. On the box of four, a
re-run restarts nothing and a new placement restarts only the servers whose cards changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rig.boxes import Box
from tests.box.probes import get, wait_for

pytestmark = pytest.mark.docker

PROGRAM = Path(__file__).resolve().parents[2] / "roles" / "vllm_box" / "files" / "install_set.py"
BOX_DIR = "/opt/llmao"
CARD_MIB = 24576


def card_file(count: int) -> dict:
    return {"gpus": [{"total_mib": CARD_MIB, "free_mib": CARD_MIB - 300, "name": "Stub L4"}
                     for _ in range(count)]}


def server(index: int, **recipe: object) -> dict:
    return {"name": f"model-{index}", "model": f"org/model-{index}",
            "served_model_name": f"served-{index}", "host": "multi-gpu-box",
            "port": 8001 + index, "api_key": f"sk-vllm-multi-gpu-test-{index}", "args": [],
            **recipe}


def apply(box: Box, *servers: dict, revision: str = "rev-1") -> dict:
    """Run the box program on this payload in the box; its --json result."""
    doc = {"host": "multi-gpu-box", "revision": revision, "servers": list(servers)}
    box.put_file(f"{BOX_DIR}/assignment.json", json.dumps(doc), 0o600)
    done = box.exec(["python3", f"{BOX_DIR}/install_set.py", "--json",
                     "--payload", f"{BOX_DIR}/assignment.json"], check=False)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def devices(box: Box, port: int) -> dict:
    """What the vLLM on this listen port says it was given, once it answers."""
    url = f"{box.url(port)}/stub/devices"

    def answers() -> bool:
        try:
            return get(url)[0] == 200
        except OSError:
            return False

    wait_for(url, answers)
    return json.loads(get(url)[1])


def pids(box: Box, count: int) -> dict[str, str]:
    return {f"model-{i}": box.supervisorctl("pid", f"model-{i}").stdout.decode().strip()
            for i in range(count)}


# cards -> the recipes of its servers, and the CUDA_VISIBLE_DEVICES and tensor parallel size
# each must be started with
LAYOUTS = {
    1: ([{"vram_gb": 8}, {"vram_gb": 8}], [(None, 1), (None, 1)]),
    2: ([{"gpus": 2, "vram_gb": 12}, {"vram_gb": 4}], [("0,1", 2), ("0", 1)]),
    8: ([{"gpus": 4, "vram_gb": 20}, {"gpus": 2, "args": ["-tp", "1", "-pp", "2"]},
         {"gpus": 2, "vram_gb": 20}], [("0,1,2,3", 4), ("4,5", 1), ("6,7", 2)]),
}


@pytest.mark.parametrize("count", sorted(LAYOUTS), ids=[f"{n}-cards" for n in sorted(LAYOUTS)])
def test_each_server_runs_on_the_cards_it_was_placed_on(box_factory, count):
    recipes, expected = LAYOUTS[count]
    box = box_factory(f"multi-gpu-{count}", gpu=card_file(count))
    box.put_file(f"{BOX_DIR}/install_set.py", PROGRAM.read_bytes())
    apply(box, *(server(i, **recipe) for i, recipe in enumerate(recipes)))
    for index, (visible, tensor) in enumerate(expected):
        given = devices(box, 8001 + index)
        assert (given["cuda_visible_devices"], given["tensor_parallel_size"]) == (visible, tensor)
        assert given["cuda_device_order"] == (None if count == 1 else "PCI_BUS_ID")
    record = json.loads(box.read_file("/data/llmao/applied.json"))
    assert [card["index"] for card in record["cards"]] == list(range(count))


def test_a_rerun_restarts_nothing_and_a_new_placement_only_the_moved(box_factory):
    box = box_factory("multi-gpu-4", gpu=card_file(4))
    box.put_file(f"{BOX_DIR}/install_set.py", PROGRAM.read_bytes())
    pinned = {"gpu_memory_utilization": 0.3}
    first = (server(0, gpus=2, **pinned), server(1, **pinned), server(2, **pinned))
    apply(box, *first)
    assert [devices(box, 8001 + i)["cuda_visible_devices"] for i in range(3)] == [
        "0,1", "2", "3"]
    started = pids(box, 3)

    again = apply(box, *first)
    assert not again["changed"] and pids(box, 3) == started

    # model-1 now spans two cards: it takes GPU 2 and 3, and model-2 moves beside model-0
    moved = apply(box, server(0, gpus=2, **pinned), server(1, gpus=2, **pinned),
                  server(2, **pinned), revision="rev-2")
    assert {p["name"]: p["supervisord"] for p in moved["programs"]} == {
        "model-0": None, "model-1": "updated", "model-2": "updated"}
    assert [devices(box, 8001 + i)["cuda_visible_devices"] for i in range(3)] == [
        "0,1", "2,3", "0"]
    now = pids(box, 3)
    assert now["model-0"] == started["model-0"]
    assert now["model-1"] != started["model-1"] and now["model-2"] != started["model-2"]
