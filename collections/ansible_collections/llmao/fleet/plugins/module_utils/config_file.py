# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``config.yaml``: the fleet section and the settings of llmao's neighbours.

This module reads and checks each key on its own; rules that join
``config.yaml`` with ``models.yaml`` (a row's model, the salt a row needs) live
in :mod:`fleet`, which is the only caller.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from .bearer import is_placeholder
from .box_tls import BoxTls, read_box_tls
from .config_errors import Problems, key_path
from .field_checks import Section, shown, type_name
from .hostnames import normalize_host
from .json_values import is_integer, is_number
from .payload_rules import (
    BOX_NAME_RE,
    FOLLOW_PROGRAM,
    MAX_SERVERS,
    ROLLOUT_LIMITS,
    SERVER_NAME_RE,
    clashes_with_follow_program,
)
from .pool_config import Budget, Pool, read_budget, read_pools
from .secret_strength import MAKE_ONE, published, secret_weakness, unpresentable
from .yaml_source import read_yaml

LISTEN_PORTS = (8001, 8002, 8003)
MAX_SERVERS_PER_BOX = MAX_SERVERS
# Bounds of the lifecycle knobs: a week to load, ten minutes for one probe, a thousand passes.
MAX_GRACE_S = 7 * 86400
MAX_PROBE_TIMEOUT_S = 600
MAX_PASSES = 1000
DEFAULT_STATE_FILE = "llmao-state.sqlite3"
DEFAULT_SESSION_LIFETIME_S = 12 * 3600.0
MAX_SESSION_LIFETIME_S = 30 * 24 * 3600.0
# At most this many servers of one model change at once, whatever rollout.max_unavailable says.
MAX_UNAVAILABLE = 100
# Bounds of admin.attempts: a window of a day at most, limits that still bound guessing.
MAX_ATTEMPT_WINDOW_S = 86400.0
MAX_ATTEMPTS_PER_PEER = 1000
MAX_ATTEMPTS_OVERALL = 100_000
MAX_TRUSTED_PEERS = 100
# fleet.binding (docs/box-identity.md): a name binds only through a bootstrap token an admin or
# a pool minted (enrolled), or to the first box that fetched it (first_fetch), or (off) goes to
# whoever holds the fleet key and names it, the seed's protocol exactly.
BINDING_ENROLLED = "enrolled"
BINDING_FIRST_FETCH = "first_fetch"
BINDING_OFF = "off"
BINDINGS = (BINDING_ENROLLED, BINDING_FIRST_FETCH, BINDING_OFF)


@dataclass(frozen=True)
class HostRow:
    """One ``fleet.hosts`` row as written: ``[model_name, port, name?, public_port?]``."""

    index: int
    model_name: str
    port: int
    name: str
    seed_public_port: int | None = None


@dataclass(frozen=True)
class Lifecycle:
    """Knobs of the server lifecycle, with the defaults docs/configuration.md documents."""

    health_grace_s: float = 900.0
    health_fail_threshold: int = 3
    rejected_passes: int = 3
    probe_connect_timeout_s: float = 3.0
    probe_timeout_s: float = 10.0


@dataclass(frozen=True)
class LoadKnobs:
    """When a server counts as saturated (docs/metrics.md), with the documented defaults."""

    saturated_passes: int = 3
    saturated_kv_usage: float = 0.9


@dataclass(frozen=True)
class Rollout:
    """``rollout:``: whether boxes follow their assignment, and how a change rolls
    (docs/rolling-changes.md). :mod:`rollout` holds the rules that use it."""

    follow_s: float | None = None
    max_unavailable: int = 1
    drain_s: float = 30.0

    @property
    def following(self) -> bool:
        """Whether boxes follow their assignment (the payload then carries ``rollout``)."""
        return self.follow_s is not None

    def payload(self) -> dict[str, float] | None:
        """The payload's ``rollout`` object (floats), or None when boxes do not follow."""
        if self.follow_s is None:
            return None
        return {"follow_s": float(self.follow_s), "drain_s": float(self.drain_s)}


@dataclass(frozen=True)
class AttemptLimits:
    """``admin.attempts``: the one limit on presenting ``admin.token`` (the login form and the
    admin API's bearer), per peer and from all peers, in a window; and the peers the overall
    limit leaves out (the controllers reconcile runs on), so that guesses spread over many
    addresses never lock them out. The server applies it (llmao_server.admin_attempts)."""

    per_peer: int = 5
    overall: int = 100
    window_s: float = 15 * 60.0
    trusted_peers: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    def trusts(self, address: str | None) -> bool:
        """Whether ``address`` (a TCP peer) is in one of ``trusted_peers``."""
        try:
            ip = ipaddress.ip_address(address or "")
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in network for network in self.trusted_peers)


