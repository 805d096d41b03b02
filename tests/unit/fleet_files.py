"""Builders of small config.yaml / models.yaml pairs for the core's tests."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

SALT = "unit-test-salt-7f3a"
FLEET_KEY = "unit-test-fleet-key-91c2"
SHARED_BEARER = "unit-test-shared-bearer-55d1"

BASE_CONFIG = {
    "fleet": {
        "key": FLEET_KEY,
        "vllm_api_salt": SALT,
        "selfhost_api_key": SHARED_BEARER,
        "legacy_servers": [["198.51.100.7", 8000]],
        "hosts": {
            "203.0.113.10": [["gemma", 8001], ["qwen", 8002]],
            "198.51.100.7": [["gemma", 8000]],
        },
    },
}

BASE_MODELS = {
    "models": [
        {"model_name": "gemma", "litellm_params": {"model": "hosted_vllm/gemma"},
         "model_info": {"self_hosted": True, "vllm": {
             "model": "google/gemma", "args": ["--reasoning-parser", "gemma"],
             "max_model_len": 32768, "vram_gb": 18, "disk_gb": 60}}},
        {"model_name": "qwen", "litellm_params": {"model": "hosted_vllm/qwen-served"},
         "model_info": {"self_hosted": True, "vllm": {
             "model": "Qwen/Qwen3-8B", "served_model_name": "qwen-served",
             "args": "--tool-call-parser 'hermes x'"}}},
        {"model_name": "gpt", "litellm_params": {"model": "openai/gpt-4o-mini"},
         "model_info": {"self_hosted": False}},
    ],
}


def write_pair(folder: Path, config=None, models=None, *, raw_config: str | None = None,
               raw_models: str | None = None) -> tuple[str, str]:
    """Write the pair (defaults: the base fleet) and return their paths."""
    config_path, models_path = folder / "config.yaml", folder / "models.yaml"
    config_path.write_text(raw_config if raw_config is not None
                           else yaml.safe_dump(BASE_CONFIG if config is None else config,
                                          sort_keys=False))
    models_path.write_text(raw_models if raw_models is not None
                           else yaml.safe_dump(BASE_MODELS if models is None else models,
                                          sort_keys=False))
    return str(config_path), str(models_path)


def base_config():
    return copy.deepcopy(BASE_CONFIG)


def base_models():
    return copy.deepcopy(BASE_MODELS)
