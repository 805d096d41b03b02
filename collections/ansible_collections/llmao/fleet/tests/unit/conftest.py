# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the collection's unit tests: small fleets written to disk, and their secrets.

Every secret has a distinctive value so a test can search any output for all of them.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.plugins.loader import init_plugin_loader

SECRETS = {
    "fleet_key": "unit-fleet-key-4b1d9e",
    "salt": "unit-vllm-salt-c07a55",
    "selfhost": "unit-shared-bearer-e9f201",
    "master_key": "sk-unit-litellm-master-77aa",
    "admin_token": "unit-admin-token-3c3c3c",
    "vast_key": "unit-vast-api-key-0d0d",
}

CONFIG: dict[str, Any] = {
    "fleet": {
        "key": SECRETS["fleet_key"],
        "vllm_api_salt": SECRETS["salt"],
        "selfhost_api_key": SECRETS["selfhost"],
        "legacy_servers": [["198.51.100.7", 8000]],
        "hosts": {
            "203.0.113.10": [["gemma4-26b", 8001], ["qwen3-8b", 8002]],
            "203.0.113.11": [["qwen3-8b", 8001], ["qwen3-8b", 8002, "qwen3-8b-b"]],
            "198.51.100.7": [["gemma4-26b", 8000]],
            "pod-abc123": [["gemma4-26b", 8001, "gemma", 40001]],
            "2001:db8::5": [["qwen3-8b", 8003]],
        },
    },
    "litellm": {"url": "http://127.0.0.1:4000", "master_key": SECRETS["master_key"]},
    "admin": {"token": SECRETS["admin_token"]},
}

MODELS: dict[str, Any] = {
    "models": [
        {"model_name": "gemma4-26b", "litellm_params": {"model": "hosted_vllm/gemma4-26b"},
         "model_info": {"self_hosted": True, "vllm": {
             "model": "google/gemma-4-26b-it", "args": ["--reasoning-parser", "gemma"],
             "max_model_len": 32768, "vram_gb": 18, "disk_gb": 60}}},
        {"model_name": "qwen3-8b", "litellm_params": {"model": "hosted_vllm/qwen-served"},
         "model_info": {"self_hosted": True, "vllm": {
             "model": "Qwen/Qwen3-8B", "served_model_name": "qwen-served",
             "args": "--enable-auto-tool-choice --tool-call-parser hermes"}}},
        {"model_name": "gpt-4o-mini", "litellm_params": {"model": "openai/gpt-4o-mini"},
         "model_info": {"self_hosted": False}},
    ],
}


def fleet_config() -> dict[str, Any]:
    """A fresh copy of the base config, for a test to change."""
    return copy.deepcopy(CONFIG)


@pytest.fixture
def secrets() -> dict[str, str]:
    return dict(SECRETS)


@pytest.fixture
def base_config() -> dict[str, Any]:
    return fleet_config()


@pytest.fixture
def write_fleet(tmp_path: Path) -> Callable[..., tuple[str, str]]:
    """``write_fleet(config=None, models=None)`` writes the pair and returns their paths."""

    def write(config: dict[str, Any] | None = None,
              models: dict[str, Any] | None = None) -> tuple[str, str]:
        config_path, models_path = tmp_path / "config.yaml", tmp_path / "models.yaml"
        config_path.write_text(yaml.safe_dump(CONFIG if config is None else config))
        models_path.write_text(yaml.safe_dump(MODELS if models is None else models))
        return str(config_path), str(models_path)

    return write


def collections_root() -> str:
    """The folder holding ``ansible_collections``, wherever the checkout is."""
    here = Path(__file__).resolve()
    return str(next(p.parent for p in here.parents if p.name == "ansible_collections"))


@pytest.fixture(scope="session")
def ansible_plugins() -> None:
    """Ansible's collection loader over this checkout, as the ansible CLIs install it.

    The tests import the core as plain packages first, and the loader only records a
    collection's metadata when it imports the collection package itself: drop the three
    package entries (they hold no code, every module under them stays loaded) so the
    loader imports them again its way.
    """
    for name in ("ansible_collections.llmao.fleet", "ansible_collections.llmao",
                 "ansible_collections"):
        sys.modules.pop(name, None)
    init_plugin_loader([collections_root()])
