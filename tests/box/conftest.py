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
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet
from rig.boxes import Box

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK_TIMEOUT_S = 300

FLEET_KEY = "box-tests-fleet-key-5e1d"
SALT = "box-tests-salt-c07a"

MODELS = {"models": [
    {"model_name": "tiny-chat", "litellm_params": {"model": "hosted_vllm/tiny-chat"},
     "model_info": {"self_hosted": True, "vllm": {
         "model": "example/tiny-chat-1b", "args": ["--enable-prefix-caching"],
         "max_model_len": 8192, "vram_gb": 3, "disk_gb": 1}}},
    {"model_name": "tiny-code", "litellm_params": {"model": "hosted_vllm/tiny-code"},
     "model_info": {"self_hosted": True, "vllm": {
         "model": "example/tiny-code-1b", "served_model_name": "tiny-code-instruct",
         "args": "--tool-call-parser hermes --enable-auto-tool-choice",
         "max_model_len": 4096, "vram_gb": 2, "disk_gb": 1}}},
]}


@dataclass(frozen=True)
class FleetFiles:
    """A fleet written to disk, loaded by the core as every face loads it."""

    config: Path
    models: Path
    fleet: Fleet

    def secrets(self) -> list[str]:
        settings = self.fleet.settings
        return [settings.fleet_key, settings.vllm_api_salt,
                *(server.api_key for server in self.fleet.servers())]


@pytest.fixture
def write_fleet(tmp_path: Path) -> Callable[[Mapping[str, list]], FleetFiles]:
    """``write_fleet({box: rows})``: config.yaml and models.yaml for these boxes."""

    def write(hosts: Mapping[str, list]) -> FleetFiles:
        folder = tmp_path / "fleet"
        folder.mkdir(exist_ok=True)
        config = {"fleet": {"key": FLEET_KEY, "vllm_api_salt": SALT, "hosts": dict(hosts)}}
        (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        (folder / "models.yaml").write_text(yaml.safe_dump(MODELS, sort_keys=False))
        return FleetFiles(folder / "config.yaml", folder / "models.yaml",
                          load_fleet(str(folder / "config.yaml"), str(folder / "models.yaml")))

    return write


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
