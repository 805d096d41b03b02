# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Provider listings: which boxes a provider runs and where it publishes their ports.

A box only knows its listen ports; everything that dials it (probes, the
LiteLLM ``api_base``) needs the public address the provider maps them to.
Parsing is strict where it matters: an answer that does not have the documented
shape is a :class:`ListingError`, never an empty listing, because an empty
listing would make every box look "unlisted". One entry that cannot be read
costs that entry only: it is skipped and named in a warning (a bad price costs
only the price), and the box it names reads "unknown", never "unlisted".
Throttling (429) and server errors (5xx) are retried a bounded number of times,
waiting as long as the provider asks within a bounded budget.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .config_file import Provider
from .hostnames import is_ip_address, normalize_host
from .http_json import HttpCallError, call_json
from .json_values import is_integer, is_number
from .lifecycle import Listed
from .pool_config import read_label

# Vast's instance list as its OpenAPI document describes it (GET /api/v1/instances/, pages of
# at most 25 joined by ``next_token``), and RunPod's REST API v2 (GET /v2/pods), which replaced
# v1 (rest.runpod.io/v1, retired on 2026-11-15). A configured ``url`` replaces the base.
VAST_DEFAULT_URL = "https://console.vast.ai/api/v1"
RUNPOD_DEFAULT_URL = "https://api.runpod.io/v2"
VAST_MAX_PAGES = 400
SSH_PORT = 22
# A listing call answered 429 or 5xx is tried again: at most this many calls in all, and
# never more than this many seconds spent waiting between them (a provider asking for a
# longer wait gets the error instead: the next pass asks again).
LISTING_ATTEMPTS = 4
LISTING_RETRY_BUDGET_S = 20.0
# The wait between attempts when the provider does not say: doubled after each.
LISTING_BACKOFF_S = 0.5
# Statuses (lowercase) of an instance the provider has stopped: RunPod's desiredStatus
# EXITED/TERMINATED, Vast's actual_status exited/stopped. It is not billed its running rate.
STOPPED_STATUSES = frozenset({"exited", "stopped", "terminated"})
# The most GPUs an instance's listing may say it has; a count past it (or not a whole number)
# is taken as unknown, never as the box's cards.
MAX_LISTED_GPUS = 64


# How a fleet without listings knows a server's public address: it is its listen address.
LOCAL_SOURCE = "local: public equals listen"


class ListingError(RuntimeError):
    """A provider listing could not be read; the message holds no secret."""


@dataclass(frozen=True)
class Endpoint:
    """Where to dial one server: the public address and port, and how we know it (``source``:
    the provider's listing, the row's fourth element, or the listen port itself)."""

    host: str
    port: int
    source: str
    # ``https`` when the box serves TLS with a certificate of the fleet CA (docs/box-tls.md).
    scheme: str = "http"

    @property
    def address(self) -> str:
        """``host:port`` (``[v6]:port``), as a URL or a Prometheus target names it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://host:port/v1`` (``https`` under box TLS), the OpenAI base LiteLLM and the
        probes use."""
        return f"{self.scheme}://{self.address}/v1"


@dataclass(frozen=True)
class ListedBox:
    """One instance a provider runs: the names a ``fleet.hosts`` key may use, its ports.

    ``names`` starts with the provider's own id of the instance (Vast's instance id,
    RunPod's pod id, the local engine's label) and ends with its public address when
    it has one. ``price_per_hour`` is what the provider says the instance costs now,
    in USD per hour, None when the listing does not say (or the instance is stopped:
    its running rate is not what it costs). ``status`` is the provider's own word for
    the instance's state, lowercased (``running``, ``exited``...; empty when it gives
    none), ``interruptible`` whether it may stop it at will (a Vast bid, a RunPod
    spot pod). ``gpus`` is how many GPUs the provider says the instance has (Vast's
    ``num_gpus``, RunPod's ``gpuCount``), None when it does not say or says nonsense:
    reconcile weighs it against the rows before the box reports its own cards.
    """

    provider: str
    names: tuple[str, ...]
    public_ip: str
    ports: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    price_per_hour: float | None = None
    status: str = ""
    interruptible: bool = False
    gpus: int | None = None
    # The provider's own label of the instance (Vast's ``label``, RunPod's pod ``name``), as
    # given (at most 100 characters; empty when none): a pool's instance carries
    # llmao's (:func:`pool_config.read_label`), and nothing without it is ever destroyed.
    tag: str = ""

    @property
    def label(self) -> str:
        """``vast 1234``: how messages name the instance."""
        return " ".join((self.provider, *self.names[:1]))

    @property
    def stopped(self) -> bool:
        return self.status in STOPPED_STATUSES

    @property
    def preempted(self) -> bool:
        """An interruptible instance the provider stopped: its servers are gone, by its hand."""
        return self.interruptible and self.stopped