@dataclass(frozen=True)
class Provider:
    """A provider listing to read: its API key and base URL, or the local engine's label."""

    kind: str
    api_key: str | None = field(default=None, repr=False)
    url: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class LiteLLMSection:
    """``litellm:``: the proxy reconcile writes routes to, and its master key."""

    url: str | None = None
    master_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ServerSection:
    """``server:``: where reconcile finds llmao's admin API, and the state store it keeps
    (a database URL, or a SQLite file made absolute against the config file's folder)."""

    url: str | None = None
    state: str = DEFAULT_STATE_FILE


@dataclass(frozen=True)
class AdminSection:
    """``admin:``: the token of the dashboard and the admin API, how long a login lasts,
    and the one limit on presenting the token."""

    token: str | None = field(default=None, repr=False)
    session_lifetime_s: float = DEFAULT_SESSION_LIFETIME_S
    attempts: AttemptLimits = AttemptLimits()


@dataclass(frozen=True)
class MetricsSection:
    """``metrics:``: the bearer of llmao-server's ``GET /metrics``; unset, it answers
    loopback peers only."""

    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class FleetSection:
    """``fleet:``: the secrets boxes and bearers are made from, the hosts, and the knobs of
    the lifecycle, the load and the binding."""

    key: str | None = field(default=None, repr=False)
    vllm_api_salt: str | None = field(default=None, repr=False)
    selfhost_api_key: str | None = field(default=None, repr=False)
    legacy_servers: frozenset[tuple[str, int]] = frozenset()
    hosts: dict[str, tuple[HostRow, ...]] = field(default_factory=dict)
    lifecycle: Lifecycle = Lifecycle()
    load: LoadKnobs = LoadKnobs()
    cost_per_hour: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # fleet.binding: one of BINDINGS, BINDING_FIRST_FETCH by default.
    binding: str = BINDING_FIRST_FETCH

    @property
    def binds_boxes(self) -> bool:
        """Whether a box name is bound to one box, which holds its box token."""
        return self.binding != BINDING_OFF

    def is_legacy(self, box: str, listen_port: int) -> bool:
        """A pair that predates the salt and serves ``selfhost_api_key`` (box normalised)."""
        return (normalize_host(box), listen_port) in self.legacy_servers


@dataclass(frozen=True)
class Settings:
    """Everything ``config.yaml`` says, checked key by key: one record per section, each
    read by its own reader."""

    fleet: FleetSection
    providers: dict[str, Provider] = field(default_factory=dict)
    litellm: LiteLLMSection = LiteLLMSection()
    server: ServerSection = ServerSection()
    admin: AdminSection = AdminSection()
    metrics: MetricsSection = MetricsSection()
    rollout: Rollout = Rollout()
    # box_tls: the fleet CA, when boxes serve HTTPS (docs/box-tls.md); None: plain HTTP.
    box_tls: BoxTls | None = None
    # (key path, why) for fleet.key and fleet.vllm_api_salt when weak: loaded, but warned about.
    weak_secrets: tuple[tuple[str, str], ...] = ()
    # pools: the boxes llmao rents itself, and budget: what they may cost (docs/pools.md).
    pools: Mapping[str, Pool] = field(default_factory=lambda: MappingProxyType({}))
    budget: Budget | None = None

    def secret_paths(self) -> dict[str, str | None]:
        """Every secret this file holds by its key path, as written (unset and placeholder
        values included): the one list. Log redaction and Ansible's censoring start from
        it (:meth:`secrets`), and the tokens must differ from every other one of it."""
        return {"fleet.key": self.fleet.key, "fleet.vllm_api_salt": self.fleet.vllm_api_salt,
                "fleet.selfhost_api_key": self.fleet.selfhost_api_key,
                "litellm.master_key": self.litellm.master_key,
                "admin.token": self.admin.token, "metrics.token": self.metrics.token,
                **{f"providers.{kind}.api_key": provider.api_key
                   for kind, provider in self.providers.items()}}

    def secrets(self) -> tuple[str | None, ...]:
        """The values of :meth:`secret_paths`."""
        return tuple(self.secret_paths().values())


