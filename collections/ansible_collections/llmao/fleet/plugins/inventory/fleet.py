# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llmao fleet as an Ansible inventory: one host per ``fleet.hosts`` key."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet
short_description: The GPU boxes of an llmao fleet, read from config.yaml and models.yaml
version_added: 0.1.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - Builds an inventory from llmao's own files, the same two files the config server reads,
    validated by the same code. Every key of C(fleet.hosts) becomes one host.
  - Every host is in the group C(llmao_boxes), in one C(llmao_model_<name>) group per model it
    runs (the name sanitized for Ansible) and in one C(llmao_provider_<provider>) group.
  - The hostvars describe the box without any secret. The vLLM bearers, the fleet key, the salt,
    LiteLLM's master key and the admin token never enter the inventory; a play that needs a
    bearer derives it on the controller with M(llmao.fleet.vllm_api_key).
  - "An invalid C(config.yaml) or C(models.yaml) fails the source with the loader's message, which
    lists every problem as C(file: key.path[row]: what)."
  - The source file must be named C(fleet.yml) or C(fleet.yaml), or end with either
    (for example C(prod.fleet.yml)).
extends_documentation_fragment:
  - constructed
  - inventory_cache
options:
  plugin:
    description: Marks the file as a source of this plugin.
    type: str
    required: true
    choices: [llmao.fleet.fleet]
  config:
    description:
      - Path of llmao's C(config.yaml).
      - A relative path is taken from the folder of the inventory source file, so a fleet folder
        can be moved or copied as a whole.
    type: str
    required: true
  models:
    description:
      - Path of llmao's C(models.yaml).
      - A relative path is taken from the folder of the inventory source file.
    type: str
    required: true
  listings:
    description:
      - Read the provider listings C(config.yaml) configures (C(providers.vast),
        C(providers.runpod), C(providers.docker)) and reach each box where its provider
        publishes it, so that a play such as C(playbooks/provision.yml) can SSH to Vast and
        RunPod boxes without host_vars written by hand.
      - For each box a listing names, C(ansible_host) is the public address it gives and
        C(ansible_port) the public port of the box's C(22/tcp), when published;
        C(llmao_public_ports) holds the listing's public port of each listen port,
        C(llmao_provider) and the C(llmao_provider_<provider>) group name the provider, and
        C(llmao_price_per_hour) is the listing's price when it gives one (a stopped instance
        has none, as its running rate is not what it costs). C(llmao_provider_status) is the
        provider's status of the instance, lowercased (RunPod's C(desiredStatus), Vast's
        C(actual_status), such as C(running) or C(exited)), and C(llmao_interruptible) is
        true for an instance the provider may stop at will (a Vast bid, a RunPod
        interruptible pod).
      - A listing that cannot be read (network, HTTP error after the retries of a 429 or
        5xx, an answer of another shape) fails the inventory source with the provider's
        reason; it never yields an empty inventory. One entry of a listing that cannot be
        read costs that entry only, with a warning naming it. A box no listing names is in
        C(llmao_provider_unlisted).
      - An address that several listed instances share (two Vast instances behind one IP)
        names no single box; such a box gets no C(ansible_port), a warning, and the reason in
        C(llmao_ambiguous). Key it by instance id in C(fleet.hosts).
      - With O(cache=true) the listings are cached with the rest of the inventory, for
        O(cache_timeout) seconds and while C(config.yaml) and C(models.yaml) keep their content.
    type: bool
    default: false
  listings_timeout:
    description: Seconds to wait for each provider's answer when O(listings=true).
    type: float
    default: 15.0
