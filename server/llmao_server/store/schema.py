"""The state store's schema, as the numbered steps that built it; a store knows its number.

A store records in ``schema_version`` how many of :data:`MIGRATIONS` it has run.
Opening one (every ``llmao-server`` start, every worker's first use) runs the
steps it has not run yet, in order, in one transaction that first takes the
store's schema lock, then records the new number: a store made by any earlier
release is brought forward before anything reads it, and two servers starting
together upgrade it once. A store whose number is higher than this release
knows was upgraded by a newer release, and is refused rather than misread.

Changing the schema is adding a step at the end of :data:`MIGRATIONS`, with a
comment naming the release that brings it, in SQL that SQLite and PostgreSQL
both accept. A new table::

    # 3 (0.3.0): what the table is for.
    ("CREATE TABLE box_bindings (box TEXT PRIMARY KEY, bound_at DOUBLE PRECISION NOT NULL)",),

a new column (with a default: rows already there get it)::

    ("ALTER TABLE approvals ADD COLUMN note TEXT NOT NULL DEFAULT ''",),

A step that is released is never edited or removed: stores out there have run it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# The one row of schema_version (slot 1) holds the number of steps run.
VERSION_TABLE = """CREATE TABLE IF NOT EXISTS schema_version (
    slot INTEGER PRIMARY KEY,
    version BIGINT NOT NULL)"""
READ_VERSION = "SELECT version FROM schema_version WHERE slot = 1"
WRITE_VERSION = """
    INSERT INTO schema_version (slot, version) VALUES (1, ?)
    ON CONFLICT (slot) DO UPDATE SET version = excluded.version"""

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1 (0.1.0): the first release's tables. It recorded no version, so a store without one
    # may hold them already: IF NOT EXISTS.
    (
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
        # Admin credential attempts per peer, and from everyone under OVERALL_SCOPE.
        """CREATE TABLE IF NOT EXISTS admin_attempts (
            scope TEXT PRIMARY KEY,
            window_start DOUBLE PRECISION NOT NULL,
            attempts BIGINT NOT NULL)""",
        # What counted failed logins only, before every attempt was counted.
        "DROP TABLE IF EXISTS login_failures",
    ),
    # 2 (0.2.0): loads and their history, sessions, the pass lease, rollouts. Development
    # builds between the two releases made some of these without a version: IF NOT EXISTS.
    (
        # The latest pass's per model and per box loads, beside reconcile_pass.
        """CREATE TABLE IF NOT EXISTS pass_loads (
            slot INTEGER PRIMARY KEY,
            models TEXT NOT NULL,
            boxes TEXT NOT NULL)""",
        # One load sample per kept pass, thinned as it ages (record_pass); per server and per
        # model apart, so that the charts of models never parse every server's figures.
        """CREATE TABLE IF NOT EXISTS load_samples (
            pass_at DOUBLE PRECISION PRIMARY KEY,
            servers TEXT NOT NULL,
            models TEXT NOT NULL)""",
        # Its first form in development builds, one column for both.
        "DROP TABLE IF EXISTS load_history",
        # Secrets made once and shared by every worker and instance (the cookie signing key).
        """CREATE TABLE IF NOT EXISTS server_secrets (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL)""",
        # Admin sessions in force; token_check ties each to the admin.token it was opened under.
        """CREATE TABLE IF NOT EXISTS admin_sessions (
            id TEXT PRIMARY KEY,
            token_check TEXT NOT NULL,
            opened_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL)""",
        # The fleet-wide reconcile pass lease: one row at most (slot 1).
        """CREATE TABLE IF NOT EXISTS pass_lease (
            slot INTEGER PRIMARY KEY,
            lease_id TEXT NOT NULL,
            holder TEXT NOT NULL,
            taken_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL)""",
        # Each box's latest follow check (GET /vllm/config with If-None-Match): not a fetch.
        """CREATE TABLE IF NOT EXISTS box_checks (
            box TEXT PRIMARY KEY,
            checked_at DOUBLE PRECISION NOT NULL)""",
        # Each box's latest rollout turn, as Turn.record() JSON.
        """CREATE TABLE IF NOT EXISTS rollout_turns (
            box TEXT PRIMARY KEY,
            turn TEXT NOT NULL)""",
        # The revision each box was last told to wait for: a refusal is audited once per
        # revision.
        """CREATE TABLE IF NOT EXISTS turn_waits (
            box TEXT PRIMARY KEY,
            revision TEXT NOT NULL)""",
        # The cards each box reported with its applied revision, beside applied_reports.
        """CREATE TABLE IF NOT EXISTS box_cards (
            box TEXT PRIMARY KEY,
            cards TEXT NOT NULL,
            placement TEXT NOT NULL)""",
    ),
    # 3: per-box identity (docs/box-identity.md). A binding keeps a token's SHA-256, never
    # the token; an empty token_hash is a released binding; seq orders the changes for the
    # workers' refresh, and taking the next one (binding_seq's one row) locks it till the
    # commit, so changes commit in seq order and a refresh by seq misses none. Refused
    # claims of bound names: one row per bound name at most.
    (
        """CREATE TABLE IF NOT EXISTS box_bindings (
            box TEXT PRIMARY KEY,
            token_hash TEXT NOT NULL,
            confirmed INTEGER NOT NULL,
            bound_at DOUBLE PRECISION NOT NULL,
            peer TEXT,
            instance TEXT,
            seq BIGINT NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS box_bindings_by_seq ON box_bindings (seq)",
        """CREATE TABLE IF NOT EXISTS binding_seq (
            slot INTEGER PRIMARY KEY,
            seq BIGINT NOT NULL)""",
        "INSERT INTO binding_seq (slot, seq) VALUES (1, 0) ON CONFLICT (slot) DO NOTHING",
        """CREATE TABLE IF NOT EXISTS binding_conflicts (
            box TEXT PRIMARY KEY,
            claims BIGINT NOT NULL,
            last_at DOUBLE PRECISION NOT NULL,
            last_peer TEXT)""",
    ),
    # 4: identity given, never won (docs/box-identity.md). A binding says who holds it
    # (``box``, or ``controller`` for a name the push path owns), the pool an enrollment
    # made it a member of, and, once released, who may claim it next (``instance:<id>``;
    # NULL: anyone the binding mode lets). One outstanding enrollment per name: a bootstrap
    # token's SHA-256, until it expires or is used. Every leaf llmao signs, by serial, so a
    # box it issued one to never reads plain HTTP again and a released binding's leaves are
    # refused.
    (
        "ALTER TABLE box_bindings ADD COLUMN holder TEXT NOT NULL DEFAULT 'box'",
        "ALTER TABLE box_bindings ADD COLUMN pool TEXT",
        "ALTER TABLE box_bindings ADD COLUMN next_claimant TEXT",
        """CREATE TABLE IF NOT EXISTS enrollments (
            box TEXT PRIMARY KEY,
            token_hash TEXT NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            pool TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            created_by TEXT NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS issued_leaves (
            serial TEXT PRIMARY KEY,
            box TEXT NOT NULL,
            not_after DOUBLE PRECISION NOT NULL,
            issued_at DOUBLE PRECISION NOT NULL,
            by_controller INTEGER NOT NULL,
            revoked INTEGER NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS issued_leaves_by_box ON issued_leaves (box)",
    ),
    # 5: pools (docs/pools.md). What the latest pool pass left of each pool (its boxes,
    # bounds, spend and the budget, as JSON), its latest decisions (seq counts per pool), and
    # its counters: rents, returns, failed rents by kind of error.
    (
        """CREATE TABLE IF NOT EXISTS pool_states (
            pool TEXT PRIMARY KEY,
            state TEXT NOT NULL,
            reported_at DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS pool_decisions (
            pool TEXT NOT NULL,
            seq BIGINT NOT NULL,
            decision TEXT NOT NULL,
            PRIMARY KEY (pool, seq))""",
        """CREATE TABLE IF NOT EXISTS pool_counts (
            pool TEXT NOT NULL,
            counter TEXT NOT NULL,
            reason TEXT NOT NULL,
            count BIGINT NOT NULL,
            PRIMARY KEY (pool, counter, reason))""",
    ),
)



class NewerSchema(Exception):
    """The store was upgraded by a release newer than this one."""


def upgrade(cursor: Any, sql: Any,
            migrations: Sequence[Sequence[str]] | None = None) -> tuple[int, int]:
    """Run the steps (:data:`MIGRATIONS`) the store behind ``cursor`` lacks; its version
    before and after.

    ``sql`` adapts a statement's ``?`` placeholders to the driver. The caller holds the
    schema lock and commits (or rolls back) everything at once.
    """
    steps = MIGRATIONS if migrations is None else migrations
    cursor.execute(VERSION_TABLE)
    cursor.execute(READ_VERSION)
    row = cursor.fetchone()
    before, latest = (int(row[0]) if row else 0), len(steps)
    if before > latest:
        raise NewerSchema(f"its schema is version {before}, made by a newer llmao-server; this "
                          f"one knows versions up to {latest}: run the newer release")
    for step in steps[before:]:
        for statement in step:
            cursor.execute(statement)
    if before != latest:
        cursor.execute(sql(WRITE_VERSION), (latest,))
    return before, latest