# The secrets that guard llmao's own doors: each must differ from every other secret.
TOKENS = ("admin.token", "metrics.token")


def load_settings(path: str, problems: Problems, warnings: list[str],
                  signer: bool = False) -> Settings:
    """Read ``config.yaml`` at ``path``; problems and deprecation warnings are collected.
    ``signer``: llmao-server, the one place that needs ``box_tls.ca_key``."""
    top = Section(problems, path, (), read_yaml(path), required=True)
    fleet = top.sub("fleet", required=True)
    settings = Settings(
        _read_fleet(fleet, warnings),
        providers=_read_providers(top.sub("providers")),
        litellm=_read_litellm(top.sub("litellm")),
        server=_read_server(top.sub("server"), path),
        admin=_read_admin(top.sub("admin")),
        metrics=_read_metrics(top.sub("metrics")),
        rollout=_read_rollout(top.sub("rollout")),
        box_tls=read_box_tls(top.sub("box_tls"), path, warnings, signer),
    )
    pools = read_pools(top, settings.providers, read_rows, warnings)
    settings = replace(settings, pools=pools, budget=read_budget(top, pools))
    if settings.box_tls is not None and not settings.rollout.following:
        warnings.append(f"{path}: box_tls: boxes renew their certificates in the follow "
                        f"program, and rollout.follow_s is not set: a box renews only when it "
                        f"boots or is pushed, and its certificate expires after "
                        f"{settings.box_tls.leaf_days} days (docs/box-tls.md)")
    if settings.rollout.following:
        _check_follow_names(fleet, settings.fleet.hosts)
    check_distinct(top, settings.secret_paths())
    if signer:
        _refuse_published(top, settings)
    weak = weak_secrets({"fleet.key": settings.fleet.key,
                         "fleet.vllm_api_salt": settings.fleet.vllm_api_salt})
    warnings.extend(f"{path}: {key}: {why}. It loads, but a weak {key} is easier to guess; "
                    f"changing it means re-provisioning every box (docs/rotating-secrets.md). "
                    f"Make a strong one with: {MAKE_ONE}" for key, why in weak)
    top.close()
    return replace(settings, weak_secrets=weak)


def _refuse_published(top: Section, settings: Settings) -> None:
    """llmao-server refuses to start on a token its own example files publish."""
    for section, token in (("admin", settings.admin.token), ("metrics", settings.metrics.token)):
        if why := published(token):
            top.sub(section).problem("token", why)


def _read_fleet(fleet: Section, warnings: list[str]) -> FleetSection:
    """``fleet:``, closed (unknown keys refused) before the next section is read, so that
    problems come in file order."""
    key = fleet.text("key")
    if not is_placeholder(key) and (why := unpresentable(key)):
        fleet.problem("key", f"{why}: every box would be refused (403). Make one with: "
                             f"{MAKE_ONE}")
    section = FleetSection(
        key=key, vllm_api_salt=fleet.text("vllm_api_salt"),
        selfhost_api_key=fleet.text("selfhost_api_key"), legacy_servers=_read_legacy(fleet),
        hosts=_read_hosts(fleet, warnings), lifecycle=_read_lifecycle(fleet),
        load=_read_load(fleet), cost_per_hour=_read_costs(fleet), binding=_read_binding(fleet))
    fleet.close()
    return section


def _read_lifecycle(fleet: Section) -> Lifecycle:
    """The lifecycle knobs, keys of ``fleet:``."""
    return Lifecycle(
        health_grace_s=fleet.number("health_grace_s", Lifecycle.health_grace_s,
                                    maximum=MAX_GRACE_S),
        health_fail_threshold=fleet.integer("health_fail_threshold",
                                            Lifecycle.health_fail_threshold, maximum=MAX_PASSES),
        rejected_passes=fleet.integer("rejected_passes", Lifecycle.rejected_passes,
                                      maximum=MAX_PASSES),
        probe_connect_timeout_s=fleet.number("probe_connect_timeout_s",
                                             Lifecycle.probe_connect_timeout_s,
                                             maximum=MAX_PROBE_TIMEOUT_S),
        probe_timeout_s=fleet.number("probe_timeout_s", Lifecycle.probe_timeout_s,
                                     maximum=MAX_PROBE_TIMEOUT_S),
    )


