# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet: ``config.yaml`` joined with ``models.yaml``, checked whole, indexed once.

:func:`load_fleet` is the single entry point of every face. It either returns a
complete :class:`Fleet` or raises :class:`ConfigError` listing every problem:
nothing is ever half-loaded. All per-box work (bearers, payload bytes,
revisions) happens here, so serving a box costs one dictionary lookup whatever
the fleet's size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from .bearer import BearerError, is_placeholder, server_bearer
from .config_errors import ConfigError, Problems
from .config_file import LISTEN_PORTS, HostRow, Settings, load_settings
from .hostnames import normalize_host
from .intent import BoxAssignment, IntendedServer, assign
from .models_file import ModelEntry, load_models
from .payload_rules import API_KEY_RE, BOX_NAME_RE, FOLLOW_PROGRAM, clashes_with_follow_program
from .pool_config import box_name

# At most this many pool members' assignments are kept built; past it they are built again.
POOL_MEMBERS_KEPT = 10_000


class ApprovalError(ValueError):
    """An admin's approval of an unknown box cannot be honoured; says why."""


@dataclass(frozen=True)
class Fleet:
    """The loaded, validated fleet. Immutable: a config change means a reload."""

    config_path: str
    models_path: str
    settings: Settings = field(repr=False)
    models: MappingProxyType = field(repr=False)
    assignments: MappingProxyType = field(repr=False)
    warnings: tuple[str, ...] = ()
    # What both files held when they were read (:func:`files_digest`): the modules of one
    # reconcile pass compare it, so that a pass acts on one version of the files.
    files_digest: str = ""
    # Pool members' assignments built so far (:meth:`pool_assignment`); not part of the value.
    _pool_built: dict = field(default_factory=dict, repr=False, compare=False)

    def assignment(self, box: str) -> BoxAssignment | None:
        """The configured assignment of a box name as a request gave it, or None."""
        return self.assignments.get(normalize_host(box))

    def servers(self) -> Iterator[IntendedServer]:
        """Every intended server, box by box in file order, rows in row order."""
        for assignment in self.assignments.values():
            yield from assignment.servers

    @property
    def fleet_key_configured(self) -> bool:
        return not is_placeholder(self.settings.fleet.key)

    def approved_assignment(self, box: str, model_names: Sequence[str]) -> BoxAssignment:
        """The assignment of an admin-approved unknown box: models on 8001, 8002, 8003."""
        box = normalize_host(box)
        reason = approval_refusal(self, box, model_names)
        if reason:
            raise ApprovalError(reason)
        servers = []
        for port, model_name in zip(LISTEN_PORTS, model_names, strict=False):
            try:
                key = server_bearer(self.settings, box, port)
            except BearerError as exc:
                raise ApprovalError(f"cannot derive a bearer: {exc}") from None
            servers.append(IntendedServer(box, model_name, model_name, port,
                                          self.models[model_name], key))
        return assign(box, tuple(servers), self.settings.rollout.payload(),
                      tls_payload(self.settings))

    def pool_assignment(self, box: str, pool: str) -> BoxAssignment:
        """The assignment of ``box``, a member of ``pool`` (an enrollment naming the pool
        made it one): the pool's rows, as a ``fleet.hosts`` box with those rows would get.
        Built once per (box, pool) and kept, so a member's fetch stays a lookup."""
        key = (normalize_host(box), pool)
        built = self._pool_built.get(key)
        if built is None:
            built = pool_box_assignment(self, box, pool)
            if len(self._pool_built) >= POOL_MEMBERS_KEPT:
                self._pool_built.clear()
            self._pool_built[key] = built
        return built

    def with_pool_members(self, members: Mapping[str, str]) -> Fleet:
        """This fleet plus each pool member (box → pool, llmao's enrollments), as the config
        server serves them: reconcile intends their servers like any other box's. A member
        of a pool ``config.yaml`` no longer has, or whose name joined ``fleet.hosts``, is left
        out with a warning (the server would not serve it either)."""
        assignments = dict(self.assignments)
        warnings = list(self.warnings)
        for box, pool in members.items():
            name = normalize_host(box)
            if name in self.assignments:
                warnings.append(f"pool member {name} ignored: it is in fleet.hosts")
            elif pool not in self.settings.pools:
                warnings.append(f"pool member {name} ignored: pool {pool!r} is not in "
                                "config.yaml")
            else:
                try:
                    assignments[name] = self.pool_assignment(name, pool)
                except ValueError as exc:
                    warnings.append(f"pool member {name} ignored: {exc}")
        return replace(self, assignments=MappingProxyType(assignments), warnings=tuple(warnings))

    def with_approvals(self, approvals: Mapping[str, Sequence[str]]) -> Fleet:
        """This fleet plus each admin-approved box, as the config server serves them.

        Reconcile gets the approvals in force from the server and must treat those
        boxes' servers like any other. An approval that cannot be honoured (its box
        joined ``fleet.hosts``, a model left ``models.yaml``) is left out with a
        warning rather than failing the pass: the server would not serve it either.
        """
        assignments = dict(self.assignments)
        warnings = list(self.warnings)
        for box, model_names in approvals.items():
            if normalize_host(box) in self.assignments:
                continue
            if isinstance(model_names, str) or not isinstance(model_names, Sequence):
                warnings.append(f"approval of {box} ignored: its models must be a list of names")
                continue
            try:
                assignment = self.approved_assignment(box, list(model_names))
            except ApprovalError as exc:
                warnings.append(f"approval of {box} ignored: {exc}")
                continue
            assignments[assignment.box] = assignment
        return replace(self, assignments=MappingProxyType(assignments), warnings=tuple(warnings))


