"""A small fleet of the box tests on disk: two recipes the stubs serve, and its secrets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from rig.fleet_files import FleetSecrets, fleet_section, recipe, write_fleet

KEYS = FleetSecrets()
FLEET_KEY = KEYS.fleet_key

MODELS = {"models": [
    recipe("tiny-chat", "example/tiny-chat-1b", args=["--enable-prefix-caching"],
           max_model_len=8192, vram_gb=3, disk_gb=1),
    recipe("tiny-code", "example/tiny-code-1b", served_model_name="tiny-code-instruct",
           args="--tool-call-parser hermes --enable-auto-tool-choice", max_model_len=4096,
           vram_gb=2, disk_gb=1),
]}


@dataclass(frozen=True)
class FleetFiles:
    """A fleet written to disk, loaded by the core as every face loads it."""

    config: Path
    models: Path
    fleet: Fleet

    def secrets(self) -> list[str]:
        settings = self.fleet.settings
        return [settings.fleet.key, settings.fleet.vllm_api_salt,
                *(server.api_key for server in self.fleet.servers())]


def write_fleet_files(folder: Path, hosts: Mapping[str, list],
                      sections: Mapping[str, dict] | None = None) -> FleetFiles:
    """config.yaml (the fleet section for ``hosts``, plus ``sections``) and models.yaml."""
    written = write_fleet(folder, {"fleet": fleet_section(KEYS, hosts), **(sections or {})},
                          MODELS)
    return FleetFiles(written.config_path, written.models_path, written.load())
