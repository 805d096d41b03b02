# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The small fleets of the collection's unit tests, written by the rig's one fleet writer.

``CORE_*`` is the fleet the core's tests load (two self-hosted recipes, a commercial route, a
legacy server); ``PLUGIN_*`` is the larger one the plugins' tests render (a pod with a seeded
public port, an IPv6 box, two servers of one model). Secrets are random per session.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Models, Probe
from rig.fleet_files import FleetSecrets, fleet_section, recipe, route, strong_secret, write_fleet

KEYS = FleetSecrets()
SALT, FLEET_KEY, SHARED_BEARER = KEYS.salt, KEYS.fleet_key, KEYS.shared_bearer
LEGACY = ("198.51.100.7", 8000)
KNOWN, OTHER_KNOWN, LEGACY_BOX = "203.0.113.10", "203.0.113.11", LEGACY[0]
# What a pass's probe finds of a server: serving its model, or not answering.
SERVING = Probe(True, Models.LISTS)
DOWN = Probe(False, Models.SKIPPED, "connection refused")

CORE_CONFIG: dict[str, Any] = {"fleet": fleet_section(KEYS, {
    "203.0.113.10": [["gemma", 8001], ["qwen", 8002]],
    "198.51.100.7": [["gemma", 8000]],
}, legacy=[LEGACY])}

CORE_MODELS: dict[str, Any] = {"models": [
    recipe("gemma", "google/gemma", args=["--reasoning-parser", "gemma"], max_model_len=32768,
           vram_gb=18, disk_gb=60),
    recipe("qwen", "Qwen/Qwen3-8B", served_model_name="qwen-served",
           args="--tool-call-parser 'hermes x'"),
    route("gpt", "openai/gpt-4o-mini"),
]}

# The core's fleet with qwen on a second box: a model on more than one box, as a rollout
# crosses them (the turns' and the rollout rows' tests).
ROLLOUT_CONFIG: dict[str, Any] = {"fleet": fleet_section(KEYS, {
    KNOWN: [["gemma", 8001], ["qwen", 8002]],
    OTHER_KNOWN: [["qwen", 8001]],
    LEGACY_BOX: [["gemma", 8000]],
}, legacy=[LEGACY])}

VAST_KEY = "vast-key-" + "x" * 32

PLUGIN_SECRETS = {"fleet_key": FLEET_KEY, "salt": SALT, "selfhost": SHARED_BEARER,
                  "master_key": KEYS.master_key, "admin_token": KEYS.admin_token,
                  "vast_key": strong_secret("vast-")}

PLUGIN_CONFIG: dict[str, Any] = {
    "fleet": fleet_section(KEYS, {
        "203.0.113.10": [["gemma4-26b", 8001], ["qwen3-8b", 8002]],
        "203.0.113.11": [["qwen3-8b", 8001], ["qwen3-8b", 8002, "qwen3-8b-b"]],
        "198.51.100.7": [["gemma4-26b", 8000]],
        "pod-abc123": [["gemma4-26b", 8001, "gemma", 40001]],
        "2001:db8::5": [["qwen3-8b", 8003]],
    }, legacy=[LEGACY]),
    "litellm": {"url": "http://127.0.0.1:4000", "master_key": KEYS.master_key},
    "admin": {"token": KEYS.admin_token},
}

PLUGIN_MODELS: dict[str, Any] = {"models": [
    recipe("gemma4-26b", "google/gemma-4-26b-it", args=["--reasoning-parser", "gemma"],
           max_model_len=32768, vram_gb=18, disk_gb=60),
    recipe("qwen3-8b", "Qwen/Qwen3-8B", served_model_name="qwen-served",
           args="--enable-auto-tool-choice --tool-call-parser hermes"),
    route("gpt-4o-mini", "openai/gpt-4o-mini"),
]}


def write_pair(folder: Path, config: dict[str, Any] | None = None,
               models: dict[str, Any] | None = None, *, raw_config: str | None = None,
               raw_models: str | None = None) -> tuple[str, str]:
    """Write the core's pair (by default its base fleet) and return their paths."""
    config_text = raw_config if raw_config is not None else (
        CORE_CONFIG if config is None else config)
    models_text = raw_models if raw_models is not None else (
        CORE_MODELS if models is None else models)
    return write_fleet(folder, config_text, models_text).paths()


def base_config() -> dict[str, Any]:
    return copy.deepcopy(CORE_CONFIG)


def base_models() -> dict[str, Any]:
    return copy.deepcopy(CORE_MODELS)


def rollout_pair(folder: Path) -> tuple[str, str]:
    """Write :data:`ROLLOUT_CONFIG`'s pair (the core's models) and return their paths."""
    return write_pair(folder, ROLLOUT_CONFIG)


def pooled(change: Any = None, **pool_changes: Any) -> dict[str, Any]:
    """The core's config plus one Vast pool ``chat`` serving gemma and qwen, and a budget;
    ``pool_changes`` replace the pool's keys, ``change`` edits the whole config."""
    config = base_config()
    config["providers"] = {"vast": {"api_key": VAST_KEY, "url": "http://127.0.0.1:9"}}
    pool = {"provider": "vast",
            "offer": {"gpu_names": ["RTX 4090"], "num_gpus": 1, "min_gpu_ram_gb": 24,
                      "disk_gb": 80, "max_usd_per_hour": 0.6},
            "boxes": {"min": 1, "max": 4},
            "serve": [["gemma", 8001], ["qwen", 8002]]}
    pool.update(pool_changes)
    config["pools"] = {"chat": pool}
    config["budget"] = {"max_usd_per_hour": 5.0}
    if change:
        change(config)
    return config
