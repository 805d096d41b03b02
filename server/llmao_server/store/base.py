"""What the server remembers about the fleet, and the one interface every store implements.

The box API writes (fetch times, unknown boxes, applied revisions), reconcile
writes its latest pass (verdicts, drift); the dashboard and reconcile read.
Every worker of a server, and later every server behind a load balancer, must
see the same state, so it lives in a database rather than in a process. The
interface is kept narrow so that a PostgreSQL store can stand beside the SQLite
one without the callers knowing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Phase, Turn

UNKNOWN_LIMIT = 50
# Peers whose admin credential attempts are counted; the oldest windows go first.
ATTEMPT_PEER_LIMIT = 1000
# The scope of attempts from everyone; no peer address is written like this.
OVERALL_SCOPE = "*"
# The load history (docs/metrics.md): every pass of the last HISTORY_FULL_S at full
# resolution, one per HISTORY_BUCKET_S before that, none older than HISTORY_KEEP_S, and
# never more than HISTORY_LIMIT samples whoever posts how often.
HISTORY_FULL_S = 2 * 3600.0
HISTORY_BUCKET_S = 600.0
HISTORY_KEEP_S = 48 * 3600.0
HISTORY_LIMIT = 1000
# The latest decisions kept per pool (the dashboard shows the last few).
POOL_DECISIONS_KEPT = 50


class StoreError(RuntimeError):
    """The store cannot be opened or used; the message names it, never a secret."""


@dataclass(frozen=True)
class UnknownBox:
    """A name that presented the fleet key but is not in ``fleet.hosts``."""

    name: str
    first_seen: float
    last_seen: float
    count: int


@dataclass(frozen=True)
class Approval:
    """An admin's word that an unknown box may run these models (in port order)."""

    box: str
    models: tuple[str, ...]
    approved_by: str
    approved_at: float


@dataclass(frozen=True)
class AppliedServer:
    """One server as the box says it started it: no secret."""

    name: str
    port: int
    served_model_name: str


@dataclass(frozen=True)
class AppliedCard:
    """One GPU as the box says nvidia-smi reported it."""

    index: int
    name: str
    memory_total_mib: int


@dataclass(frozen=True)
class AppliedReport:
    """The revision a box says it applied, and when it said so; its cards and which server
    runs on which (empty when the box could not read its cards, or predates them)."""

    box: str
    revision: str
    applied_at: str
    servers: tuple[AppliedServer, ...]
    reported_at: float
    cards: tuple[AppliedCard, ...] = ()
    placement: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class ReconcilePass:
    """The latest reconcile pass as reconcile posted it: one verdict per server (by its
    deployment id, with the lifecycle memory the next pass needs), the drift, and when."""

    pass_at: float
    verdicts: Mapping[str, Mapping[str, Any]]
    drift: tuple[Mapping[str, Any], ...]
    recorded_at: float
    # Per model and per box loads (docs/metrics.md); empty from a reconcile older than them.
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    boxes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadSample:
    """What the charts draw from one pass: a few figures per server (by deployment id)
    and per model, each a number or None (unknown)."""

    pass_at: float
    servers: Mapping[str, Mapping[str, float | None]]
    models: Mapping[str, Mapping[str, float | None]]


@dataclass(frozen=True)
class PassLease:
    """The fleet-wide reconcile pass lease: which pass holds it (its ``lease_id``, known only
    to that pass and the store), who that is (hostname and pid, no secret), since and until."""

    lease_id: str
    holder: str
    taken_at: float
    expires_at: float


@dataclass(frozen=True)
class BoxBinding:
    """A box name bound to one holder (docs/box-identity.md): only the SHA-256 of its token is
    kept. ``token_hash`` empty: released (kept so that every worker sees the release, with
    the ``next_claimant`` the release named, if any); ``seq`` orders the changes, so a worker
    reads only what is new. ``holder`` is ``box``, or ``controller`` for a name the push path
    owns (no box holds its token); ``pool`` the pool an enrollment made the name a member of."""

    box: str
    token_hash: str = field(repr=False)
    confirmed: bool
    bound_at: float
    peer: str | None
    instance: str | None
    seq: int
    holder: str = "box"
    pool: str | None = None
    next_claimant: str | None = None

    @property
    def bound(self) -> bool:
        return bool(self.token_hash)


