"""The state store in plain SQL, over any DB-API connection.

Every statement here is written so that SQLite and PostgreSQL both accept it
(``ON CONFLICT … DO UPDATE``, ``CASE`` rather than ``MAX``/``GREATEST``,
``DOUBLE PRECISION`` times), with ``?`` placeholders that a driver using
another parameter style gets rewritten. A subclass only says how to reach the
database: :meth:`SqlStore._connection`.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Phase, Turn, TurnError

from . import base, schema
from .history import load_sample

# A box's latest fetch (or check) time, kept unless older than the one held; ``{rows}``
# boxes a statement.
NOTE_TIMES = """
    INSERT INTO {table} (box, {column}) VALUES {rows}
    ON CONFLICT (box) DO UPDATE SET {column} = excluded.{column}
    WHERE excluded.{column} > {table}.{column}"""
# Times go to the store this many boxes a statement. One statement a box (executemany)
# made a worker's flush of 5,000 fetch times 5,000 rounds of the interpreter lock passed
# between the flusher and the thread answering fetches; SQLite takes 999 values at most.
TIMES_PER_STATEMENT = 400

KEEP_TURN = """
    INSERT INTO rollout_turns (box, turn) VALUES (?, ?)
    ON CONFLICT (box) DO UPDATE SET turn = excluded.turn"""

# Matches a done turn's record (Turn.record() as json.dumps writes it) and nothing else: in
# a text inside the record, a quote is escaped. Done turns decide nothing; on a large fleet
# they are most of the rows, so a grant leaves them undecoded.
DONE_TURN = f'%"phase": "{Phase.DONE.value}"%'

NOTE_WAIT = """
    INSERT INTO turn_waits (box, revision) VALUES (?, ?)
    ON CONFLICT (box) DO UPDATE SET revision = excluded.revision
    WHERE turn_waits.revision <> excluded.revision"""

NOTE_UNKNOWN = """
    INSERT INTO unknown_boxes (name, first_seen, last_seen, seen_count) VALUES (?, ?, ?, ?)
    ON CONFLICT (name) DO UPDATE SET
        first_seen = CASE WHEN excluded.first_seen < unknown_boxes.first_seen
                          THEN excluded.first_seen ELSE unknown_boxes.first_seen END,
        last_seen = CASE WHEN excluded.last_seen > unknown_boxes.last_seen
                         THEN excluded.last_seen ELSE unknown_boxes.last_seen END,
        seen_count = unknown_boxes.seen_count + excluded.seen_count"""

# Deleting on insert keeps the table at the limit whatever a caller sends.
TRIM_UNKNOWN = f"""
    DELETE FROM unknown_boxes WHERE name NOT IN (
        SELECT name FROM unknown_boxes ORDER BY last_seen DESC, name LIMIT {base.UNKNOWN_LIMIT})"""

FORGET_UNKNOWN = "DELETE FROM unknown_boxes WHERE name = ?"

RECORD_APPLIED = """
    INSERT INTO applied_reports (box, revision, applied_at, servers, reported_at)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (box) DO UPDATE SET revision = excluded.revision,
        applied_at = excluded.applied_at, servers = excluded.servers,
        reported_at = excluded.reported_at"""

RECORD_CARDS = """
    INSERT INTO box_cards (box, cards, placement) VALUES (?, ?, ?)
    ON CONFLICT (box) DO UPDATE SET cards = excluded.cards, placement = excluded.placement"""

RECORD_PASS = """
    INSERT INTO reconcile_pass (slot, pass_at, recorded_at, verdicts, drift)
    VALUES (1, ?, ?, ?, ?)
    ON CONFLICT (slot) DO UPDATE SET pass_at = excluded.pass_at,
        recorded_at = excluded.recorded_at, verdicts = excluded.verdicts,
        drift = excluded.drift"""

RECORD_LOADS = """
    INSERT INTO pass_loads (slot, models, boxes) VALUES (1, ?, ?)
    ON CONFLICT (slot) DO UPDATE SET models = excluded.models, boxes = excluded.boxes"""

RECORD_SAMPLE = """
    INSERT INTO load_samples (pass_at, servers, models) VALUES (?, ?, ?)
    ON CONFLICT (pass_at) DO UPDATE SET servers = excluded.servers, models = excluded.models"""

# Older than the full-resolution window (first ?, twice): keep the first sample of each
# HISTORY_BUCKET_S bucket. Older than HISTORY_KEEP_S (last ?): none. Then the newest
# HISTORY_LIMIT at most. (CAST rounds in PostgreSQL and truncates in SQLite: buckets
# either way.)
THIN_HISTORY = (f"""
    DELETE FROM load_samples WHERE pass_at < ? AND pass_at NOT IN (
        SELECT MIN(pass_at) FROM load_samples WHERE pass_at < ?
        GROUP BY CAST(pass_at / {base.HISTORY_BUCKET_S} AS BIGINT))""",
                "DELETE FROM load_samples WHERE pass_at < ?",
                f"""
    DELETE FROM load_samples WHERE pass_at NOT IN (
        SELECT pass_at FROM load_samples ORDER BY pass_at DESC LIMIT {base.HISTORY_LIMIT})""")

APPROVE = """
    INSERT INTO approvals (box, models, approved_by, approved_at) VALUES (?, ?, ?, ?)
    ON CONFLICT (box) DO UPDATE SET models = excluded.models,
        approved_by = excluded.approved_by, approved_at = excluded.approved_at"""

APPROVAL_COLUMNS = "box, models, approved_by, approved_at"

# An attempt after the scope's window has passed (window_start < the cut-off) opens a new one.
CLAIM_ATTEMPT = """
    INSERT INTO admin_attempts (scope, window_start, attempts) VALUES (?, ?, 1)
    ON CONFLICT (scope) DO UPDATE SET
        attempts = CASE WHEN admin_attempts.window_start < ? THEN 1
                        ELSE admin_attempts.attempts + 1 END,
        window_start = CASE WHEN admin_attempts.window_start < ? THEN excluded.window_start
                            ELSE admin_attempts.window_start END
    RETURNING attempts, window_start"""

TRIM_ATTEMPTS = f"""
    DELETE FROM admin_attempts WHERE scope <> '{base.OVERALL_SCOPE}' AND scope NOT IN (
        SELECT scope FROM admin_attempts WHERE scope <> '{base.OVERALL_SCOPE}'
        ORDER BY window_start DESC, scope LIMIT {base.ATTEMPT_PEER_LIMIT})"""

GIVE_BACK_ATTEMPT = f"""
    UPDATE admin_attempts SET attempts = attempts - 1
    WHERE scope = '{base.OVERALL_SCOPE}' AND attempts > 0"""


# Taken when expired (or never taken), renewed by its own pass; otherwise left as it is. The
# holder and since of a renewal stay those of the take.
CLAIM_PASS_LEASE = """
    INSERT INTO pass_lease (slot, lease_id, holder, taken_at, expires_at) VALUES (1, ?, ?, ?, ?)
    ON CONFLICT (slot) DO UPDATE SET
        holder = CASE WHEN pass_lease.lease_id = excluded.lease_id THEN pass_lease.holder
                      ELSE excluded.holder END,
        taken_at = CASE WHEN pass_lease.lease_id = excluded.lease_id THEN pass_lease.taken_at
                        ELSE excluded.taken_at END,
        lease_id = excluded.lease_id,
        expires_at = excluded.expires_at
    WHERE pass_lease.lease_id = excluded.lease_id OR pass_lease.expires_at <= excluded.taken_at"""

PASS_LEASE_COLUMNS = "lease_id, holder, taken_at, expires_at"

NEXT_BINDING_SEQ = "UPDATE binding_seq SET seq = seq + 1 WHERE slot = 1 RETURNING seq"

BINDING_COLUMNS = ("box, token_hash, confirmed, bound_at, peer, instance, seq, holder, pool, "
                   "next_claimant")

WRITE_BINDING = """
    INSERT INTO box_bindings (box, token_hash, confirmed, bound_at, peer, instance, seq, holder,
                              pool, next_claimant)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (box) DO UPDATE SET token_hash = excluded.token_hash,
        confirmed = excluded.confirmed, bound_at = excluded.bound_at, peer = excluded.peer,
        instance = excluded.instance, seq = excluded.seq, holder = excluded.holder,
        pool = excluded.pool, next_claimant = excluded.next_claimant"""

ENROLLMENT_COLUMNS = "box, token_hash, expires_at, pool, created_at, created_by"

KEEP_ENROLLMENT = f"""
    INSERT INTO enrollments ({ENROLLMENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (box) DO UPDATE SET token_hash = excluded.token_hash,
        expires_at = excluded.expires_at, pool = excluded.pool,
        created_at = excluded.created_at, created_by = excluded.created_by"""

LEAF_COLUMNS = "serial, box, not_after, issued_at, by_controller, revoked"
# A leaf is kept a day past its end, so a probe that verified it just before still finds it.
LEAF_KEPT_AFTER_S = 86400.0

NOTE_CONFLICT = """
    INSERT INTO binding_conflicts (box, claims, last_at, last_peer) VALUES (?, 1, ?, ?)
    ON CONFLICT (box) DO UPDATE SET claims = binding_conflicts.claims + 1,
        last_at = excluded.last_at, last_peer = excluded.last_peer
    RETURNING claims"""

KEEP_POOL_STATE = """
    INSERT INTO pool_states (pool, state, reported_at) VALUES (?, ?, ?)
    ON CONFLICT (pool) DO UPDATE SET state = excluded.state, reported_at = excluded.reported_at"""

ADD_POOL_COUNT = """
    INSERT INTO pool_counts (pool, counter, reason, count) VALUES (?, ?, ?, ?)
    ON CONFLICT (pool, counter, reason) DO UPDATE SET count = pool_counts.count + excluded.count"""

POOL_TABLES = ("pool_states", "pool_decisions", "pool_counts")

KEEP_FIRST_SECRET = """
    INSERT INTO server_secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"""

# The admin token in force, as a session's token_check: kept among the server secrets.
TOKEN_IN_FORCE = "admin-token-in-force"

KEEP_TOKEN_IN_FORCE = """
    INSERT INTO server_secrets (name, value) VALUES (?, ?)
    ON CONFLICT (name) DO UPDATE SET value = excluded.value"""

OPEN_SESSION = """
    INSERT INTO admin_sessions (id, token_check, opened_at, expires_at) VALUES (?, ?, ?, ?)"""


class SqlStore(base.StateStore):
    """:class:`~.base.StateStore` over a DB-API 2 connection; subclasses supply the connection."""

    placeholder = "?"
    # What the driver raises when a statement fails (the database is read-only, down…).
    driver_errors: ClassVar[tuple[type[Exception], ...]] = ()
    # The first statement of a transaction that reads the turns and writes one: it waits
    # for any other such transaction to end, so that decisions never interleave.
    turns_lock: ClassVar[str]
    # The first statement of the schema's upgrade: one opener at a time runs it.
    schema_lock: ClassVar[str]

    @abstractmethod
    def _connection(self) -> Any:
        """This process's (and thread's) open connection to the database."""

    def upgrade_schema(self) -> None:
        """Bring the schema to this release's version (:mod:`.schema`), all at once, under the
        schema lock: safe to run from several processes and instances at once."""
        with self._transaction() as cursor:
            cursor.execute(self.schema_lock)
            self.schema_versions = schema.upgrade(cursor, self._sql)

    # ------------------------------------------------------------------ writes

    def note_fetches(self, fetches: Mapping[str, float]) -> None:
        if fetches:
            self._write(*times_statements("box_fetches", "fetched_at", fetches))

    def note_checks(self, checks: Mapping[str, float]) -> None:
        if checks:
            self._write(*times_statements("box_checks", "checked_at", checks))

    def grant_turn(self, decide: Callable[[list[Turn]], Turn | str | None]) -> Turn | str | None:
        with self._store_errors("grant a turn"), self._transaction() as cursor:
            cursor.execute(self.turns_lock)
            cursor.execute(self._sql("SELECT turn FROM rollout_turns WHERE turn NOT LIKE ? "
                                     "ORDER BY box"), (DONE_TURN,))
            turns = [_turn(row) for row in cursor.fetchall()]
            decision = decide(turns)
            if isinstance(decision, Turn) and decision not in turns:
                cursor.execute(self._sql(KEEP_TURN),
                               (decision.box, json.dumps(decision.record())))
            return decision

    def update_turn(self, box: str, revision: str, phase: Phase, why: str,
                    now: float) -> Turn:
        with self._store_errors("update a turn"), self._transaction() as cursor:
            cursor.execute(self.turns_lock)
            cursor.execute(self._sql("SELECT turn FROM rollout_turns WHERE box = ?"), (box,))
            row = cursor.fetchone()
            held = _turn(row) if row else None
            if held is None or held.revision != revision:
                raise TurnError(f"{box} has no turn for revision {revision}")
            moved = held.moved(phase, why, now)
            cursor.execute(self._sql(KEEP_TURN), (box, json.dumps(moved.record())))
            return moved

    def note_wait(self, box: str, revision: str) -> bool:
        with self._store_errors("note a wait"), self._transaction() as cursor:
            cursor.execute(self._sql(NOTE_WAIT), (box, revision))
            return cursor.rowcount == 1

    def note_unknown(self, sightings: Iterable[base.UnknownBox]) -> None:
        rows = [(s.name, s.first_seen, s.last_seen, s.count) for s in sightings]
        if rows:
            self._write((NOTE_UNKNOWN, rows), (TRIM_UNKNOWN, [()]))

    def forget_unknown(self, names: Collection[str]) -> None:
        if names:
            self._write((FORGET_UNKNOWN, [(name,) for name in names]))

    def record_applied(self, report: base.AppliedReport) -> None:
        servers = json.dumps([[s.name, s.port, s.served_model_name] for s in report.servers])
        cards = json.dumps([[c.index, c.name, c.memory_total_mib] for c in report.cards])
        placement = json.dumps([[name, list(indices)] for name, indices in report.placement])
        self._write((RECORD_APPLIED, [(report.box, report.revision, report.applied_at,
                                       servers, report.reported_at)]),
                    (RECORD_CARDS, [(report.box, cards, placement)]))

    def approve(self, approval: base.Approval) -> None:
        self._write((APPROVE, [(approval.box, json.dumps(list(approval.models)),
                                approval.approved_by, approval.approved_at)]))

    def record_pass(self, record: base.ReconcilePass) -> None:
        thin_before, keep_after = record.recorded_at - base.HISTORY_FULL_S, \
            record.recorded_at - base.HISTORY_KEEP_S
        thin, expire, cap = THIN_HISTORY
        sample = load_sample(record)
        self._write((RECORD_PASS, [(record.pass_at, record.recorded_at,
                                    json.dumps(dict(record.verdicts)),
                                    json.dumps(list(record.drift)))]),
                    (RECORD_LOADS, [(json.dumps(dict(record.models)),
                                     json.dumps(dict(record.boxes)))]),
                    (RECORD_SAMPLE, [(record.pass_at, json.dumps(dict(sample.servers)),
                                      json.dumps(dict(sample.models)))]),
                    (thin, [(thin_before, thin_before)]), (expire, [(keep_after,)]),
                    (cap, [()]))

    def claim_pass_lease(self, lease_id: str, holder: str, now: float,
                         ttl_s: float) -> base.PassLease:
        with self._store_errors("take the pass lease"), self._transaction() as cursor:
            cursor.execute(self._sql(CLAIM_PASS_LEASE), (lease_id, holder, now, now + ttl_s))
            cursor.execute(f"SELECT {PASS_LEASE_COLUMNS} FROM pass_lease WHERE slot = 1")
            return base.PassLease(*cursor.fetchone())

    def release_pass_lease(self, lease_id: str) -> bool:
        with self._store_errors("release the pass lease"), self._transaction() as cursor:
            cursor.execute(self._sql("DELETE FROM pass_lease WHERE slot = 1 AND lease_id = ?"),
                           (lease_id,))
            return cursor.rowcount == 1

    def clear_approvals(self) -> None:
        self._write(("DELETE FROM approvals", [()]))

    def claim_attempt(self, scope: str, now: float, window_s: float) -> tuple[int, float]:
        cutoff = now - window_s
        with self._store_errors("count an admin attempt"):
            with self._transaction() as cursor:
                cursor.execute(self._sql(CLAIM_ATTEMPT), (scope, now, cutoff, cutoff))
                attempts, since = cursor.fetchone()
            if attempts == 1 and scope != base.OVERALL_SCOPE:  # a new peer window: stay bounded
                self._write((TRIM_ATTEMPTS, [()]))
        return attempts, since

    def release_attempt(self, peer: str, give_back_overall: bool) -> None:
        self._write(("DELETE FROM admin_attempts WHERE scope = ?", [(peer,)]),
                    (GIVE_BACK_ATTEMPT, [()] if give_back_overall else []))

    def server_secret(self, name: str, candidate: str) -> str:
        self._write((KEEP_FIRST_SECRET, [(name, candidate)]))
        return self._query("SELECT value FROM server_secrets WHERE name = ?", (name,))[0][0]

    def open_session(self, session_id: str, token_check: str, now: float,
                     expires_at: float) -> None:
        self._write(("DELETE FROM admin_sessions WHERE expires_at <= ?", [(now,)]),
                    (OPEN_SESSION, [(session_id, token_check, now, expires_at)]))

    def note_token_in_force(self, token_check: str) -> None:
        with self._store_errors("note the admin token in force"), \
                self._transaction() as cursor:
            cursor.execute(self.turns_lock)  # one start at a time: read, then write
            cursor.execute(self._sql("SELECT value FROM server_secrets WHERE name = ?"),
                           (TOKEN_IN_FORCE,))
            row = cursor.fetchone()
            if row is not None and row[0] == token_check:
                return
            if row is not None:
                cursor.execute(self._sql("DELETE FROM admin_sessions WHERE token_check = ?"),
                               (token_check,))
            cursor.execute(self._sql(KEEP_TOKEN_IN_FORCE), (TOKEN_IN_FORCE, token_check))

    def end_session(self, session_id: str) -> None:
        self._write(("DELETE FROM admin_sessions WHERE id = ?", [(session_id,)]))

    def decide_binding(self, box: str,
                       decide: Callable[[base.BoxBinding | None, base.Enrollment | None],
                                        tuple[base.BindingWrite | None, Any]]) -> Any:
        with self._store_errors("decide a binding"), self._transaction() as cursor:
            # Taking the next seq locks its one row first: binding decisions run one at a time.
            seq = self._next_binding_seq(cursor)
            cursor.execute(self._sql(f"SELECT {BINDING_COLUMNS} FROM box_bindings "
                                     "WHERE box = ?"), (box,))
            row = cursor.fetchone()
            cursor.execute(self._sql(f"SELECT {ENROLLMENT_COLUMNS} FROM enrollments "
                                     "WHERE box = ?"), (box,))
            enrolled = cursor.fetchone()
            write, result = decide(None if row is None else _binding(row),
                                   None if enrolled is None else base.Enrollment(*enrolled))
            if write is not None:
                self._write_binding(cursor, write, seq)
            return result

    def _write_binding(self, cursor: Any, write: base.BindingWrite, seq: int) -> None:
        b = write.binding
        cursor.execute(self._sql(WRITE_BINDING),
                       (b.box, b.token_hash, int(b.confirmed), b.bound_at, b.peer, b.instance,
                        seq, b.holder, b.pool, b.next_claimant))
        if write.drop_enrollment:
            cursor.execute(self._sql("DELETE FROM enrollments WHERE box = ?"), (b.box,))
        if write.revoke_leaves:
            cursor.execute(self._sql("UPDATE issued_leaves SET revoked = 1 WHERE box = ?"),
                           (b.box,))
        if not b.bound or write.revoke_leaves:
            cursor.execute(self._sql("DELETE FROM binding_conflicts WHERE box = ?"), (b.box,))

    def enroll(self, enrollment: base.Enrollment) -> None:
        e = enrollment
        self._write((KEEP_ENROLLMENT, [(e.box, e.token_hash, e.expires_at, e.pool,
                                        e.created_at, e.created_by)]),
                    ("DELETE FROM enrollments WHERE expires_at <= ?", [(e.created_at,)]))

    def record_leaf(self, leaf: base.IssuedLeaf) -> None:
        self._write((f"INSERT INTO issued_leaves ({LEAF_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
                     "ON CONFLICT (serial) DO NOTHING",
                     [(leaf.serial, leaf.box, leaf.not_after, leaf.issued_at,
                       int(leaf.by_controller), int(leaf.revoked))]),
                    ("DELETE FROM issued_leaves WHERE not_after < ?",
                     [(leaf.issued_at - LEAF_KEPT_AFTER_S,)]))

    def record_pools(self, report: base.PoolsReport) -> bool:
        with self._store_errors("record the pools"), self._transaction() as cursor:
            cursor.execute(self.turns_lock)  # one report at a time: read, then write
            cursor.execute("SELECT MAX(reported_at) FROM pool_states")
            latest = cursor.fetchone()[0]
            if latest is not None and report.at <= latest:
                return False
            self._forget_pools(cursor, list(report.states))
            for pool, state in report.states.items():
                cursor.execute(self._sql(KEEP_POOL_STATE), (pool, json.dumps(state), report.at))
                self._add_pool_decisions(cursor, pool, report.decisions.get(pool, ()))
                cursor.executemany(self._sql(ADD_POOL_COUNT),
                                   [(pool, counter, reason, count) for (counter, reason), count
                                    in report.counts.get(pool, {}).items() if count])
            return True

    def _forget_pools(self, cursor: Any, kept: Sequence[str]) -> None:
        """Drop every pool but ``kept`` from the pool tables."""
        keep = f"WHERE pool NOT IN ({', '.join('?' * len(kept))})" if kept else ""
        for table in POOL_TABLES:
            cursor.execute(self._sql(f"DELETE FROM {table} {keep}"), tuple(kept))

    def _add_pool_decisions(self, cursor: Any, pool: str,
                            decisions: Sequence[Mapping[str, Any]]) -> None:
        cursor.execute(self._sql("SELECT MAX(seq) FROM pool_decisions WHERE pool = ?"), (pool,))
        last = int(cursor.fetchone()[0] or 0)
        cursor.executemany(self._sql("INSERT INTO pool_decisions (pool, seq, decision) "
                                     "VALUES (?, ?, ?)"),
                           [(pool, last + index, json.dumps(decision))
                            for index, decision in enumerate(decisions, 1)])
        cursor.execute(self._sql("DELETE FROM pool_decisions WHERE pool = ? AND seq <= ?"),
                       (pool, last + len(decisions) - base.POOL_DECISIONS_KEPT))

    def note_binding_conflict(self, box: str, peer: str | None, now: float) -> int:
        with self._store_errors("count a refused claim"), self._transaction() as cursor:
            cursor.execute(self._sql(NOTE_CONFLICT), (box, now, peer))
            return int(cursor.fetchone()[0])

    def _next_binding_seq(self, cursor: Any) -> int:
        cursor.execute(NEXT_BINDING_SEQ)
        return int(cursor.fetchone()[0])

    # ------------------------------------------------------------------- reads

    def bindings_since(self, seq: int) -> list[base.BoxBinding]:
        rows = self._query(f"SELECT {BINDING_COLUMNS} FROM box_bindings WHERE seq > ? "
                           "ORDER BY seq", (seq,))
        return [_binding(row) for row in rows]

    def enrollments(self, now: float) -> list[base.Enrollment]:
        rows = self._query(f"SELECT {ENROLLMENT_COLUMNS} FROM enrollments WHERE expires_at > ? "
                           "ORDER BY box", (now,))
        return [base.Enrollment(*row) for row in rows]

    def issued_leaves(self, now: float) -> list[base.IssuedLeaf]:
        rows = self._query(f"SELECT {LEAF_COLUMNS} FROM issued_leaves WHERE not_after > ? "
                           "ORDER BY box, issued_at", (now - LEAF_KEPT_AFTER_S,))
        return [base.IssuedLeaf(serial, box, not_after, issued_at, bool(by), bool(revoked))
                for serial, box, not_after, issued_at, by, revoked in rows]

    def binding_conflicts(self) -> list[base.BindingConflict]:
        rows = self._query("SELECT c.box, c.claims, c.last_at, c.last_peer, b.peer, b.holder "
                           "FROM binding_conflicts c LEFT JOIN box_bindings b ON b.box = c.box "
                           "ORDER BY c.last_at DESC, c.box")
        return [base.BindingConflict(*row) for row in rows]

    def pools(self) -> list[base.PoolRecord]:
        decisions: dict[str, list[Any]] = {}
        for pool, decision in self._query("SELECT pool, decision FROM pool_decisions "
                                          "ORDER BY pool, seq DESC"):
            decisions.setdefault(pool, []).append(json.loads(decision))
        counts: dict[str, dict[tuple[str, str], int]] = {}
        for pool, counter, reason, count in self._query(
                "SELECT pool, counter, reason, count FROM pool_counts"):
            counts.setdefault(pool, {})[(counter, reason)] = int(count)
        return [base.PoolRecord(pool, json.loads(state), reported_at,
                                tuple(decisions.get(pool, ())), counts.get(pool, {}))
                for pool, state, reported_at in self._query(
                    "SELECT pool, state, reported_at FROM pool_states ORDER BY pool")]

    def pass_lease(self, now: float) -> base.PassLease | None:
        rows = self._query(f"SELECT {PASS_LEASE_COLUMNS} FROM pass_lease "
                           "WHERE slot = 1 AND expires_at > ?", (now,))
        return base.PassLease(*rows[0]) if rows else None

    def session_open(self, session_id: str, token_check: str, now: float) -> bool:
        return bool(self._query("SELECT 1 FROM admin_sessions WHERE id = ? AND token_check = ? "
                                "AND expires_at > ?", (session_id, token_check, now)))

    def approval(self, box: str) -> base.Approval | None:
        rows = self._query(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE box = ?", (box,))
        return _approval(rows[0]) if rows else None

    def approvals(self) -> list[base.Approval]:
        rows = self._query(f"SELECT {APPROVAL_COLUMNS} FROM approvals ORDER BY approved_at, box")
        return [_approval(row) for row in rows]

    def fetch_times(self) -> dict[str, float]:
        return dict(self._query("SELECT box, fetched_at FROM box_fetches"))

    def check_times(self) -> dict[str, float]:
        return dict(self._query("SELECT box, checked_at FROM box_checks"))

    def turns(self) -> list[Turn]:
        return [_turn(row) for row in self._query("SELECT turn FROM rollout_turns ORDER BY box")]

    def unknown_boxes(self) -> list[base.UnknownBox]:
        rows = self._query("SELECT name, first_seen, last_seen, seen_count FROM unknown_boxes "
                           "ORDER BY last_seen DESC, name")
        return [base.UnknownBox(*row) for row in rows]

    def last_pass(self) -> base.ReconcilePass | None:
        rows = self._query("SELECT pass_at, recorded_at, verdicts, drift, models, boxes "
                           "FROM reconcile_pass LEFT JOIN pass_loads "
                           "ON pass_loads.slot = reconcile_pass.slot WHERE reconcile_pass.slot = 1")
        if not rows:
            return None
        pass_at, recorded_at, verdicts, drift, models, boxes = rows[0]
        return base.ReconcilePass(pass_at, json.loads(verdicts), tuple(json.loads(drift)),
                             recorded_at, json.loads(models or "{}"), json.loads(boxes or "{}"))

    def load_history(self, since: float, servers: bool = True) -> list[base.LoadSample]:
        columns = "servers, models" if servers else "'{}', models"
        rows = self._query(f"SELECT pass_at, {columns} FROM load_samples WHERE pass_at >= ? "
                           "ORDER BY pass_at", (since,))
        return [base.LoadSample(pass_at, json.loads(per_server), json.loads(per_model))
                for pass_at, per_server, per_model in rows]

    def applied_revision(self, box: str) -> str | None:
        rows = self._query("SELECT revision FROM applied_reports WHERE box = ?", (box,))
        return rows[0][0] if rows else None

    def pass_stamp(self) -> tuple[float, float] | None:
        rows = self._query("SELECT pass_at, recorded_at FROM reconcile_pass WHERE slot = 1")
        return tuple(rows[0]) if rows else None

    def applied_reports(self) -> dict[str, base.AppliedReport]:
        rows = self._query("SELECT a.box, revision, applied_at, servers, reported_at, cards, "
                           "placement FROM applied_reports a "
                           "LEFT JOIN box_cards c ON c.box = a.box")
        return {box: base.AppliedReport(
                    box, revision, applied_at,
                    tuple(base.AppliedServer(*s) for s in json.loads(servers)), reported_at,
                    tuple(base.AppliedCard(*c) for c in json.loads(cards or "[]")),
                    tuple((name, tuple(indices)) for name, indices
                          in json.loads(placement or "[]")))
                for box, revision, applied_at, servers, reported_at, cards, placement in rows}

    # ----------------------------------------------------------------- plumbing

    def _sql(self, statement: str) -> str:
        return statement if self.placeholder == "?" else statement.replace("?", self.placeholder)

    @contextmanager
    def _store_errors(self, doing: str) -> Iterator[None]:
        """The driver's errors as :class:`base.StoreError`, naming what failed and nothing else."""
        try:
            yield
        except self.driver_errors as exc:
            raise base.StoreError(
                f"the state store cannot {doing} ({type(exc).__name__})") from None

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A cursor whose statements commit together, or roll back together on any error."""
        connection = self._connection()
        try:
            yield connection.cursor()
            connection.commit()
        except BaseException:
            connection.rollback()
            raise

    def _write(self, *steps: tuple[str, Sequence[Sequence[Any]]]) -> None:
        """Run every step (a statement and its rows) in one transaction."""
        with self._store_errors("be written"), self._transaction() as cursor:
            for statement, rows in steps:
                cursor.executemany(self._sql(statement), rows)

    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._store_errors("be read"):
            connection = self._connection()
            cursor = connection.cursor()
            cursor.execute(self._sql(statement), params)
            rows = cursor.fetchall()
            connection.commit()  # end the read transaction a driver may have opened
            return rows


def times_statements(table: str, column: str,
                     times: Mapping[str, float]) -> list[tuple[str, list[tuple]]]:
    """:data:`NOTE_TIMES` for every :data:`TIMES_PER_STATEMENT` boxes of ``times``, each
    with its one row of values, as :meth:`SqlStore._write` takes steps."""
    pairs = list(times.items())
    steps = []
    for start in range(0, len(pairs), TIMES_PER_STATEMENT):
        chunk = pairs[start:start + TIMES_PER_STATEMENT]
        statement = NOTE_TIMES.format(table=table, column=column,
                                      rows=", ".join(["(?, ?)"] * len(chunk)))
        steps.append((statement, [tuple(value for pair in chunk for value in pair)]))
    return steps


def _turn(row: Sequence[Any]) -> Turn:
    return Turn.from_record(json.loads(row[0]))


def _binding(row: Sequence[Any]) -> base.BoxBinding:
    box, token_hash, confirmed, bound_at, peer, instance, seq, holder, pool, claimant = row
    return base.BoxBinding(box, token_hash, bool(confirmed), bound_at, peer, instance, int(seq),
                           holder, pool, claimant)


def _approval(row: Sequence[Any]) -> base.Approval:
    box, models, approved_by, approved_at = row
    return base.Approval(box, tuple(json.loads(models)), approved_by, approved_at)
