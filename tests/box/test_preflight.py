"""A box whose card is too small: the box program and the role refuse it alike, writing nothing.

The nvidia-smi double reports 2 GiB free while the assignment needs 3 + 2 GiB, so the
program's real preflight runs against what the box says about itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rig.boxes import Box

pytestmark = pytest.mark.docker

PROGRAM = Path(__file__).resolve().parents[2] / "roles" / "vllm_box" / "files" / "install_set.py"
BOX = "box-small-card"
SMALL_CARD = {"gpus": [{"total_mib": 8192, "free_mib": 2048, "name": "small card"}]}
SHORTFALL = ("GPU 0: tiny-chat 3 GiB + tiny-code 2 GiB = 5 GiB of vram_gb needed, "
             "2.0 GiB free")
PROGRAM_FILES = "/etc/supervisor/conf.d/llmao-*.conf"
RECORD = "/data/llmao/applied.json"
BOX_DIR = "/opt/llmao"


def assert_nothing_written(box: Box) -> None:
    listing = box.exec(["sh", "-c", f"ls {PROGRAM_FILES} {RECORD} 2>/dev/null; true"])
    assert listing.stdout.decode().strip() == ""
    assert box.supervisorctl("status").stdout.decode().strip() == ""


def failed_message(json_output: str, host: str) -> str:
    """The msg of the one task that failed for ``host`` in ansible.posix.json's report."""
    report = json.loads(json_output)
    failures = [task["hosts"][host]["msg"] for play in report["plays"] for task in play["tasks"]
                if task["hosts"].get(host, {}).get("failed")]
    assert len(failures) == 1, failures
    return failures[0]


def test_the_program_and_the_role_refuse_alike_and_write_nothing(box_factory, write_fleet,
                                                                 provision):
    fleet = write_fleet({BOX: [["tiny-chat", 8001], ["tiny-code", 8002]]})
    box = box_factory(BOX, gpu=SMALL_CARD)

    box.put_file(f"{BOX_DIR}/install_set.py", PROGRAM.read_bytes())
    box.put_file(f"{BOX_DIR}/assignment.json", fleet.fleet.assignment(BOX).body, 0o600)
    pulled = box.exec(["python3", f"{BOX_DIR}/install_set.py",
                       "--payload", f"{BOX_DIR}/assignment.json"], check=False)
    assert pulled.returncode == 1
    program_says = pulled.stderr.decode().strip()
    assert program_says.startswith("install_set: the assignment does not fit this box; "
                                   "nothing written:")
    assert SHORTFALL in program_says
    assert_nothing_written(box)

    pushed = provision(fleet, {BOX: box}, "-e", "llmao_rolling=false",
                       env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    assert pushed.returncode != 0
    assert f"install_set: {failed_message(pushed.stdout, BOX)}" == program_says
    assert_nothing_written(box)
    for secret in fleet.secrets():
        assert secret not in pushed.stdout + pushed.stderr