@dataclass(frozen=True)
class EntryProblem:
    """One listing entry read only in part: skipped whole, or read without its price.

    ``names`` are the names the entry could still be known by (its id, its address),
    empty when not even its id could be read.
    """

    provider: str
    where: str
    reason: str
    names: tuple[str, ...] = ()
    skipped: bool = True

    @property
    def message(self) -> str:
        """The warning: which entry, what was wrong, and what it cost."""
        known = f" ({self.provider} {self.names[0]})" if self.names else ""
        cost = "skipped; the rest of the listing stands" if self.skipped else \
            "its price is unknown"
        return f"{self.where}{known}: {self.reason}: {cost}"


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
    problems: tuple[EntryProblem, ...] = ()

    def listed(self, box: str) -> Listed:
        """What the listings say of ``box``; an entry that could not be read is no answer.

        A skipped entry that names the box, or one whose name could not be read at
        all (it might be this box), makes an otherwise unnamed box unknown, never
        unlisted.
        """
        if not self.configured:
            return Listed.NO_PROVIDERS
        name = normalize_host(box)
        listed = self.by_name.get(name)
        if listed is not None:
            return Listed.PREEMPTED if listed.preempted else Listed.NAMED
        if name in self.ambiguous or self.failed:
            return Listed.UNKNOWN
        skipped = [problem for problem in self.problems if problem.skipped]
        if any(not problem.names or name in problem.names for problem in skipped):
            return Listed.UNKNOWN
        return Listed.NOT_NAMED

    @property
    def warnings(self) -> list[str]:
        """One line per entry read only in part, naming it."""
        return [problem.message for problem in self.problems]

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

    def gpus(self, box: str) -> int | None:
        """How many GPUs the one instance named ``box`` has, as its listing says, or None."""
        listed = self.box(box)
        return listed.gpus if listed else None

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
        if not is_ip_address(box) and box != "localhost":
            return None
        if seed_public_port is not None:
            return Endpoint(box, seed_public_port, "fourth element")
        if not self.configured:
            return Endpoint(box, listen_port, LOCAL_SOURCE)
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
                   failed: Mapping[str, str],
                   problems: Iterable[EntryProblem] = ()) -> Listings:
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
                    MappingProxyType(ambiguous), boxes, tuple(problems))


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
    if not is_number(value) or value < 0:
        raise ListingError(f"{what}: {str(value)[:40]!r} is not a price per hour")
    return float(value)


def _gpu_count(value: Any) -> int | None:
    """A listing's GPU count: a whole number 0..:data:`MAX_LISTED_GPUS`, else unknown (None).

    A count that cannot be read costs nothing else: the entry stands without it.
    """
    if not is_integer(value) or not 0 <= value <= MAX_LISTED_GPUS:
        return None
    return value


def _instance_id(value: Any, what: str) -> str:
    """Vast's instance id (an integer) as the ``fleet.hosts`` key that may name it."""
    if not is_integer(value) or value <= 0:
        raise ListingError(f"{what} has no instance id")
    return str(value)


def _status(value: Any) -> str:
    """The provider's word for an instance's state, lowercased; empty when it gives none."""
    return value.strip().lower()[:40] if isinstance(value, str) else ""