@dataclass(frozen=True)
class Enrollment:
    """A name an admin (or a pool) enrolled: the SHA-256 of its one-time bootstrap token, until
    it expires or a box uses it, and the pool it makes the name a member of."""

    box: str
    token_hash: str = field(repr=False)
    expires_at: float
    pool: str | None
    created_at: float
    created_by: str


@dataclass(frozen=True)
class BindingWrite:
    """What one binding decision writes: the name's binding as it is to be (its ``seq`` is the
    store's to give), and whether the name's enrollment is used up and the leaves llmao
    issued to the name until now are revoked (the name passes to another holder)."""

    binding: BoxBinding
    drop_enrollment: bool = False
    revoke_leaves: bool = False


@dataclass(frozen=True)
class IssuedLeaf:
    """A certificate llmao signed for a box (docs/box-tls.md), by its serial (decimal)."""

    serial: str
    box: str
    not_after: float
    issued_at: float
    by_controller: bool
    revoked: bool = False


@dataclass(frozen=True)
class BindingConflict:
    """Refused claims of one name: how many, the latest when and from which peer, and the peer
    and kind of the name's holder (None when nobody holds it: the name waits for enrollment)."""

    box: str
    count: int
    last_at: float
    last_peer: str | None
    holder_peer: str | None = None
    holder: str | None = None


@dataclass(frozen=True)
class PoolsReport:
    """What one pool pass tells (:mod:`llmao_server.pool_report` checked it): per pool its
    state (boxes, bounds, spend, budget), its decisions in order, and what they add to its
    counters ((counter, reason) → how many)."""

    at: float
    states: Mapping[str, Mapping[str, Any]]
    decisions: Mapping[str, tuple[Mapping[str, Any], ...]]
    counts: Mapping[str, Mapping[tuple[str, str], int]]


@dataclass(frozen=True)
class PoolRecord:
    """One pool as the store keeps it: its latest state and when, its latest decisions
    (newest first) and its counters since it was first reported."""

    pool: str
    state: Mapping[str, Any]
    reported_at: float
    decisions: tuple[Mapping[str, Any], ...]
    counts: Mapping[tuple[str, str], int]


