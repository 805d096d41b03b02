# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Provider listings: which boxes a provider runs and where it publishes their ports.

A box only knows its listen ports; everything that dials it (probes, the
LiteLLM ``api_base``) needs the public address the provider maps them to.
Parsing is strict: an answer that does not have the documented shape is a
:class:`ListingError`, never an empty listing, because an empty listing would
make every box look "unlisted".
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .config_file import Provider
from .hostnames import normalize_host
from .http_json import ApiError, call_json
from .lifecycle import Listed

VAST_DEFAULT_URL = "https://console.vast.ai/api/v0"
RUNPOD_DEFAULT_URL = "https://rest.runpod.io/v1"
LOCAL_PROVIDER = "local"
UNLISTED_PROVIDER = "unlisted"


class ListingError(RuntimeError):
    """A provider listing could not be read; the message holds no secret."""


@dataclass(frozen=True)
class Endpoint:
    """Where to dial one server: the public address and port, and how we know it."""

    host: str
    port: int
    source: str

    @property
    def base_url(self) -> str:
        """``http://host:port/v1``, the OpenAI base LiteLLM and the probes use."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"


@dataclass(frozen=True)
class ListedBox:
    """One instance a provider runs: the names a ``fleet.hosts`` key may use, its ports."""

    provider: str
    names: tuple[str, ...]
    public_ip: str
    ports: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Listings:
    """Every configured listing read once per pass, indexed by box name."""

    configured: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    by_name: Mapping[str, ListedBox] = field(default_factory=lambda: MappingProxyType({}))

    def listed(self, box: str) -> Listed:
        if not self.configured:
            return Listed.NO_PROVIDERS
        if normalize_host(box) in self.by_name:
            return Listed.NAMED
        return Listed.UNKNOWN if self.failed else Listed.NOT_NAMED

    def named_by(self, box: str) -> str | None:
        """The provider whose listing names the box, if one does."""
        listed = self.by_name.get(normalize_host(box))
        return listed.provider if listed is not None else None

    def endpoint(self, box: str, listen_port: int, seed_public_port: int | None) -> Endpoint | None:
        """The public address of a server, or None when nothing dialable is known."""
        listed = self.by_name.get(normalize_host(box))
        if listed is not None:
            public = listed.ports.get(listen_port)
            if public is None:
                return None
            return Endpoint(listed.public_ip, public, f"listing:{listed.provider}")
        if not _is_address(box):
            return None
        if seed_public_port is not None:
            return Endpoint(box, seed_public_port, "fourth element")
        if not self.configured:
            return Endpoint(box, listen_port, "local: public equals listen")
        return Endpoint(box, listen_port, "not listed: listen port")


def provider_of(providers: Collection[str], named_by: str | None = None) -> str:
    """The provider a box is shown under: by reconcile, the inventory and the dashboard alike.

    ``providers`` are the configured listings, ``named_by`` the one that names the
    box (None when none does, or none was read yet). A fleet without listings is
    ``local``; a box no listing names is ``unlisted`` until one does.
    """
    if named_by:
        return named_by
    return UNLISTED_PROVIDER if providers else LOCAL_PROVIDER


def index_listings(configured: Iterable[str], boxes: Iterable[ListedBox],
                   failed: Mapping[str, str]) -> Listings:
    by_name: dict[str, ListedBox] = {}
    for box in boxes:
        for name in box.names:
            by_name.setdefault(normalize_host(name), box)
    return Listings(tuple(configured), MappingProxyType(dict(failed)), MappingProxyType(by_name))


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name == "localhost"
    return True


def _port_number(value: Any, what: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ListingError(f"{what}: {value!r} is not a port") from None
    if not 0 < port < 65536:
        raise ListingError(f"{what}: {port} is not a port")
    return port


def _docker_style_ports(ports: Any, what: str) -> dict[int, int]:
    """``{"8001/tcp": [{"HostIp": ..., "HostPort": "40123"}]}`` → ``{8001: 40123}``."""
    if ports is None:
        return {}
    if not isinstance(ports, dict):
        raise ListingError(f"{what}: ports is not a mapping")
    mapped = {}
    for key, bindings in ports.items():
        listen, _slash, proto = str(key).partition("/")
        if proto not in ("", "tcp") or not bindings:
            continue
        if not isinstance(bindings, list) or not isinstance(bindings[0], dict):
            raise ListingError(f"{what}: ports[{key!r}] is not a list of bindings")
        mapped[_port_number(listen, what)] = _port_number(bindings[0].get("HostPort"), what)
    return mapped


def parse_vast(document: Any) -> list[ListedBox]:
    """Vast's instance list: ``{"instances": [{"public_ipaddr", "ports"}]}``."""
    if not isinstance(document, dict) or not isinstance(document.get("instances"), list):
        raise ListingError("vast: the answer has no 'instances' list")
    boxes = []
    for index, instance in enumerate(document["instances"]):
        what = f"vast: instances[{index}]"
        if not isinstance(instance, dict):
            raise ListingError(f"{what} is not an object")
        address = normalize_host(str(instance.get("public_ipaddr") or ""))
        if not address:
            continue  # not running yet: no address to name it by
        boxes.append(ListedBox("vast", (address,), address,
                               MappingProxyType(_docker_style_ports(instance.get("ports"), what))))
    return boxes


