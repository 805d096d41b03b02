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
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from .base import (
    LOGIN_CLIENT_LIMIT,
    UNKNOWN_LIMIT,
    AppliedReport,
    AppliedServer,
    Approval,
    ReconcilePass,
    StateStore,
    UnknownBox,
)

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS box_fetches (
        box TEXT PRIMARY KEY,
        fetched_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS unknown_boxes (
        name TEXT PRIMARY KEY,
        first_seen DOUBLE PRECISION NOT NULL,
        last_seen DOUBLE PRECISION NOT NULL,
        seen_count BIGINT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS unknown_boxes_by_last_seen ON unknown_boxes (last_seen)",
    """CREATE TABLE IF NOT EXISTS approvals (
        box TEXT PRIMARY KEY,
        models TEXT NOT NULL,
        approved_by TEXT NOT NULL,
        approved_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS applied_reports (
        box TEXT PRIMARY KEY,
        revision TEXT NOT NULL,
        applied_at TEXT NOT NULL,
        servers TEXT NOT NULL,
        reported_at DOUBLE PRECISION NOT NULL)""",
    # One row: the latest reconcile pass, replaced whole by the next one.
    """CREATE TABLE IF NOT EXISTS reconcile_pass (
        slot INTEGER PRIMARY KEY,
        pass_at DOUBLE PRECISION NOT NULL,
        recorded_at DOUBLE PRECISION NOT NULL,
        verdicts TEXT NOT NULL,
        drift TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS login_failures (
        client TEXT PRIMARY KEY,
        window_start DOUBLE PRECISION NOT NULL,
        failures BIGINT NOT NULL)""",
)

NOTE_FETCH = """
    INSERT INTO box_fetches (box, fetched_at) VALUES (?, ?)
    ON CONFLICT (box) DO UPDATE SET fetched_at = excluded.fetched_at
    WHERE excluded.fetched_at > box_fetches.fetched_at"""

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
        SELECT name FROM unknown_boxes ORDER BY last_seen DESC, name LIMIT {UNKNOWN_LIMIT})"""

FORGET_UNKNOWN = "DELETE FROM unknown_boxes WHERE name = ?"

RECORD_APPLIED = """
    INSERT INTO applied_reports (box, revision, applied_at, servers, reported_at)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (box) DO UPDATE SET revision = excluded.revision,
        applied_at = excluded.applied_at, servers = excluded.servers,
        reported_at = excluded.reported_at"""

RECORD_PASS = """
    INSERT INTO reconcile_pass (slot, pass_at, recorded_at, verdicts, drift)
    VALUES (1, ?, ?, ?, ?)
    ON CONFLICT (slot) DO UPDATE SET pass_at = excluded.pass_at,
        recorded_at = excluded.recorded_at, verdicts = excluded.verdicts,
        drift = excluded.drift"""

APPROVE = """
    INSERT INTO approvals (box, models, approved_by, approved_at) VALUES (?, ?, ?, ?)
    ON CONFLICT (box) DO UPDATE SET models = excluded.models,
        approved_by = excluded.approved_by, approved_at = excluded.approved_at"""

APPROVAL_COLUMNS = "box, models, approved_by, approved_at"

# A failure after the client's window has passed (window_start < the cut-off) opens a new one.
NOTE_LOGIN_FAILURE = """
    INSERT INTO login_failures (client, window_start, failures) VALUES (?, ?, 1)
    ON CONFLICT (client) DO UPDATE SET
        failures = CASE WHEN login_failures.window_start < ? THEN 1
                        ELSE login_failures.failures + 1 END,
        window_start = CASE WHEN login_failures.window_start < ? THEN excluded.window_start
                            ELSE login_failures.window_start END"""

TRIM_LOGIN_FAILURES = f"""
    DELETE FROM login_failures WHERE client NOT IN (
        SELECT client FROM login_failures ORDER BY window_start DESC, client
        LIMIT {LOGIN_CLIENT_LIMIT})"""


class SqlStore(StateStore):
    """:class:`StateStore` over a DB-API 2 connection; subclasses supply the connection."""

    placeholder = "?"

    @abstractmethod
    def _connection(self) -> Any:
        """This process's (and thread's) open connection to the database."""

    def create_schema(self) -> None:
        """Create what is missing; safe to run from several processes at once."""
        connection = self._connection()
        cursor = connection.cursor()
        for statement in SCHEMA:
            cursor.execute(statement)
        connection.commit()

    # ------------------------------------------------------------------ writes

    def note_fetches(self, fetches: Mapping[str, float]) -> None:
        if fetches:
            self._write((NOTE_FETCH, list(fetches.items())))

    def note_unknown(self, sightings: Iterable[UnknownBox]) -> None:
        rows = [(s.name, s.first_seen, s.last_seen, s.count) for s in sightings]
        if rows:
            self._write((NOTE_UNKNOWN, rows), (TRIM_UNKNOWN, [()]))

    def forget_unknown(self, names: Collection[str]) -> None:
        if names:
            self._write((FORGET_UNKNOWN, [(name,) for name in names]))

    def record_applied(self, report: AppliedReport) -> None:
        servers = json.dumps([[s.name, s.port, s.served_model_name] for s in report.servers])
        self._write((RECORD_APPLIED, [(report.box, report.revision, report.applied_at,
                                       servers, report.reported_at)]))

    def approve(self, approval: Approval) -> None:
        self._write((APPROVE, [(approval.box, json.dumps(list(approval.models)),
                                approval.approved_by, approval.approved_at)]))

    def record_pass(self, record: ReconcilePass) -> None:
        self._write((RECORD_PASS, [(record.pass_at, record.recorded_at,
                                    json.dumps(dict(record.verdicts)),
                                    json.dumps(list(record.drift)))]))

    def clear_approvals(self) -> None:
        self._write(("DELETE FROM approvals", [()]))

    def note_login_failure(self, client: str, now: float, window_s: float) -> int:
        cutoff = now - window_s
        self._write((NOTE_LOGIN_FAILURE, [(client, now, cutoff, cutoff)]),
                    (TRIM_LOGIN_FAILURES, [()]))
        return self.login_failures(client, now, window_s)[0]

    def clear_login_failures(self, client: str) -> None:
        self._write(("DELETE FROM login_failures WHERE client = ?", [(client,)]))

    # ------------------------------------------------------------------- reads

    def approval(self, box: str) -> Approval | None:
        rows = self._query(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE box = ?", (box,))
        return _approval(rows[0]) if rows else None

    def approvals(self) -> list[Approval]:
        rows = self._query(f"SELECT {APPROVAL_COLUMNS} FROM approvals ORDER BY approved_at, box")
        return [_approval(row) for row in rows]

    def fetch_times(self) -> dict[str, float]:
        return dict(self._query("SELECT box, fetched_at FROM box_fetches"))

    def unknown_boxes(self) -> list[UnknownBox]:
        rows = self._query("SELECT name, first_seen, last_seen, seen_count FROM unknown_boxes "
                           "ORDER BY last_seen DESC, name")
        return [UnknownBox(*row) for row in rows]

    def login_failures(self, client: str, now: float, window_s: float) -> tuple[int, float]:
        rows = self._query("SELECT failures, window_start FROM login_failures WHERE client = ?",
                           (client,))
        if not rows or rows[0][1] < now - window_s:
            return 0, now
        failures, window_start = rows[0]
        return failures, window_start + window_s

    def last_pass(self) -> ReconcilePass | None:
        rows = self._query("SELECT pass_at, recorded_at, verdicts, drift FROM reconcile_pass "
                           "WHERE slot = 1")
        if not rows:
            return None
        pass_at, recorded_at, verdicts, drift = rows[0]
        return ReconcilePass(pass_at, json.loads(verdicts), tuple(json.loads(drift)),
                             recorded_at)

    def applied_reports(self) -> dict[str, AppliedReport]:
        rows = self._query("SELECT box, revision, applied_at, servers, reported_at "
                           "FROM applied_reports")
        return {box: AppliedReport(box, revision, applied_at,
                                   tuple(AppliedServer(*s) for s in json.loads(servers)),
                                   reported_at)
                for box, revision, applied_at, servers, reported_at in rows}

    # ----------------------------------------------------------------- plumbing

    def _sql(self, statement: str) -> str:
        return statement if self.placeholder == "?" else statement.replace("?", self.placeholder)

    def _write(self, *steps: tuple[str, Sequence[Sequence[Any]]]) -> None:
        """Run every step (a statement and its rows) in one transaction."""
        connection = self._connection()
        try:
            cursor = connection.cursor()
            for statement, rows in steps:
                cursor.executemany(self._sql(statement), rows)
            connection.commit()
        except BaseException:
            connection.rollback()
            raise

    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple]:
        connection = self._connection()
        cursor = connection.cursor()
        cursor.execute(self._sql(statement), params)
        rows = cursor.fetchall()
        connection.commit()  # end the read transaction a driver may have opened
        return rows


def _approval(row: Sequence[Any]) -> Approval:
    box, models, approved_by, approved_at = row
    return Approval(box, tuple(json.loads(models)), approved_by, approved_at)
