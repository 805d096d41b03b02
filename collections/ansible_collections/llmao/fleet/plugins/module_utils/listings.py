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
import math
import subprocess
import urllib.parse
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .config_file import Provider
from .hostnames import normalize_host
from .http_json import HttpCallError, call_json
from .lifecycle import Listed

# Vast's instance list as its OpenAPI document describes it (GET /api/v1/instances/, pages of
# at most 25 joined by ``next_token``), and RunPod's REST API v2 (GET /v2/pods), which replaced
# v1 (rest.runpod.io/v1, retired on 2026-11-15). A configured ``url`` replaces the base.
VAST_DEFAULT_URL = "https://console.vast.ai/api/v1"
RUNPOD_DEFAULT_URL = "https://api.runpod.io/v2"
VAST_MAX_PAGES = 400
SSH_PORT = 22


class ListingError(RuntimeError):
    """A provider listing could not be read; the message holds no secret."""


@dataclass(frozen=True)
class Endpoint:
    """Where to dial one server: the public address and port, and how we know it."""

    host: str
    port: int
    source: str
    # ``https`` when the box serves TLS with a certificate of the fleet CA (docs/box-tls.md).
    scheme: str = "http"

    @property
    def base_url(self) -> str:
        """``http://host:port/v1`` (``https`` under box TLS), the OpenAI base LiteLLM and the
        probes use."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/v1"


@dataclass(frozen=True)
class ListedBox:
    """One instance a provider runs: the names a ``fleet.hosts`` key may use, its ports.

    ``names`` starts with the provider's own id of the instance (Vast's instance id,
    RunPod's pod id, the local engine's label) and ends with its public address when
    it has one. ``price_per_hour`` is what the provider says the instance costs now,
    in USD per hour, None when the listing does not say.
    """

    provider: str
    names: tuple[str, ...]
    public_ip: str
    ports: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    price_per_hour: float | None = None

    @property
    def label(self) -> str:
        """``vast 1234``: how messages name the instance."""
        return " ".join((self.provider, *self.names[:1]))


@dataclass(frozen=True)
class Listings:
    """Every configured listing read once per pass, indexed by box name.

    A name that several listed instances share (two Vast instances behind one
    public IP) is in ``ambiguous``, never in ``by_name``: which of them a
    ``fleet.hosts`` row meant cannot be known, and guessing by order would dial
    someone else's box. Every instance stays listed under its own id.
    """

    configured: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    by_name: Mapping[str, ListedBox] = field(default_factory=lambda: MappingProxyType({}))
    ambiguous: Mapping[str, tuple[ListedBox, ...]] = field(
        default_factory=lambda: MappingProxyType({}))
    boxes: tuple[ListedBox, ...] = ()

    def listed(self, box: str) -> Listed:
        if not self.configured:
            return Listed.NO_PROVIDERS
        name = normalize_host(box)
        if name in self.by_name:
            return Listed.NAMED
        if name in self.ambiguous:
            return Listed.UNKNOWN
        return Listed.UNKNOWN if self.failed else Listed.NOT_NAMED

    def box(self, name: str) -> ListedBox | None:
        """The one instance a listing names ``name``, or None (not listed, or ambiguous)."""
        return self.by_name.get(normalize_host(name))

    def ambiguity(self, box: str) -> str | None:
        """Why ``box`` names no single instance (several share it), or None when it does not."""
        sharing = self.ambiguous.get(normalize_host(box))
        if not sharing:
            return None
        instances = ", ".join(listed.label for listed in sharing)
        return (f"{box} is ambiguous: {instances} share this address; key the fleet.hosts row "
                "by the instance id")

    def named_by(self, box: str) -> str | None:
        """The provider whose listing names the box, if one does.

        An ambiguous address is still named by its provider when every instance
        sharing it is that provider's (two Vast instances): it is not unlisted.
        """
        name = normalize_host(box)
        listed = self.by_name.get(name)
        if listed is not None:
            return listed.provider
        sharing = {claimant.provider for claimant in self.ambiguous.get(name, ())}
        return sharing.pop() if len(sharing) == 1 else None

    def endpoint(self, box: str, listen_port: int, seed_public_port: int | None) -> Endpoint | None:
        """The public address of a server, or None when nothing dialable is known.

        An ambiguous name dials nothing: its listen port at the shared address could
        be any of the instances behind it.
        """
        name = normalize_host(box)
        if name in self.ambiguous:
            return None
        listed = self.by_name.get(name)
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


# What a box is shown under when no listing names it: a fleet without listings, or not (yet).
LOCAL_PROVIDER = "local"
UNLISTED_PROVIDER = "unlisted"


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
    """Index every instance under each of its names; a name two instances claim is ambiguous."""
    boxes = tuple(boxes)
    claims: dict[str, list[ListedBox]] = defaultdict(list)
    for box in boxes:
        for name in dict.fromkeys(normalize_host(name) for name in box.names):
            claims[name].append(box)
    by_name = {name: only for name, (only, *others) in claims.items() if not others}
    ambiguous = {name: tuple(claimants) for name, claimants in claims.items()
                 if len(claimants) > 1}
    return Listings(tuple(configured), MappingProxyType(dict(failed)), MappingProxyType(by_name),
                    MappingProxyType(ambiguous), boxes)


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


def _price(value: Any, what: str) -> float | None:
    """A price per hour as the listing gives it: a finite number >= 0, or absent (None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        raise ListingError(f"{what}: {value!r} is not a price per hour")
    return float(value)


def _instance_id(value: Any, what: str) -> str:
    """Vast's instance id (an integer) as the ``fleet.hosts`` key that may name it."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ListingError(f"{what} has no instance id")
    return str(value)


def parse_vast(document: Any) -> list[ListedBox]:
    """One page of Vast's instance list: ``{"instances": [{"id", "public_ipaddr", "ports",
    "dph_total"}], "next_token"}``; an instance is named by its id and by its address."""
    if not isinstance(document, dict) or not isinstance(document.get("instances"), list):
        raise ListingError("vast: the answer has no 'instances' list")
    boxes = []
    for index, instance in enumerate(document["instances"]):
        what = f"vast: instances[{index}]"
        if not isinstance(instance, dict):
            raise ListingError(f"{what} is not an object")
        instance_id = _instance_id(instance.get("id"), what)
        address = normalize_host(str(instance.get("public_ipaddr") or ""))
        names = (instance_id, address) if address else (instance_id,)
        boxes.append(ListedBox("vast", names, address,
                               MappingProxyType(_docker_style_ports(instance.get("ports"), what)),
                               _price(instance.get("dph_total"), what)))
    return boxes


def _next_token(document: dict[str, Any]) -> str | None:
    token = document.get("next_token")
    if token is not None and (not isinstance(token, str) or not token):
        raise ListingError("vast: next_token is not a pagination cursor")
    return token


def parse_runpod(document: Any) -> list[ListedBox]:
    """RunPod v2's pod list: ``{"pods": [{"id", "cost", "runtime": {"ports": [...]}}]}``.

    ``runtime`` is null while a pod is not running: it is listed by its id, with
    no address. Each ``runtime.ports`` entry maps a ``private`` port to a
    ``public`` one on ``ip``; only TCP mappings are dialable (``http`` ones go
    through RunPod's proxy), and a pod's TCP ports share one address.
    """
    if not isinstance(document, dict) or not isinstance(document.get("pods"), list):
        raise ListingError("runpod: the answer has no 'pods' list")
    boxes = []
    for index, pod in enumerate(document["pods"]):
        what = f"runpod: pods[{index}]"
        if not isinstance(pod, dict) or not isinstance(pod.get("id"), str) or not pod["id"]:
            raise ListingError(f"{what} has no id")
        address, ports = _runpod_tcp_ports(pod.get("runtime"), what)
        names = (pod["id"], address) if address else (pod["id"],)
        boxes.append(ListedBox("runpod", names, address, MappingProxyType(ports),
                               _price(pod.get("cost"), what)))
    return boxes


def _runpod_tcp_ports(runtime: Any, what: str) -> tuple[str, dict[int, int]]:
    """The address and private → public TCP ports of a pod's ``runtime`` block."""
    if runtime is None:
        return "", {}
    if not isinstance(runtime, dict):
        raise ListingError(f"{what}: runtime is not an object")
    mappings = runtime.get("ports") or []
    if not isinstance(mappings, list):
        raise ListingError(f"{what}: runtime.ports is not a list")
    addresses, ports = set(), {}
    for number, mapping in enumerate(mappings):
        where = f"{what}: runtime.ports[{number}]"
        if not isinstance(mapping, dict) or not isinstance(mapping.get("type"), str):
            raise ListingError(f"{where} is not a port mapping")
        private = _port_number(mapping.get("private"), where)
        if mapping["type"] != "tcp" or mapping.get("public") is None:
            continue
        ports[private] = _port_number(mapping["public"], where)
        if mapping.get("ip") is not None:
            addresses.add(normalize_host(str(mapping["ip"])))
    addresses.discard("")
    if len(addresses) > 1:
        raise ListingError(f"{what} publishes its TCP ports on several addresses "
                           f"({', '.join(sorted(addresses))})")
    return (addresses.pop() if addresses else ""), ports


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
    except HttpCallError as exc:
        raise ListingError(str(exc)) from None


def fetch_vast(api_key: str, url: str | None, timeout: float) -> list[ListedBox]:
    """Every page of Vast's instance list; a cursor seen twice or too many pages is an error."""
    base = f"{(url or VAST_DEFAULT_URL).rstrip('/')}/instances/"
    boxes: list[ListedBox] = []
    token: str | None = None
    seen: set[str] = set()
    for _page in range(VAST_MAX_PAGES):
        query = f"?{urllib.parse.urlencode({'after_token': token})}" if token else ""
        document = _get_json(base + query, api_key, timeout)
        boxes += parse_vast(document)
        token = _next_token(document)
        if token is None:
            return boxes
        if token in seen:
            raise ListingError("vast: the instance list repeats a page (next_token seen before)")
        seen.add(token)
    raise ListingError(f"vast: the instance list has more than {VAST_MAX_PAGES} pages")


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
