"""The one writer of fleet files (config.yaml, models.yaml, fleet.yml) for tests, demo and bench.

Every fleet a test, the demo or a benchmark runs is written here, so the files have one shape
and one set of rules for their secrets. Secrets are strong and random unless a caller passes its
own: 32 random bytes (43 printable URL-safe characters) behind a short prefix that says which
secret it is, each one distinct, so a test that scans output for secrets knows what to look for
and the loader's strength rules never trip on a test fleet. What a fleet holds (its boxes and
recipes) stays with the test that needs it; ``recipe`` and ``route`` keep those lists short.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet

SECRET_BYTES = 32
INVENTORY_SOURCE = "plugin: llmao.fleet.fleet\nconfig: config.yaml\nmodels: models.yaml\n"


def strong_secret(prefix: str = "") -> str:
    """``prefix`` and 43 random URL-safe characters: strong enough for any secret of a fleet."""
    return prefix + secrets.token_urlsafe(SECRET_BYTES)


def _secret(prefix: str) -> Any:
    return field(default_factory=lambda: strong_secret(prefix), repr=False)


@dataclass(frozen=True)
class FleetSecrets:
    """Every secret a fleet's config.yaml can hold; random unless given."""

    fleet_key: str = _secret("fleet-")
    salt: str = _secret("salt-")
    admin_token: str = _secret("admin-")
    master_key: str = _secret("sk-litellm-")
    shared_bearer: str = _secret("sk-shared-")

    def values(self) -> tuple[str, ...]:
        return (self.fleet_key, self.salt, self.admin_token, self.master_key,
                self.shared_bearer)


def recipe(name: str, weights: str, **vllm: Any) -> dict[str, Any]:
    """A self-hosted entry of models.yaml: ``name`` routed to vLLM serving ``weights``
    (LiteLLM asks vLLM for the served model name, which is ``name`` unless ``vllm`` sets it)."""
    served = vllm.get("served_model_name", name)
    return {"model_name": name, "litellm_params": {"model": f"hosted_vllm/{served}"},
            "model_info": {"self_hosted": True, "vllm": {"model": weights, **vllm}}}


def route(name: str, model: str) -> dict[str, Any]:
    """A commercial entry of models.yaml: LiteLLM routes ``name`` to ``model``, no box serves it."""
    return {"model_name": name, "litellm_params": {"model": model},
            "model_info": {"self_hosted": False}}


def fleet_section(keys: FleetSecrets, hosts: Mapping[str, Any],
                  legacy: Iterable[tuple[str, int]] = ()) -> dict[str, Any]:
    """config.yaml's ``fleet``: the key, the salt, the legacy pairs (shared bearer), the hosts."""
    section: dict[str, Any] = {"key": keys.fleet_key, "vllm_api_salt": keys.salt}
    pairs = [[host, port] for host, port in legacy]
    if pairs:
        section.update(selfhost_api_key=keys.shared_bearer, legacy_servers=pairs)
    section["hosts"] = dict(hosts)
    return section


class FleetFolder:
    """A folder holding a fleet's files, and the fleet they load to."""

    folder: Path

    @property
    def config_path(self) -> Path:
        return self.folder / "config.yaml"

    @property
    def models_path(self) -> Path:
        return self.folder / "models.yaml"

    @property
    def inventory_path(self) -> Path:
        return self.folder / "fleet.yml"

    def paths(self) -> tuple[str, str]:
        """(config.yaml, models.yaml) as the core's ``load_fleet`` takes them."""
        return str(self.config_path), str(self.models_path)

    def load(self) -> Fleet:
        return load_fleet(*self.paths())


@dataclass(frozen=True)
class WrittenFleet(FleetFolder):
    folder: Path


def write_private(path: Path, text: str) -> None:
    """Create (or replace) a file readable by its owner only, created so from the start."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def dump(document: Mapping[str, Any], compact: bool = False) -> str:
    """YAML in the document's own key order; ``compact`` puts each host row on one line,
    with libyaml when present (a benchmark's fleet of 10,000 boxes)."""
    if not compact:
        return yaml.safe_dump(document, sort_keys=False)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(document, Dumper=dumper, sort_keys=False, default_flow_style=None)


def write_fleet(folder: Path, config: Mapping[str, Any] | str,
                models: Mapping[str, Any] | str, *, private: bool = False,
                inventory: bool = False, compact: bool = False) -> WrittenFleet:
    """Write config.yaml and models.yaml into ``folder`` (created); text is written as given.

    ``private`` makes every file 0600 from its creation (config.yaml holds every secret of the
    fleet); ``inventory`` adds fleet.yml, the llmao.fleet.fleet inventory source over the two.
    """
    written = WrittenFleet(Path(folder))
    written.folder.mkdir(parents=True, exist_ok=True)
    files = {written.config_path: config, written.models_path: models}
    if inventory:
        files[written.inventory_path] = INVENTORY_SOURCE
    for path, content in files.items():
        text = content if isinstance(content, str) else dump(content, compact)
        if private:
            write_private(path, text)
        else:
            path.write_text(text)
    return written
