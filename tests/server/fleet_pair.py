"""A small fleet for the server's tests: its files, its secrets, its boxes.

Every secret is distinct and recognisable, so a test that scans output for
secrets knows exactly what to look for.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

FLEET_KEY = "srv-test-fleet-key-3b9e61"
SALT = "srv-test-salt-81d0c2"
SHARED_BEARER = "srv-test-shared-bearer-c4a7f0"
ADMIN_TOKEN = "srv-test-admin-token-0f6219"
MASTER_KEY = "srv-test-litellm-master-77e1ab"
SECRETS = (FLEET_KEY, SALT, SHARED_BEARER, ADMIN_TOKEN, MASTER_KEY)

KNOWN = "203.0.113.10"
OTHER_KNOWN = "203.0.113.11"
LEGACY = "198.51.100.7"
UNKNOWN = "192.0.2.50"

CONFIG: dict[str, Any] = {
    "fleet": {
        "key": FLEET_KEY,
        "vllm_api_salt": SALT,
        "selfhost_api_key": SHARED_BEARER,
        "legacy_servers": [[LEGACY, 8000]],
        "hosts": {
            KNOWN: [["gemma", 8001], ["qwen", 8002]],
            OTHER_KNOWN: [["qwen", 8001]],
            LEGACY: [["gemma", 8000]],
        },
    },
    "litellm": {"url": "http://127.0.0.1:4000", "master_key": MASTER_KEY},
    "admin": {"token": ADMIN_TOKEN},
}

MODELS: dict[str, Any] = {
    "models": [
        {"model_name": "gemma", "litellm_params": {"model": "hosted_vllm/gemma"},
         "model_info": {"self_hosted": True, "vllm": {
             "model": "google/gemma", "args": ["--reasoning-parser", "gemma"],
             "max_model_len": 32768, "vram_gb": 18, "disk_gb": 60}}},
        {"model_name": "qwen", "litellm_params": {"model": "hosted_vllm/qwen-served"},
         "model_info": {"self_hosted": True, "vllm": {
             "model": "Qwen/Qwen3-8B", "served_model_name": "qwen-served"}}},
        {"model_name": "gpt", "litellm_params": {"model": "openai/gpt-4o-mini"},
         "model_info": {"self_hosted": False}},
    ],
}


def config(**fleet_changes: Any) -> dict[str, Any]:
    """The test config with some ``fleet`` keys replaced (None removes a key)."""
    document = copy.deepcopy(CONFIG)
    for key, value in fleet_changes.items():
        if value is None:
            document["fleet"].pop(key, None)
        else:
            document["fleet"][key] = value
    return document


def write_pair(folder: Path, config_document: dict[str, Any] | None = None) -> tuple[str, str]:
    """Write config.yaml and models.yaml into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    config_path, models_path = folder / "config.yaml", folder / "models.yaml"
    config_path.write_text(yaml.safe_dump(config_document or CONFIG, sort_keys=False))
    models_path.write_text(yaml.safe_dump(MODELS, sort_keys=False))
    return str(config_path), str(models_path)


def box_headers(host: str | None = KNOWN, key: str | None = FLEET_KEY,
                xff: str | None = None) -> dict[str, str]:
    """Headers of a box request: the bearer, the claimed name, an ``X-Forwarded-For``."""
    headers = {}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    if host is not None:
        headers["X-LLMAO-Host"] = host
    if xff is not None:
        headers["X-Forwarded-For"] = xff
    return headers