def _read_load(fleet: Section) -> LoadKnobs:
    """When a server counts as saturated, keys of ``fleet:``."""
    return LoadKnobs(
        saturated_passes=fleet.integer("saturated_passes", LoadKnobs.saturated_passes,
                                       maximum=MAX_PASSES),
        saturated_kv_usage=fleet.number("saturated_kv_usage", LoadKnobs.saturated_kv_usage,
                                        maximum=1),
    )


def _read_litellm(section: Section) -> LiteLLMSection:
    litellm = LiteLLMSection(section.text("url"), section.text("master_key"))
    section.close()
    return litellm


def _read_server(section: Section, config_path: str) -> ServerSection:
    state = section.text("state", DEFAULT_STATE_FILE)
    server = ServerSection(section.text("url"), _state_location(config_path, state))
    section.close()
    return server


def _read_admin(section: Section) -> AdminSection:
    admin = AdminSection(
        token=section.token("token"),
        session_lifetime_s=section.number("session_lifetime_s", DEFAULT_SESSION_LIFETIME_S,
                                          maximum=MAX_SESSION_LIFETIME_S),
        attempts=_read_attempts(section.sub("attempts")))
    section.close()
    return admin


def _read_metrics(section: Section) -> MetricsSection:
    metrics = MetricsSection(section.token("token"))
    section.close()
    return metrics


def check_distinct(top: Section, secrets: dict[str, str | None]) -> None:
    """Each of :data:`TOKENS` set must differ from every other secret of the file
    (``secrets``: key path → value, :meth:`Settings.secret_paths`).

    A token equal to ``fleet.key`` would let any box, or anyone who reads a box's
    template, open what the token guards.
    """
    for path in TOKENS:
        token = secrets[path]
        if is_placeholder(token):
            continue
        same = sorted((other for other, value in secrets.items()
                       if other != path and value == token), key=_tokens_first)
        if same:
            top.problem(path, f"must differ from every other secret in this file; it is the "
                              f"same as {', '.join(same)}")


def _tokens_first(path: str) -> bool:
    # The order the problem has always named them in: the other token, then the rest.
    return path not in TOKENS


def weak_secrets(secrets: dict[str, str | None]) -> tuple[tuple[str, str], ...]:
    """(key path, why) for each secret set but weak, in the order given."""
    return tuple((path, weakness) for path, value in secrets.items()
                 if not is_placeholder(value) and (weakness := secret_weakness(value)))


def _state_location(config_path: str, state: str) -> str:
    """A database URL as given; a SQLite file relative to the config file's folder."""
    if "://" in state or os.path.isabs(state):
        return state
    return os.path.join(os.path.dirname(os.path.abspath(config_path)), state)


def _read_binding(fleet: Section) -> str:
    """``fleet.binding``: one of :data:`BINDINGS`. YAML 1.1 reads an unquoted ``off`` as
    false, so false is taken as ``off``, the word the docs write."""
    value = fleet.raw("binding", BINDING_FIRST_FETCH)
    if value is False:
        return BINDING_OFF
    if not isinstance(value, str) or value not in BINDINGS:
        fleet.problem("binding", f"must be one of {', '.join(BINDINGS)}, not {shown(value)}")
        return BINDING_FIRST_FETCH
    return value


def _read_rollout(section: Section) -> Rollout:
    """``rollout:``, bounded as the payload rule bounds what a box follows."""
    follow_low, follow_high = ROLLOUT_LIMITS["follow_s"]
    drain_low, drain_high = ROLLOUT_LIMITS["drain_s"]
    rollout = Rollout(
        follow_s=section.number("follow_s", None, minimum=follow_low, maximum=follow_high),
        max_unavailable=section.integer("max_unavailable", Rollout.max_unavailable,
                                        maximum=MAX_UNAVAILABLE),
        drain_s=section.number("drain_s", Rollout.drain_s, minimum=drain_low,
                               maximum=drain_high),
    )
    section.close()
    return rollout