def approval_refusal(fleet: Fleet, box: str, model_names: Sequence[str]) -> str | None:
    """Why these models cannot be approved for this box, or None when they can."""
    if not box:
        return "the box name is empty"
    if not BOX_NAME_RE.match(box):
        return "a box name must be printable ASCII without spaces, at most 253 characters"
    if box in fleet.assignments:
        return f"{box} is already in fleet.hosts; its rows decide what it runs"
    if not model_names:
        return "pick at least one model"
    if len(model_names) > len(LISTEN_PORTS):
        return f"a box runs at most {len(LISTEN_PORTS)} models, {len(model_names)} were picked"
    if len(set(model_names)) != len(model_names):
        return "each model can be picked once"
    for name in model_names:
        entry = fleet.models.get(name)
        if entry is None:
            return f"{name!r} is not in models.yaml"
        if not entry.self_hosted:
            return f"{name!r} is a commercial route, not a self-hosted model"
        if fleet.settings.rollout.following and clashes_with_follow_program(name):
            return (f"{name!r} would name a server as the follow program ({FOLLOW_PROGRAM}) "
                    "while boxes follow")
    return None


# Times a load reads the files again when they changed while it read them (an editor saving).
SETTLE_TRIES = 3


def load_fleet(config_path: str, models_path: str, signer: bool = False) -> Fleet:
    """Load, validate and index both files; raises :class:`ConfigError` on any problem.
    ``signer``: the caller is llmao-server, which signs box certificates (``box_tls.ca_key``
    must then be there and match).

    The fleet is one version of the two files: when either changed while they were read
    (the operator saved one during a reload or a pass), they are read again.
    """
    for _try in range(SETTLE_TRIES):
        before = files_digest(config_path, models_path)
        fleet = _load_fleet(config_path, models_path, signer)
        if files_digest(config_path, models_path) == before:
            return replace(fleet, files_digest=before)
    raise ConfigError([f"{config_path}: it or {models_path} changed each of the "
                       f"{SETTLE_TRIES} times they were read: load them once they are saved"])


def files_digest(config_path: str, models_path: str) -> str:
    """A short digest of what both files hold now (of why one cannot be read, if it cannot).
    It says whether two reads saw the same files, and nothing of a secret they hold."""
    digest = hashlib.sha256()
    for path in (config_path, models_path):
        try:
            with open(path, "rb") as stream:
                held = stream.read()
        except OSError as exc:
            held = f"unreadable: {type(exc).__name__}".encode()
        digest.update(len(held).to_bytes(8, "big") + held)
    return digest.hexdigest()[:16]


def _load_fleet(config_path: str, models_path: str, signer: bool) -> Fleet:
    problems = Problems()
    warnings: list[str] = []
    models = _models_or_problems(models_path, problems)
    try:
        settings = load_settings(config_path, problems, warnings, signer)
    except ConfigError as exc:  # unreadable or not YAML: nothing more to check
        problems.items.extend(exc.problems)
        problems.raise_if_any()
        raise
    _check_secrets(config_path, settings, problems)
    check_pool_rows(config_path, settings, models, problems)
    assignments = {}
    for box, rows in settings.fleet.hosts.items():
        servers = tuple(_intend(config_path, settings, models, box, row, problems)
                        for row in rows)
        assignments[box] = servers
    problems.raise_if_any()
    rollout, tls = settings.rollout.payload(), tls_payload(settings)
    built = {box: assign(box, servers, rollout, tls) for box, servers in assignments.items()}
    return Fleet(config_path, models_path, settings, MappingProxyType(models),
                 MappingProxyType(built), tuple(warnings))