notes:
  - "Hostvars: C(llmao_box) (the C(fleet.hosts) key), C(llmao_servers) (one entry per host row:
    C(name), C(model), C(model_name), C(served_model_name), C(host), C(port) (the listen port),
    C(args), C(legacy) and the recipe's optional numbers), C(llmao_revision) (the hash of the
    assignment the box is told), C(llmao_public_ports) (listen port to public port, where known),
    C(llmao_provider), and C(ansible_host) when the box name is an IP address."
  - "Group vars of C(llmao_boxes) and of C(all): C(llmao_config_file) and C(llmao_models_file),
    the absolute paths this inventory was read from, for modules that read the same files. Set
    on C(all) too so that a play on the controller (C(hosts: localhost), as
    C(playbooks/reconcile.yml)) finds them: the implicit localhost reads C(all)'s variables."
  - "C(llmao_provider) is C(local) when C(config.yaml) configures no provider listing (public
    ports equal listen ports) and C(unlisted) otherwise, until the provider listings are read
    (O(listings=true)). A RunPod-only configuration is not local."
  - "Under ansible-core 2.19 the hostvars are trusted plain data (C(ansible-inventory --list)
    shows them without C(__ansible_unsafe) envelopes), except a string that looks like a Jinja
    template (a recipe argument holding C({{), for instance): that one stays untrusted, so it
    is never rendered as a template."
  - "With O(cache=true) the cached entry is only used while C(config.yaml) and C(models.yaml)
    keep the content they had when it was written."
seealso:
  - module: llmao.fleet.vllm_api_key
"""

EXAMPLES = r"""
# inventories/prod/fleet.yml
plugin: llmao.fleet.fleet
config: config.yaml
models: models.yaml

# Reach Vast and RunPod boxes over SSH where their listings publish 22/tcp, and cache the
# listings for five minutes:
# plugin: llmao.fleet.fleet
# config: config.yaml
# models: models.yaml
# listings: true
# cache: true
# cache_plugin: ansible.builtin.jsonfile
# cache_connection: ~/.cache/llmao-inventory
# cache_timeout: 300

# A group per box of one model, and a variable composed from the hostvars:
# plugin: llmao.fleet.fleet
# config: config.yaml
# models: models.yaml
# groups:
#   multi_model: llmao_servers | length > 1
# keyed_groups:
#   - key: llmao_servers | map(attribute='served_model_name')
#     prefix: serves
# compose:
#   vllm_ports: llmao_servers | map(attribute='port') | list
"""

import hashlib
import os
from collections.abc import Iterable
from typing import Any

from ansible.errors import AnsibleParserError
from ansible.inventory.data import InventoryData
from ansible.inventory.group import to_safe_group_name
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.display import Display

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import is_ip_address
from ansible_collections.llmao.fleet.plugins.module_utils.intent import IntendedServer
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    LOCAL_PROVIDER,
    SSH_PORT,
    ListedBox,
    Listings,
    provider_of,
    read_listings,
)

try:  # ansible-core 2.19 tags what a plugin trusts; earlier cores trust plain strings already
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - ansible-core < 2.19
    def trust_as_template(value: str) -> str:
        return value

display = Display()

SOURCE_SUFFIXES = ("fleet.yml", "fleet.yaml")
ALL_BOXES = "llmao_boxes"
MODEL_GROUP_PREFIX = "llmao_model_"
PROVIDER_GROUP_PREFIX = "llmao_provider_"
CACHE_FORMAT = 2
TEMPLATE_MARKERS = ("{{", "{%", "{#")


def model_group(model_name: str) -> str:
    """The group of the boxes running a model, its name made a valid Ansible group name."""
    return to_safe_group_name(MODEL_GROUP_PREFIX + model_name, force=True, silent=True)


def provider_group(provider: str) -> str:
    return to_safe_group_name(PROVIDER_GROUP_PREFIX + provider, force=True, silent=True)


def public_ports(servers: Iterable[IntendedServer], local: bool) -> dict[int, int]:
    """Listen port to public port for the ports whose public side is known.

    A local fleet publishes each listen port as itself. Otherwise only a hand-written
    (deprecated) fourth element of a row says anything until a provider listing does.
    """
    ports = {}
    for server in servers:
        if server.seed_public_port is not None:
            ports[server.listen_port] = server.seed_public_port
        elif local:
            ports[server.listen_port] = server.listen_port
    return ports


def listed_reach(listed: ListedBox, servers: Iterable[IntendedServer]) -> dict[str, Any]:
    """The hostvars a listing sets: where to SSH, each listen port's public port, the price,
    the provider's status of the instance and whether it may stop it at will."""
    reach: dict[str, Any] = {
        "llmao_public_ports": {server.listen_port: listed.ports[server.listen_port]
                               for server in servers if server.listen_port in listed.ports},
        "llmao_provider": listed.provider,
        "llmao_interruptible": listed.interruptible,
    }
    if listed.status:
        reach["llmao_provider_status"] = listed.status
    if listed.public_ip:
        reach["ansible_host"] = listed.public_ip
        if SSH_PORT in listed.ports:
            reach["ansible_port"] = listed.ports[SSH_PORT]
    if listed.price_per_hour is not None:
        reach["llmao_price_per_hour"] = listed.price_per_hour
    return reach


def describe_fleet(fleet: Fleet, listings: Listings | None = None) -> dict[str, Any]:
    """The inventory as plain data without secrets: what populate adds and the cache keeps.

    Built from each server's public view, never from its payload, so no bearer can leak
    into hostvars whatever the core adds to the payload later. With ``listings`` (read
    in full: a failed one never gets here) a listed box is reached where its provider
    publishes it.
    """
    provider = provider_of(fleet.settings.providers)  # listings are not read here
    local = provider == LOCAL_PROVIDER
    boxes = {}
    warnings = list(fleet.warnings)
    if listings is not None:
        warnings += [f"llmao fleet: {warning}" for warning in listings.warnings]
    for box, assignment in fleet.assignments.items():
        hostvars = {
            "llmao_box": box,
            "llmao_servers": [server.public_view() for server in assignment.servers],
            "llmao_revision": assignment.revision,
            "llmao_public_ports": public_ports(assignment.servers, local),
            "llmao_provider": provider,
        }
        if is_ip_address(box):
            hostvars["ansible_host"] = box
        if listings is not None:
            hostvars.update(_listed_hostvars(listings, box, assignment.servers, warnings))
        boxes[box] = {
            "hostvars": hostvars,
            "models": sorted({server.model_name for server in assignment.servers}),
        }
    return {
        "format": CACHE_FORMAT,
        "files": {"llmao_config_file": fleet.config_path, "llmao_models_file": fleet.models_path},
        "boxes": boxes,
        "warnings": warnings,
    }


def _listed_hostvars(listings: Listings, box: str, servers: Iterable[IntendedServer],
                     warnings: list[str]) -> dict[str, Any]:
    """What the listings say of one box: its reach, or why it has none."""
    listed = listings.box(box)
    if listed is not None:
        return listed_reach(listed, servers)
    provider = {"llmao_provider": provider_of(listings.configured, listings.named_by(box))}
    ambiguity = listings.ambiguity(box)
    if ambiguity:
        warnings.append(f"llmao fleet: {ambiguity}; no SSH port is set for it")
        return {**provider, "llmao_ambiguous": ambiguity}
    return provider


def trusted(value: Any) -> Any:
    """``value`` with every string trusted, as ansible-core 2.19 wants trusted plugin output.

    The files are the operator's own, so their strings are trusted data; a string that
    looks like a template (a recipe argument holding ``{{``) stays untrusted, so Ansible
    shows it as it is and never renders it.
    """
    if isinstance(value, str):
        return value if any(marker in value for marker in TEMPLATE_MARKERS) \
            else trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


def restore_port_keys(description: dict[str, Any]) -> dict[str, Any]:
    """Give ``llmao_public_ports`` its integer keys back after a JSON round trip in a cache."""
    for box in description["boxes"].values():
        hostvars = box["hostvars"]
        hostvars["llmao_public_ports"] = {
            int(listen): public for listen, public in hostvars["llmao_public_ports"].items()
        }
    return description


def files_fingerprint(*paths: str, listings: bool = False) -> str:
    """A digest of the files' paths and bytes: a cached inventory is valid while it matches.

    Whether the listings were read is part of it, so turning the option on or off never
    reuses an inventory made the other way.
    """
    digest = hashlib.sha256(b"listings\0" if listings else b"files\0")
    for path in paths:
        digest.update(path.encode("utf-8") + b"\0")
        try:
            with open(path, "rb") as stream:
                digest.update(hashlib.sha256(stream.read()).digest())
        except OSError:
            digest.update(b"unreadable")
    return digest.hexdigest()


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """Reads an inventory source naming llmao's two files and adds the fleet's boxes."""

    NAME = "llmao.fleet.fleet"

    def verify_file(self, path: str) -> bool:
        return super().verify_file(path) and path.endswith(SOURCE_SUFFIXES)

    def parse(self, inventory: InventoryData, loader: DataLoader, path: str,
              cache: bool = True) -> None:
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        config_path, models_path = self._fleet_files(path)
        use_cache = bool(self.get_option("cache"))
        with_listings = bool(self.get_option("listings"))
        cache_key = self.get_cache_key(path)
        fingerprint = files_fingerprint(config_path, models_path, listings=with_listings) \
            if use_cache else None
        description = self._cached(cache_key, fingerprint) if use_cache and cache else None
        if description is None:
            fleet = self._load(config_path, models_path)
            listings = self._listings(fleet) if with_listings else None
            description = describe_fleet(fleet, listings)
            if use_cache:
                self._cache[cache_key] = {"fingerprint": fingerprint, "inventory": description}
        self._add(description)

    def populate(self, inventory: InventoryData, fleet: Fleet,
                 listings: Listings | None = None) -> None:
        """Add the fleet's boxes, groups and hostvars to ``inventory``; parse's pure half."""
        self.inventory = inventory
        self._add(describe_fleet(fleet, listings))

    def _fleet_files(self, source: str) -> tuple[str, ...]:
        """The option paths, a relative one taken from the source file's folder."""
        base = os.path.dirname(os.path.abspath(source))
        return tuple(
            os.path.normpath(os.path.join(base, os.path.expanduser(str(self.get_option(name)))))
            for name in ("config", "models")
        )

    def _load(self, config_path: str, models_path: str) -> Fleet:
        try:
            return load_fleet(config_path, models_path)
        except ConfigError as exc:
            raise AnsibleParserError(f"llmao fleet files are invalid:\n{exc}") from None

    def _listings(self, fleet: Fleet) -> Listings:
        """Every configured listing, read in full; one that fails fails the source."""
        listings = read_listings(fleet.settings.providers,
                                 float(self.get_option("listings_timeout")))
        if listings.failed:
            reasons = "; ".join(f"the {provider} listing could not be read ({reason})"
                                for provider, reason in sorted(listings.failed.items()))
            raise AnsibleParserError(f"llmao fleet: {reasons}. The inventory is not built "
                                     "from a partial listing (option listings).")
        return listings

    def _cached(self, cache_key: str, fingerprint: str | None) -> dict[str, Any] | None:
        """The cached description when it was made from these very files, else None."""
        try:
            entry = self._cache[cache_key]
        except KeyError:
            return None
        if not isinstance(entry, dict) or entry.get("fingerprint") != fingerprint:
            return None
        description = entry.get("inventory")
        if not isinstance(description, dict) or description.get("format") != CACHE_FORMAT:
            return None
        return restore_port_keys(description)

    def _add(self, description: dict[str, Any]) -> None:
        for warning in description["warnings"]:
            display.warning(warning)
        inventory = self.inventory
        inventory.add_group(ALL_BOXES)
        for name, value in description["files"].items():
            for group in (ALL_BOXES, "all"):
                inventory.set_variable(group, name, trusted(value))
        groups = {}
        provider_groups = {}
        constructing = self._constructing()
        for box, facts in description["boxes"].items():
            hostvars = facts["hostvars"]
            inventory.add_host(box, group=ALL_BOXES)
            for name, value in hostvars.items():
                inventory.set_variable(box, name, trusted(value))
            for model in facts["models"]:
                group = groups.get(model)
                if group is None:
                    group = groups[model] = inventory.add_group(model_group(model))
                inventory.add_child(group, box)
            provider = hostvars["llmao_provider"]
            group = provider_groups.get(provider)
            if group is None:
                group = provider_groups[provider] = inventory.add_group(provider_group(provider))
            inventory.add_child(group, box)
            if constructing:
                self._construct(box, hostvars)

    def _constructing(self) -> bool:
        """Whether any of compose, groups or keyed_groups is set: skipping them saves time."""
        return any(self.get_option(name) for name in ("compose", "groups", "keyed_groups"))

    def _construct(self, box: str, hostvars: dict[str, Any]) -> None:
        strict = self.get_option("strict")
        self._set_composite_vars(self.get_option("compose"), hostvars, box, strict=strict)
        self._add_host_to_composed_groups(self.get_option("groups"), hostvars, box,
                                          strict=strict)
        self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, box,
                                       strict=strict)
