"""The nvidia-smi stub, run as a program: the outputs and exit codes the box program reads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rig import REPO_ROOT

QUERY = ["--query-gpu=memory.total,memory.free", "--format=csv,noheader,nounits"]


def nvidia_smi(tmp_path, args: list[str], config: dict | None = None):
    path = tmp_path / "gpu.json"
    if config is not None:
        path.write_text(json.dumps(config))
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "rig" / "stub_nvidia_smi.py"), *args],
        env={"STUB_NVIDIA_SMI": str(path)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_default_is_one_24_gib_card(tmp_path):
    result = nvidia_smi(tmp_path, QUERY)
    assert (result.returncode, result.stdout) == (0, "24576, 24000\n")


def test_one_line_per_gpu_in_mib(tmp_path):
    config = {
        "gpus": [{"total_mib": 81920, "free_mib": 80000}, {"total_mib": 24576, "free_mib": 100}]
    }
    result = nvidia_smi(tmp_path, QUERY, config)
    assert result.stdout.splitlines() == ["81920, 80000", "24576, 100"]


def test_header_and_units_unless_turned_off(tmp_path):
    result = nvidia_smi(tmp_path, ["--query-gpu", "index,memory.used", "--format", "csv"])
    assert result.stdout.splitlines() == ["index, memory.used [MiB]", "0, 576 MiB"]


def test_list_and_plain_table(tmp_path):
    config = {"gpus": [{"total_mib": 49152, "free_mib": 49000, "name": "Stub A6000"}]}
    assert nvidia_smi(tmp_path, ["-L"], config).stdout.startswith("GPU 0: Stub A6000 (UUID: ")
    table = nvidia_smi(tmp_path, [], config).stdout
    assert "Stub A6000" in table
    assert "152MiB / 49152MiB" in table


@pytest.mark.parametrize("config", [{"gpus": []}, {"absent": True}], ids=["no-gpus", "absent"])
def test_no_driver_exits_9(tmp_path, config):
    result = nvidia_smi(tmp_path, QUERY, config)
    assert result.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--query-gpu=memory.bogus", "--format=csv"],
        ["--query-gpu=memory.total"],
        ["--query-gpu=memory.total", "--format=json"],
        ["--frobnicate"],
    ],
    ids=["unknown-field", "no-format", "unknown-format", "unknown-flag"],
)
def test_bad_arguments_exit_2(tmp_path, args):
    assert nvidia_smi(tmp_path, args).returncode == 2


@pytest.mark.parametrize(
    "text", ["{not json", '{"gpus": [{"total_mib": 1}]}'], ids=["json", "field"]
)
def test_config_mistakes_are_clear_errors(tmp_path, text):
    (tmp_path / "gpu.json").write_text(text)
    result = nvidia_smi(tmp_path, QUERY)
    assert result.returncode == 1
    assert "gpu.json" in result.stderr


def test_any_number_of_cards_with_their_own_memory_index_uuid_and_name(tmp_path):
    sizes = [81920, 81920, 24576, 49152, 16384, 81920, 24576, 98304]
    config = {"gpus": [{"total_mib": total, "free_mib": total - 512, "name": f"Card {i}"}
                       for i, total in enumerate(sizes)]}
    config["gpus"][3]["uuid"] = "GPU-0badcafe-1111-2222-3333-444455556666"
    result = nvidia_smi(tmp_path, ["--query-gpu=index,uuid,name,memory.total,memory.free",
                                   "--format=csv,noheader,nounits"], config)
    lines = [line.split(", ") for line in result.stdout.splitlines()]
    assert [(int(i), name, int(total), int(free)) for i, _, name, total, free in lines] == [
        (i, f"Card {i}", total, total - 512) for i, total in enumerate(sizes)]
    uuids = [line[1] for line in lines]
    assert uuids[3] == "GPU-0badcafe-1111-2222-3333-444455556666"
    assert len(set(uuids)) == len(sizes) and all(u.startswith("GPU-") for u in uuids)
    again = nvidia_smi(tmp_path, ["--query-gpu=uuid", "--format=csv,noheader"], config)
    assert again.stdout.split() == uuids
