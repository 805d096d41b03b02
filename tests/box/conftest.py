"""Fixtures of the box tests: a small fleet on disk, and the push path run on rig boxes.

The push path runs as an operator runs it: ``ansible-playbook playbooks/provision.yml``
from the repository root, with the fleet as the llmao.fleet.fleet inventory renders it.
A second, static inventory source only says how to reach each container box
(community.docker.docker, the container id), the job an ssh config does for real boxes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import yaml

from rig.boxes import Box
from tests.box.fleet_files import FleetFiles, write_fleet_files

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK_TIMEOUT_S = 300


@pytest.fixture
def write_fleet(tmp_path: Path) -> Callable[[Mapping[str, list]], FleetFiles]:
    """``write_fleet({box: rows})``: config.yaml and models.yaml for these boxes."""
    return lambda hosts: write_fleet_files(tmp_path / "fleet", hosts)


@pytest.fixture
def provision(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``provision(fleet, boxes, *args)``: playbooks/provision.yml on these container boxes."""

    def run(fleet: FleetFiles, boxes: Mapping[str, Box], *args: str,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        inventory = tmp_path / "inventory"
        inventory.mkdir(exist_ok=True)
        (inventory / "fleet.yml").write_text(yaml.safe_dump({
            "plugin": "llmao.fleet.fleet", "config": str(fleet.config),
            "models": str(fleet.models)}))
        (inventory / "containers.yml").write_text(yaml.safe_dump({"all": {"hosts": {
            name: {"ansible_connection": "community.docker.docker",
                   "ansible_host": box.container}
            for name, box in boxes.items()}}}))
        command = [str(BIN / "ansible-playbook"), "playbooks/provision.yml",
                   "-i", str(inventory / "fleet.yml"), "-i", str(inventory / "containers.yml"),
                   "--limit", ",".join(boxes), *args]
        full_env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                    "ANSIBLE_PIPELINING": "true", "ANSIBLE_NOCOLOR": "1",
                    "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"), **(env or {})}
        return subprocess.run(command, cwd=ROOT, env=full_env, text=True, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=PLAYBOOK_TIMEOUT_S, check=False)

    return run