class _Entries:
    """The entries of one listing page: each read alone, so one that cannot be read
    costs only itself (skipped, or its price only), as an :class:`EntryProblem`."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.boxes: list[ListedBox] = []
        self.problems: list[EntryProblem] = []

    def skip(self, what: str, reason: str, names: tuple[str, ...]) -> None:
        self.problems.append(EntryProblem(self.provider, what, _unprefixed(reason, what), names))

    def add(self, listing_id: str, address: str, ports: dict[int, int], price: Any,
            what: str, status: str, interruptible: bool, gpus: Any = None,
            tag: Any = None) -> None:
        """One instance, named by its id, by the box name of llmao's label when it carries
        one (a pool's box) and by its address when it has one; a stopped one's running rate
        is not its price."""
        tag = tag[:100] if isinstance(tag, str) else ""
        pooled = read_label(tag)
        names = (listing_id, *(pooled[1:] if pooled else ()), *((address,) if address else ()))
        try:
            priced = _price(price, what)
        except ListingError as exc:
            self.problems.append(EntryProblem(self.provider, what, _unprefixed(str(exc), what),
                                              names, skipped=False))
            priced = None
        self.boxes.append(ListedBox(self.provider, names, address, MappingProxyType(ports),
                                    None if status in STOPPED_STATUSES else priced, status,
                                    interruptible, _gpu_count(gpus), tag))


def _unprefixed(reason: str, what: str) -> str:
    """``vast: instances[3]: ports is not a mapping`` → ``ports is not a mapping``."""
    return reason.removeprefix(what).lstrip(": ")


def _known_names(*values: Any) -> tuple[str, ...]:
    """The names a skipped entry may still be known by (strings and positive integers)."""
    names = []
    for value in values:
        if is_integer(value) and value > 0:
            names.append(str(value))
        elif isinstance(value, str) and value.strip():
            names.append(normalize_host(value)[:253])
    return tuple(names)


def parse_vast(document: Any) -> tuple[list[ListedBox], list[EntryProblem]]:
    """One page of Vast's instance list: ``{"instances": [{"id", "public_ipaddr", "ports",
    "dph_total", "actual_status", "is_bid", "num_gpus", "label"}], "next_token"}``; an
    instance is named by its id, its pool box name (llmao's label) and its address. The instances
    read, and those that could not be."""
    if not isinstance(document, dict) or not isinstance(document.get("instances"), list):
        raise ListingError("vast: the answer has no 'instances' list")
    entries = _Entries("vast")
    for index, instance in enumerate(document["instances"]):
        what = f"vast: instances[{index}]"
        if not isinstance(instance, dict):
            entries.skip(what, "is not an object", ())
            continue
        try:
            instance_id = _instance_id(instance.get("id"), what)
            address = normalize_host(str(instance.get("public_ipaddr") or ""))
            ports = _docker_style_ports(instance.get("ports"), what)
        except ListingError as exc:
            entries.skip(what, str(exc), _known_names(instance.get("id"),
                                                      instance.get("public_ipaddr")))
            continue
        entries.add(instance_id, address, ports, instance.get("dph_total"), what,
                    _status(instance.get("actual_status")), instance.get("is_bid") is True,
                    instance.get("num_gpus"), instance.get("label"))
    return entries.boxes, entries.problems


def _next_token(document: dict[str, Any]) -> str | None:
    token = document.get("next_token")
    if token is not None and (not isinstance(token, str) or not token):
        raise ListingError("vast: next_token is not a pagination cursor")
    return token


def parse_runpod(document: Any) -> tuple[list[ListedBox], list[EntryProblem]]:
    """RunPod v2's pod list: ``{"pods": [{"id", "cost", "desiredStatus", "interruptible",
    "gpuCount", "name", "runtime": {"ports": [...]}}]}``; the pods read, and those that could
    not be.

    ``runtime`` is null while a pod is not running: it is listed by its id, with
    no address. Each ``runtime.ports`` entry maps a ``private`` port to a
    ``public`` one on ``ip``; only TCP mappings are dialable (``http`` ones go
    through RunPod's proxy), and a pod's TCP ports share one address.
    """
    if not isinstance(document, dict) or not isinstance(document.get("pods"), list):
        raise ListingError("runpod: the answer has no 'pods' list")
    entries = _Entries("runpod")
    for index, pod in enumerate(document["pods"]):
        what = f"runpod: pods[{index}]"
        pod_id = pod.get("id") if isinstance(pod, dict) else None
        try:
            if not isinstance(pod_id, str) or not pod_id.strip():
                raise ListingError(f"{what} has no id")
            address, ports = _runpod_tcp_ports(pod.get("runtime"), what)
        except ListingError as exc:
            entries.skip(what, str(exc), _known_names(pod_id))
            continue
        entries.add(pod_id, address, ports, pod.get("cost"), what,
                    _status(pod.get("desiredStatus")), pod.get("interruptible") is True,
                    pod.get("gpuCount"), pod.get("name"))
    return entries.boxes, entries.problems


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


class _Caller:
    """One provider's GETs for one read of its listing, retried while it throttles.

    A 429 or 5xx is tried again, :data:`LISTING_ATTEMPTS` calls at most, after the
    wait the provider asks for (``Retry-After``, RunPod's ``RateLimit``) or a doubling
    backoff; the waits of the whole read (every page) share
    :data:`LISTING_RETRY_BUDGET_S`. The whole read (every page, every attempt) has one
    deadline, that budget plus :data:`LISTING_ATTEMPTS` calls' timeouts: past it no call
    is begun and no wait started, so a slow or throttled listing of 400 pages costs a
    pass a bounded time too. Any other error, a wait past the budget, and the deadline
    passed are the listing's error at once (its boxes unknown, never unlisted).
    """

    def __init__(self, api_key: str, timeout: float) -> None:
        self.api_key = api_key
        self.timeout = timeout
        self.waited = 0.0
        self.allowed = LISTING_RETRY_BUDGET_S + LISTING_ATTEMPTS * timeout
        self.deadline = time.monotonic() + self.allowed

    def get(self, url: str) -> Any:
        """The provider's answer, through the one HTTP call that never follows a redirect."""
        backoff, attempt = LISTING_BACKOFF_S, 1
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise ListingError(f"the listing read took more than {self.allowed:.0f} s")
            try:
                return call_json("GET", url, self.api_key, timeout=min(self.timeout, left))
            except HttpCallError as exc:
                wait = exc.retry_after if exc.retry_after is not None else backoff
                if not _retryable(exc) or attempt == LISTING_ATTEMPTS:
                    raise ListingError(_after_attempts(str(exc), attempt)) from None
                if self.waited + wait > LISTING_RETRY_BUDGET_S:
                    raise ListingError(f"{exc} (asked to wait {wait:.0f} s more, past the "
                                       f"{LISTING_RETRY_BUDGET_S:.0f} s a listing may wait)"
                                       ) from None
                if time.monotonic() + wait >= self.deadline:
                    raise ListingError(f"{exc} (asked to wait {wait:.0f} s more, past the "
                                       f"{self.allowed:.0f} s the listing read may take)"
                                       ) from None
            time.sleep(wait)
            self.waited += wait
            backoff, attempt = backoff * 2, attempt + 1


def _retryable(exc: HttpCallError) -> bool:
    return exc.status is not None and (exc.status == 429 or 500 <= exc.status < 600)


def _after_attempts(message: str, attempts: int) -> str:
    return message if attempts == 1 else f"{message} (after {attempts} attempts)"


@dataclass
class _Read:
    """What one provider's listing gave: its instances and the entries it could not read."""

    boxes: list[ListedBox] = field(default_factory=list)
    problems: list[EntryProblem] = field(default_factory=list)

    def add(self, parsed: tuple[list[ListedBox], list[EntryProblem]]) -> None:
        self.boxes += parsed[0]
        self.problems += parsed[1]


def fetch_vast(provider: Provider, timeout: float) -> _Read:
    """Every page of Vast's instance list; a cursor seen twice or too many pages is an error."""
    base = f"{(provider.url or VAST_DEFAULT_URL).rstrip('/')}/instances/"
    caller = _Caller(provider.api_key, timeout)
    read = _Read()
    token: str | None = None
    seen: set[str] = set()
    for _page in range(VAST_MAX_PAGES):
        query = f"?{urllib.parse.urlencode({'after_token': token})}" if token else ""
        document = caller.get(base + query)
        read.add(parse_vast(document))
        token = _next_token(document)
        if token is None:
            return read
        if token in seen:
            raise ListingError("vast: the instance list repeats a page (next_token seen before)")
        seen.add(token)
    raise ListingError(f"vast: the instance list has more than {VAST_MAX_PAGES} pages")


def fetch_runpod(provider: Provider, timeout: float) -> _Read:
    """Every pod, those of Instant Clusters included (RunPod leaves them out unless asked)."""
    read = _Read()
    read.add(parse_runpod(_Caller(provider.api_key, timeout).get(
        f"{(provider.url or RUNPOD_DEFAULT_URL).rstrip('/')}/pods?includeClusterPods=true")))
    return read


def fetch_docker(provider: Provider, timeout: float) -> _Read:
    """Containers of the local engine carrying the provider's label, as the tests and the demo
    run them."""
    return _Read(_docker_containers(provider.label, timeout))


def _docker_containers(label: str, timeout: float) -> list[ListedBox]:
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


# How each kind of provider ``config.yaml`` can name is listed.
FETCHERS: Mapping[str, Callable[[Provider, float], _Read]] = MappingProxyType({
    "vast": fetch_vast, "runpod": fetch_runpod, "docker": fetch_docker})


def read_listings(providers: Mapping[str, Provider], timeout: float) -> Listings:
    """Read every configured listing; a failed one is remembered, never taken as empty,
    and an entry that could not be read is remembered with the rest of its listing."""
    read = _Read()
    failed: dict[str, str] = {}
    for kind, provider in providers.items():
        try:
            one = FETCHERS[kind](provider, timeout)
        except ListingError as exc:
            failed[kind] = str(exc)
            continue
        read.boxes += one.boxes
        read.problems += one.problems
    return index_listings(providers, read.boxes, failed, read.problems)