def parse_runpod(document: Any) -> list[ListedBox]:
    """RunPod's pod list: ``[{"id", "publicIp", "portMappings": {"8001": 40123}}]``."""
    if not isinstance(document, list):
        raise ListingError("runpod: the answer is not a list of pods")
    boxes = []
    for index, pod in enumerate(document):
        what = f"runpod: pods[{index}]"
        if not isinstance(pod, dict) or not isinstance(pod.get("id"), str):
            raise ListingError(f"{what} has no id")
        mappings = pod.get("portMappings") or {}
        if not isinstance(mappings, dict):
            raise ListingError(f"{what}: portMappings is not a mapping")
        ports = {_port_number(k, what): _port_number(v, what) for k, v in mappings.items()}
        address = normalize_host(str(pod.get("publicIp") or ""))
        names = (pod["id"], address) if address else (pod["id"],)
        boxes.append(ListedBox("runpod", names, address, MappingProxyType(ports)))
    return boxes


def parse_docker(document: Any, label: str) -> list[ListedBox]:
    """``docker inspect`` of labelled containers: the label names the box."""
    if not isinstance(document, list):
        raise ListingError("docker: inspect did not answer a list")
    boxes = []
    for container in document:
        labels = ((container or {}).get("Config") or {}).get("Labels") or {}
        name = labels.get(label)
        if not name:
            continue
        ports = ((container.get("NetworkSettings") or {}).get("Ports"))
        mapped = _docker_style_ports(ports, f"docker: {name}")
        host_ip = _first_host_ip(ports)
        boxes.append(ListedBox("docker", (name,), host_ip, MappingProxyType(mapped)))
    return boxes


def _first_host_ip(ports: Any) -> str:
    for bindings in (ports or {}).values():
        for binding in bindings or ():
            address = binding.get("HostIp") or ""
            if address not in ("", "0.0.0.0", "::"):
                return address
    return "127.0.0.1"


def _get_json(url: str, api_key: str, timeout: float) -> Any:
    """The provider's answer, through the one HTTP call that never follows a redirect."""
    try:
        return call_json("GET", url, api_key, timeout=timeout)
    except ApiError as exc:
        raise ListingError(str(exc)) from None


def fetch_vast(api_key: str, url: str | None, timeout: float) -> list[ListedBox]:
    return parse_vast(_get_json(f"{(url or VAST_DEFAULT_URL).rstrip('/')}/instances/",
                                api_key, timeout))


def fetch_runpod(api_key: str, url: str | None, timeout: float) -> list[ListedBox]:
    return parse_runpod(_get_json(f"{(url or RUNPOD_DEFAULT_URL).rstrip('/')}/pods",
                                  api_key, timeout))


def fetch_docker(label: str, timeout: float) -> list[ListedBox]:
    """Containers of the local engine carrying ``label``, as the tests and the demo run them."""
    try:
        ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label={label}"],
                             capture_output=True, text=True, timeout=timeout, check=True)
        if not ids.stdout.split():
            return []
        inspected = subprocess.run(["docker", "inspect", *ids.stdout.split()],
                                   capture_output=True, text=True, timeout=timeout, check=False)
        return parse_docker(_inspected_containers(inspected), label)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ListingError(f"docker: cannot list containers: {exc}") from None


def _inspected_containers(inspected: subprocess.CompletedProcess) -> list:
    """What ``docker inspect`` found; a container removed since ``docker ps`` is skipped.

    The engine still prints the others and exits 1 with "No such object" for the
    gone one: that is a smaller fleet, not an unreadable listing. Any other
    failure is.
    """
    vanished_only = all("No such object" in line
                        for line in inspected.stderr.splitlines() if line.strip())
    if inspected.returncode != 0 and not vanished_only:
        raise ListingError(f"docker: inspect failed: {inspected.stderr.strip()[:200]}")
    return json.loads(inspected.stdout or "[]")


def read_listings(providers: Mapping[str, Provider], timeout: float) -> Listings:
    """Read every configured listing; a failed one is remembered, never taken as empty."""
    boxes: list[ListedBox] = []
    failed: dict[str, str] = {}
    for kind, provider in providers.items():
        try:
            if kind == "vast":
                boxes += fetch_vast(provider.api_key, provider.url, timeout)
            elif kind == "runpod":
                boxes += fetch_runpod(provider.api_key, provider.url, timeout)
            else:
                boxes += fetch_docker(provider.label, timeout)
        except ListingError as exc:
            failed[kind] = str(exc)
    return index_listings(providers, boxes, failed)