class StateStore(ABC):
    """The fleet's observed state. Times are seconds since the epoch (``time.time()``)."""

    # The schema version (store/schema.py) the store had when this object opened it, and has
    # now that it is open (0 before: a new store, or one of 0.1.0, which kept no version).
    schema_versions: tuple[int, int]

    @abstractmethod
    def note_fetches(self, fetches: Mapping[str, float]) -> None:
        """Remember the latest config fetch of each box (box name → time)."""

    @abstractmethod
    def note_checks(self, checks: Mapping[str, float]) -> None:
        """Remember the latest follow check of each box (box name → time): a ``GET
        /vllm/config`` with ``If-None-Match``, which is not a fetch (it starts no Loading)."""

    @abstractmethod
    def check_times(self) -> dict[str, float]:
        """Box name → time of its latest follow check."""

    @abstractmethod
    def grant_turn(self, decide: Callable[[list[Turn]], Turn | str | None]) -> Turn | str | None:
        """Read every turn that is not done, ``decide`` (:func:`rollout.decide_turn` bound
        to a box's ask) and keep a granted turn as its box's latest, all in one transaction
        that no other grant or update interleaves with: two workers or instances never both
        grant past the limit. Returns the decision; what ``decide`` raises rolls back and
        propagates."""

    @abstractmethod
    def update_turn(self, box: str, revision: str, phase: Phase, why: str,
                    now: float) -> Turn:
        """Move the latest turn of ``box`` for ``revision`` to ``phase`` (atomically, as
        :meth:`Turn.moved` allows); raises ``TurnError`` when there is no such turn or it
        may not move so."""

    @abstractmethod
    def note_wait(self, box: str, revision: str) -> bool:
        """Remember that ``box`` was told to wait for ``revision``; whether that is the first
        time for this revision (the refusal is then audited), by one atomic write."""

    @abstractmethod
    def turns(self) -> list[Turn]:
        """Every box's latest turn, by box name."""

    @abstractmethod
    def note_unknown(self, sightings: Iterable[UnknownBox]) -> None:
        """Merge sightings of unknown names; only the newest :data:`UNKNOWN_LIMIT` are kept."""

    @abstractmethod
    def forget_unknown(self, names: Collection[str]) -> None:
        """Drop these names from the unknown list (they joined ``fleet.hosts``)."""

    @abstractmethod
    def record_applied(self, report: AppliedReport) -> None:
        """Keep a box's latest applied report, replacing the one before."""

    @abstractmethod
    def approve(self, approval: Approval) -> None:
        """Store (or replace) the approval of one box."""

    @abstractmethod
    def approval(self, box: str) -> Approval | None:
        """The approval of one box, if an admin gave one since the server started."""

    @abstractmethod
    def clear_approvals(self) -> None:
        """Forget every approval: approvals do not survive a restart, by design."""

    @abstractmethod
    def fetch_times(self) -> dict[str, float]:
        """Box name → time of its latest config fetch."""

    @abstractmethod
    def unknown_boxes(self) -> list[UnknownBox]:
        """The remembered unknown names, most recently seen first."""

    @abstractmethod
    def approvals(self) -> list[Approval]:
        """Every current approval, oldest first."""

    @abstractmethod
    def applied_reports(self) -> dict[str, AppliedReport]:
        """Box name → its latest applied report."""

    @abstractmethod
    def applied_revision(self, box: str) -> str | None:
        """The revision ``box`` last reported it applied, or None."""

    @abstractmethod
    def record_pass(self, record: ReconcilePass) -> None:
        """Keep this pass, replacing the one before, and add its load sample to the history,
        thinned and bounded (:data:`HISTORY_FULL_S`, :data:`HISTORY_LIMIT`)."""

    @abstractmethod
    def load_history(self, since: float, servers: bool = True) -> list[LoadSample]:
        """The kept load samples of passes at or after ``since``, oldest first; without
        their per server figures unless ``servers`` (the models' charts need none)."""

    @abstractmethod
    def last_pass(self) -> ReconcilePass | None:
        """The latest reconcile pass, or None before the first."""

    @abstractmethod
    def pass_stamp(self) -> tuple[float, float] | None:
        """``(pass_at, recorded_at)`` of the latest pass without reading the pass: which one
        is stored, so a reader can keep what it decoded until the next one."""

    @abstractmethod
    def claim_attempt(self, scope: str, now: float, window_s: float) -> tuple[int, float]:
        """Count one admin credential attempt in ``scope`` (a peer, or :data:`OVERALL_SCOPE`)
        by one atomic write, before the credential is looked at; return the attempts in
        the scope's window, this one included, and when that window opened.

        A window opens at a scope's first attempt and lasts ``window_s``; an attempt
        after it opens a new one. Only the :data:`ATTEMPT_PEER_LIMIT` peers with the
        newest windows are kept, so a caller cannot grow the table. Raises
        :class:`StoreError` when the count cannot be written.
        """

    @abstractmethod
    def release_attempt(self, peer: str, give_back_overall: bool) -> None:
        """The credential was right: forget ``peer``'s attempts and, when its attempt was
        counted overall (``give_back_overall``), give that one back."""

    @abstractmethod
    def server_secret(self, name: str, candidate: str) -> str:
        """The secret ``name`` every worker and instance shares: the first ``candidate``
        ever offered is kept (one atomic insert) and returned to everyone after."""

    @abstractmethod
    def open_session(self, session_id: str, token_check: str, now: float,
                     expires_at: float) -> None:
        """Remember an admin session until ``expires_at``; expired ones are dropped."""

    @abstractmethod
    def session_open(self, session_id: str, token_check: str, now: float) -> bool:
        """Whether this session was opened under this admin token and has not expired
        or ended."""

    @abstractmethod
    def note_token_in_force(self, token_check: str) -> None:
        """A server starts under the admin token ``token_check`` stands for. When another
        token was the last one in force, this one comes back (or is new): every session
        ever opened under it ends, so rolling a token back revives none. Sessions of the
        token it replaces stay, for instances not yet moved to this one. One transaction."""

    @abstractmethod
    def end_session(self, session_id: str) -> None:
        """Forget a session (its admin logged out): its cookie opens nothing after."""

    @abstractmethod
    def claim_pass_lease(self, lease_id: str, holder: str, now: float,
                         ttl_s: float) -> PassLease:
        """Take the pass lease for ``lease_id`` until ``now + ttl_s`` when it is free, expired
        or already this pass's (a renewal, which keeps the holder and since), by one atomic
        write; return the lease in force afterwards, whoever holds it."""

    @abstractmethod
    def pass_lease(self, now: float) -> PassLease | None:
        """The pass lease in force at ``now``, or None when free or expired."""

    @abstractmethod
    def release_pass_lease(self, lease_id: str) -> bool:
        """Give the lease back if ``lease_id`` holds it; whether it did."""

    @abstractmethod
    def decide_binding(self, box: str,
                       decide: Callable[[BoxBinding | None, Enrollment | None],
                                        tuple[BindingWrite | None, Any]]) -> Any:
        """Read ``box``'s binding and its enrollment, ``decide`` (a rule of
        :mod:`llmao_server.boxes.bindings`) and write what it returns, all in one transaction no
        other binding change interleaves with (every worker and instance): two callers never
        both bind a name. Returns what ``decide`` returned beside its write; what it raises
        rolls back and propagates."""

    @abstractmethod
    def enroll(self, enrollment: Enrollment) -> None:
        """Keep ``enrollment`` as the name's one outstanding enrollment (replacing any)."""

    @abstractmethod
    def enrollments(self, now: float) -> list[Enrollment]:
        """The enrollments not yet used nor expired at ``now``, by name."""

    @abstractmethod
    def record_leaf(self, leaf: IssuedLeaf) -> None:
        """Keep a leaf llmao signed; leaves expired a day or more are dropped."""

    @abstractmethod
    def issued_leaves(self, now: float) -> list[IssuedLeaf]:
        """Every leaf llmao signed that has not expired at ``now``, revoked ones included."""

    @abstractmethod
    def bindings_since(self, seq: int) -> list[BoxBinding]:
        """Every binding (released ones included) changed after ``seq``, in change order."""

    @abstractmethod
    def note_binding_conflict(self, box: str, peer: str | None, now: float) -> int:
        """Count one refused claim of the name ``box``; the claims counted so far."""

    @abstractmethod
    def binding_conflicts(self) -> list[BindingConflict]:
        """The refused claims of every name since it was last released or given to another
        holder, most recent first."""

    @abstractmethod
    def record_pools(self, report: PoolsReport) -> bool:
        """Keep a pool pass's report: each pool's state replaced, its decisions added (the
        newest :data:`POOL_DECISIONS_KEPT` kept), its counters increased; pools the report
        does not name are forgotten (config.yaml lost them). One transaction, one report at
        a time; a report not newer than the last one kept changes nothing (a post sent
        twice counts once). Whether it was kept."""

    @abstractmethod
    def pools(self) -> list[PoolRecord]:
        """Every reported pool, by name."""

    @abstractmethod
    def close(self) -> None:
        """Release this process's connections (before a fork, at exit)."""
