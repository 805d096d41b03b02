"""A small fleet of the box tests on disk: two recipes the stubs serve, and its secrets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet

FLEET_KEY = "box-tests-fleet-key-5e1d"
SALT = "box-tests-salt-c07a"

MODELS = {"models": [
    {"model_name": "tiny-chat", "litellm_params": {"model": "hosted_vllm/tiny-chat"},
     "model_info": {"self_hosted": True, "vllm": {
         "model": "example/tiny-chat-1b", "args": ["--enable-prefix-caching"],
         "max_model_len": 8192, "vram_gb": 3, "disk_gb": 1}}},
    {"model_name": "tiny-code", "litellm_params": {"model": "hosted_vllm/tiny-code-instruct"},
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


def write_fleet_files(folder: Path, hosts: Mapping[str, list],
                      sections: Mapping[str, dict] | None = None) -> FleetFiles:
    """config.yaml (the fleet section for ``hosts``, plus ``sections``) and models.yaml."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"fleet": {"key": FLEET_KEY, "vllm_api_salt": SALT, "hosts": dict(hosts)},
              **(sections or {})}
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (folder / "models.yaml").write_text(yaml.safe_dump(MODELS, sort_keys=False))
    return FleetFiles(folder / "config.yaml", folder / "models.yaml",
                      load_fleet(str(folder / "config.yaml"), str(folder / "models.yaml")))
