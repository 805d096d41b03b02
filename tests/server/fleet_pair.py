"""A small fleet for the server's tests: its files, its secrets, its boxes.

Every secret is strong, random and distinct (the rig's one fleet writer makes them), so a test
that scans output for secrets knows exactly what to look for.
"""

from __future__ import annotations

import copy
import weakref
from pathlib import Path
from typing import Any

from rig.fleet_files import FleetSecrets, fleet_section, recipe, route, write_fleet

# The answer and request header of a box token (docs/box-identity.md).
TOKEN_HEADER = "X-LLMAO-Box-Token"

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


# The box token each test client was handed per box name (a box's posts need its binding).
_TOKENS: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


def bound_headers(client: Any, host: str = KNOWN, **options: Any) -> dict[str, str]:
    """:func:`box_headers` with the box token ``host``'s box holds: fetched once per client,
    as a box's first call binds its name and its later calls present the token."""
    tokens = _TOKENS.setdefault(client, {})
    if host not in tokens:
        answer = client.get("/vllm/config", headers=box_headers(host=host))
        if answer.headers.get(TOKEN_HEADER):
            tokens[host] = answer.headers[TOKEN_HEADER]
    headers = box_headers(host=host, **options)
    if host in tokens:
        headers[TOKEN_HEADER] = tokens[host]
    return headers