def _check_follow_names(fleet: Section, hosts: Mapping[str, tuple[HostRow, ...]]) -> None:
    """While boxes follow, a server named ``follow`` or ``llmao-follow`` would take the
    follow program's name, and every box would refuse its assignment: refused here."""
    for box, rows in hosts.items():
        for row in rows:
            if clashes_with_follow_program(row.name):
                fleet.problem(f"hosts.{box}[{row.index}]",
                              f"the name {row.name!r} is the follow program's "
                              f"({FOLLOW_PROGRAM}) while rollout.follow_s is set; give the "
                              "row another name (a third element)")


def _read_attempts(section: Section) -> AttemptLimits:
    """``admin.attempts``; ``trusted_peers`` is a list of addresses or networks (CIDR)."""
    limits = AttemptLimits(
        per_peer=section.integer("per_peer", AttemptLimits.per_peer,
                                 maximum=MAX_ATTEMPTS_PER_PEER),
        overall=section.integer("overall", AttemptLimits.overall, maximum=MAX_ATTEMPTS_OVERALL),
        window_s=section.number("window_s", AttemptLimits.window_s, minimum=1,
                                maximum=MAX_ATTEMPT_WINDOW_S),
        trusted_peers=_read_networks(section, "trusted_peers"),
    )
    section.close()
    return limits


def _read_networks(section: Section, key: str) -> tuple[ipaddress.IPv4Network |
                                                        ipaddress.IPv6Network, ...]:
    """A list of IP addresses or networks (``203.0.113.5``, ``2001:db8::/64``)."""
    value = section.raw(key, None)
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TRUSTED_PEERS:
        section.problem(key, f"must be a list of at most {MAX_TRUSTED_PEERS} IP addresses or "
                             f"networks (CIDR), not {shown(value)}")
        return ()
    networks = []
    for index, entry in enumerate(value):
        try:
            if not isinstance(entry, str):  # ip_network would read an integer as an address
                raise TypeError(entry)
            networks.append(ipaddress.ip_network(entry.strip(), strict=True))
        except (TypeError, ValueError):
            section.problem(f"{key}[{index}]", f"must be an IP address or a network such as "
                                               f"203.0.113.0/28 (no host bits set), not "
                                               f"{shown(entry)}")
    return tuple(networks)


def _read_costs(fleet: Section) -> Mapping[str, float]:
    """``fleet.cost_per_hour``: box to its price per hour, for boxes no listing prices."""
    value = fleet.raw("cost_per_hour", None)
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, dict):
        fleet.problem("cost_per_hour", f"must be a mapping of box name to a price per hour, "
                                       f"not {type_name(value)}")
        return MappingProxyType({})
    costs = {}
    for box, price in value.items():
        if not isinstance(box, str) or not normalize_host(box):
            fleet.problem(f"cost_per_hour.{box}", "a box name must be a non-empty string")
        elif not is_number(price) or price < 0:
            fleet.problem(f"cost_per_hour.{box}", f"must be a price per hour of 0 or more, "
                                                  f"not {price!r}")
        else:
            costs[normalize_host(box)] = float(price)
    return MappingProxyType(costs)


def _read_legacy(fleet: Section) -> frozenset[tuple[str, int]]:
    value = fleet.raw("legacy_servers", None)
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        fleet.problem("legacy_servers", f"must be a list of [host, port] pairs, "
                                        f"not {type_name(value)}")
        return frozenset()
    pairs = set()
    for index, pair in enumerate(value):
        ok = (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
              and normalize_host(pair[0]) and _is_port(pair[1]))
        if not ok:
            fleet.problem(f"legacy_servers[{index}]", "must be a [host, listen_port] pair")
            continue
        pairs.add((normalize_host(pair[0]), pair[1]))
    return frozenset(pairs)


