"""A small fleet for the server's tests: its files, its secrets, its boxes.

Every secret is strong, random and distinct (the rig's one fleet writer makes them), so a test
that scans output for secrets knows exactly what to look for.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from rig.fleet_files import FleetSecrets, fleet_section, recipe, route, write_fleet

KEYS = FleetSecrets()
FLEET_KEY, SALT, SHARED_BEARER = KEYS.fleet_key, KEYS.salt, KEYS.shared_bearer
ADMIN_TOKEN, MASTER_KEY = KEYS.admin_token, KEYS.master_key
SECRETS = (FLEET_KEY, SALT, SHARED_BEARER, ADMIN_TOKEN, MASTER_KEY)

KNOWN = "203.0.113.10"
OTHER_KNOWN = "203.0.113.11"
LEGACY = "198.51.100.7"
UNKNOWN = "192.0.2.50"

CONFIG: dict[str, Any] = {
    "fleet": fleet_section(KEYS, {
        KNOWN: [["gemma", 8001], ["qwen", 8002]],
        OTHER_KNOWN: [["qwen", 8001]],
        LEGACY: [["gemma", 8000]],
    }, legacy=[(LEGACY, 8000)]),
    "litellm": {"url": "http://127.0.0.1:4000", "master_key": MASTER_KEY},
    "admin": {"token": ADMIN_TOKEN},
}

MODELS: dict[str, Any] = {"models": [
    recipe("gemma", "google/gemma", args=["--reasoning-parser", "gemma"], max_model_len=32768,
           vram_gb=18, disk_gb=60),
    recipe("qwen", "Qwen/Qwen3-8B", served_model_name="qwen-served"),
    route("gpt", "openai/gpt-4o-mini"),
]}


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
    return write_fleet(folder, config_document or CONFIG, MODELS).paths()


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