def check_pool_rows(source: str, settings: Settings, models: Mapping[str, ModelEntry],
                    problems: Problems) -> None:
    """Each pool's ``serve`` rows through the rule of a ``fleet.hosts`` row (:func:`_intend`),
    for a box name of the pool's form, so that a pool that loads serves every box it rents."""
    for pool in settings.pools.values():
        probe_box = box_name(pool.name, "0" * 8)
        for row in pool.rows:
            _intend(source, settings, models, probe_box, row, problems,
                    f"pools.{pool.name}.serve")


def pool_box_assignment(fleet: Fleet, box: str, pool: str) -> BoxAssignment:
    """What ``box``, a member of ``pool``, serves: the pool's rows, built as a ``fleet.hosts``
    box's are (:func:`_intend`, :func:`intent.assign`), so the payload, bearer and revision
    rules stay one. Raises ``KeyError`` for a pool ``config.yaml`` does not have and
    ``ValueError`` for a name no box could send."""
    settings = fleet.settings
    name = normalize_host(box)
    if not BOX_NAME_RE.match(name):
        raise ValueError("a box name must be printable ASCII without spaces, "
                         "at most 253 characters")
    problems = Problems()
    servers = tuple(_intend(fleet.config_path, settings, fleet.models, name, row, problems,
                            f"pools.{pool}.serve") for row in settings.pools[pool].rows)
    problems.raise_if_any()
    return assign(name, servers, settings.rollout.payload(), tls_payload(settings))


def tls_payload(settings: Settings) -> dict[str, object] | None:
    """The payload's ``tls`` object, or None when boxes serve plain HTTP."""
    return None if settings.box_tls is None else settings.box_tls.payload()


def _models_or_problems(models_path: str, problems: Problems) -> dict[str, ModelEntry]:
    try:
        return load_models(models_path)
    except ConfigError as exc:
        problems.items.extend(exc.problems)
        return {}


def _check_secrets(source: str, settings: Settings, problems: Problems) -> None:
    """A row can only be served with the secret its bearer comes from."""
    rows = [(box, row) for box, box_rows in settings.fleet.hosts.items() for row in box_rows]
    salted = sum(1 for box, row in rows if not settings.fleet.is_legacy(box, row.port))
    legacy = len(rows) - salted
    if salted and is_placeholder(settings.fleet.vllm_api_salt):
        problems.add(source, "fleet.vllm_api_salt",
                     f"missing or CHANGE_ME, but {salted} host row(s) derive their bearer from it")
    if legacy and is_placeholder(settings.fleet.selfhost_api_key):
        problems.add(source, "fleet.selfhost_api_key",
                     f"missing or CHANGE_ME, but {legacy} legacy server(s) use it")
    elif legacy and not API_KEY_RE.match(settings.fleet.selfhost_api_key or ""):
        problems.add(source, "fleet.selfhost_api_key",
                     "must be 1 to 512 printable ASCII characters without spaces or quotes: "
                     "boxes pass it to vLLM through Supervisor's environment")


def _intend(source: str, settings: Settings, models: Mapping[str, ModelEntry], box: str,
            row: HostRow, problems: Problems, rows_at: str | None = None
            ) -> IntendedServer | None:
    """Join one row with its recipe and bearer, recording why it cannot be (at ``rows_at``,
    the rows' key path: ``fleet.hosts.<box>`` unless a pool's ``serve``)."""
    where = f"{rows_at or f'fleet.hosts.{box}'}[{row.index}]"
    legacy = settings.fleet.is_legacy(box, row.port)
    entry = models.get(row.model_name)
    if entry is None:
        problems.add(source, where, f"model {row.model_name!r} is not in models.yaml")
    elif not entry.self_hosted:
        problems.add(source, where, f"model {row.model_name!r} is a commercial route "
                                    "(model_info.self_hosted is not true)")
    if row.port not in LISTEN_PORTS and not legacy:
        problems.add(source, where, f"port {row.port} is not a listen port "
                                    f"({', '.join(map(str, LISTEN_PORTS))}) nor a legacy pair")
    if entry is None or not entry.self_hosted or problems.items:
        return None
    return IntendedServer(box, row.name, row.model_name, row.port, entry,
                          server_bearer(settings, box, row.port), legacy,
                          row.seed_public_port)