def _read_hosts(fleet: Section, warnings: list[str]) -> dict[str, tuple[HostRow, ...]]:
    value = fleet.raw("hosts", None)
    if not isinstance(value, dict):
        fleet.problem("hosts", "is required (write {} for an empty fleet)" if value is None
                      else f"must be a mapping of box name to rows, not {type_name(value)}")
        return {}
    hosts: dict[str, tuple[HostRow, ...]] = {}
    for raw_name, rows in value.items():
        if not isinstance(raw_name, str) or not normalize_host(raw_name):
            fleet.problem(f"hosts.{raw_name}", "a box name must be a non-empty string "
                                               "(quote it in YAML)")
            continue
        name = normalize_host(raw_name)
        if not BOX_NAME_RE.match(name):
            fleet.problem(f"hosts.{shown(raw_name)}", "a box name must be 1 to 253 printable "
                          "ASCII characters without spaces: a box sends it as a header")
            continue
        if name in hosts:
            fleet.problem(f"hosts.{raw_name}", f"names the same box as another key ({name})")
            continue
        hosts[name] = read_rows(fleet, f"hosts.{raw_name}", rows, warnings)
    return hosts


def read_rows(fleet: Section, where: str, rows: Any,
              warnings: list[str]) -> tuple[HostRow, ...]:
    """A box's rows, at ``where`` under ``fleet`` (``hosts.<box>``, or a pool's ``serve``)."""
    if rows is None:
        return ()
    if not isinstance(rows, list):
        fleet.problem(where, f"must be a list of [model_name, port] rows, not {type_name(rows)}")
        return ()
    if len(rows) > MAX_SERVERS_PER_BOX:
        fleet.problem(where, f"has {len(rows)} rows; a box runs at most {MAX_SERVERS_PER_BOX}")
    parsed: list[HostRow] = []
    for index, row in enumerate(rows):
        parsed_row = _read_row(fleet, f"{where}[{index}]", index, row)
        if parsed_row is None:
            continue
        if parsed_row.seed_public_port is not None:
            warnings.append(f"{fleet.source}: {key_path(*fleet.path, where)}[{index}]: "
                            f"the fourth element "
                            f"(public port) is deprecated; a provider listing replaces it")
        for earlier in parsed:
            if earlier.port == parsed_row.port:
                fleet.problem(f"{where}[{index}]", f"duplicate port {parsed_row.port}")
            if earlier.name == parsed_row.name:
                fleet.problem(f"{where}[{index}]", f"duplicate name {parsed_row.name!r} "
                              "(give one of the rows a third element)")
        parsed.append(parsed_row)
    return tuple(parsed)


def _read_row(fleet: Section, where: str, index: int, row: Any) -> HostRow | None:
    if not isinstance(row, list) or not 2 <= len(row) <= 4:
        fleet.problem(where, "must be [model_name, port] or [model_name, port, name]")
        return None
    model_name, port = row[0], row[1]
    name = row[2] if len(row) >= 3 else model_name
    public = row[3] if len(row) == 4 else None
    ok = True
    if not isinstance(model_name, str) or not model_name:
        fleet.problem(where, "the model name (first element) must be a non-empty string")
        ok = False
    if not _is_port(port):
        fleet.problem(where, "the port (second element) must be an integer port, "
                             f"not {shown(port)}")
        ok = False
    if not _is_program_name(name):
        fleet.problem(where, f"the name {shown(name)} cannot name a Supervisor program; use at "
                             "most 64 letters, digits, '.', '_' or '-', starting with a letter "
                             "or digit (a third element sets it)")
        ok = False
    if public is not None and not _is_port(public):
        fleet.problem(where, "the public port (fourth element) must be a port, "
                             f"not {shown(public)}")
        ok = False
    return HostRow(index, model_name, port, name, public) if ok else None


def _is_port(value: Any) -> bool:
    return is_integer(value) and 0 < value < 65536


def _is_program_name(value: Any) -> bool:
    return isinstance(value, str) and SERVER_NAME_RE.match(value) is not None


def _read_providers(section: Section) -> dict[str, Provider]:
    """Vast and RunPod need an API key; ``docker`` (the local engine) names its label."""
    providers = {}
    for kind in ("vast", "runpod"):
        sub = section.sub(kind)
        api_key, url = sub.text("api_key"), sub.text("url")
        sub.close()
        if sub.mapping and not api_key:
            sub.problem("api_key", "is required to enable this provider listing")
        elif api_key:
            providers[kind] = Provider(kind, api_key=api_key, url=url)
    if section.raw("docker", None) is not None:
        docker = section.sub("docker")
        providers["docker"] = Provider("docker", label=docker.text("label", "llmao.box"))
        docker.close()
    section.close()
    return providers
