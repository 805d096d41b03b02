"""The store's schema version: a store of the last release is upgraded at open, on SQLite and
on a real PostgreSQL, and keeps what it held; a newer one is refused; a step is all or nothing.

``data/store-0.1.0.sql`` is a store as llmao-server 0.1.0 left it (written by that
release's own store code, then dumped), loaded here into a fresh SQLite file or database.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from llmao_server import cli
from llmao_server.store import (
    AppliedReport,
    AppliedServer,
    Approval,
    ReconcilePass,
    StateStore,
    StoreError,
    UnknownBox,
    open_store,
    schema,
)

RELEASE_0_1_0 = Path(__file__).with_name("data") / "store-0.1.0.sql"
LATEST = len(schema.MIGRATIONS)


def run_sql(location: str, script: str) -> None:
    """Run statements on the store at ``location`` directly, as another program would."""
    if location.startswith("postgresql://"):
        with psycopg.connect(location, autocommit=True) as connection:
            connection.execute(script)
    else:
        with sqlite3.connect(location) as connection:
            connection.executescript(script)
        connection.close()


@pytest.fixture
def old_store(location: str) -> str:
    """``location`` holding the 0.1.0 store."""
    run_sql(location, RELEASE_0_1_0.read_text(encoding="utf-8"))
    return location


@pytest.fixture
def upgraded(old_store: str) -> Iterator[StateStore]:
    opened = open_store(old_store)
    yield opened
    opened.close()


def test_a_0_1_0_store_is_upgraded_to_this_releases_version(upgraded: StateStore,
                                                            old_store: str) -> None:
    assert upgraded.schema_versions == (0, LATEST)
    again = open_store(old_store)  # the next start finds nothing to do
    assert again.schema_versions == (LATEST, LATEST)
    again.close()


def test_what_the_0_1_0_store_held_reads_back(upgraded: StateStore) -> None:
    assert upgraded.fetch_times() == {"203.0.113.10": 1767225600.5,
                                      "203.0.113.11": 1767225610.25}
    assert upgraded.unknown_boxes() == [UnknownBox("192.0.2.50", 1767225500.0, 1767225590.0, 3)]
    assert upgraded.approvals() == [Approval("192.0.2.51", ("qwen",), "admin", 1767225620.0)]
    assert upgraded.applied_reports() == {"203.0.113.10": AppliedReport(
        "203.0.113.10", "rev-0123456789ab", "2026-01-01T00:00:00Z",
        (AppliedServer("gemma", 8001, "gemma"),), 1767225601.0)}
    last = upgraded.last_pass()
    assert last is not None and last.pass_at == 1767225630.0
    assert last.verdicts == {"llmao:203.0.113.10:8001:gemma": {"state": "Healthy"}}
    assert (last.models, last.boxes) == ({}, {})  # 0.1.0 kept no loads


def test_the_upgraded_store_does_what_this_release_needs(upgraded: StateStore) -> None:
    upgraded.note_checks({"203.0.113.10": 1767225700.0})
    assert upgraded.check_times() == {"203.0.113.10": 1767225700.0}
    lease = upgraded.claim_pass_lease("lease-1", "controller-a", 1767225700.0, 600.0)
    assert lease.holder == "controller-a"
    upgraded.record_pass(ReconcilePass(1767225710.0, {}, (), 1767225711.0,
                                       {"gemma": {"servers": 1}}, {}))
    assert upgraded.last_pass().models == {"gemma": {"servers": 1}}
    assert len(upgraded.load_history(0.0)) == 1
    assert upgraded.server_secret("cookie", "candidate") == "candidate"


def tables(location: str) -> dict[str, set[str]]:
    """Each table's columns, as the database itself describes them."""
    if location.startswith("postgresql://"):
        with psycopg.connect(location) as connection:
            rows = connection.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'public'").fetchall()
    else:
        connection = sqlite3.connect(location)
        names = [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows = [(name, column[1]) for name in names
                for column in connection.execute(f"PRAGMA table_info({name})")]
        connection.close()
    found: dict[str, set[str]] = {}
    for table, column in rows:
        found.setdefault(table, set()).add(column)
    return found


def test_an_upgraded_store_has_the_tables_of_a_new_one(upgraded: StateStore, old_store: str,
                                                       tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.sqlite3"
    open_store(str(fresh)).close()
    assert tables(old_store) == tables(str(fresh))


def test_a_store_upgraded_by_a_newer_release_is_refused(location: str) -> None:
    open_store(location).close()
    run_sql(location, f"UPDATE schema_version SET version = {LATEST + 1}")
    with pytest.raises(StoreError, match=f"schema is version {LATEST + 1}, made by a newer"):
        open_store(location)


def test_a_new_step_is_run_once_and_a_failing_one_changes_nothing(
        location: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a column is one more step; a step that fails leaves the version and every
    statement before it as they were (the whole upgrade is one transaction)."""
    open_store(location).close()
    added = ("ALTER TABLE approvals ADD COLUMN note TEXT NOT NULL DEFAULT ''",)
    broken = ("CREATE TABLE later_table (x TEXT)", "ALTER TABLE no_such_table ADD COLUMN y TEXT")
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, added, broken))
    with pytest.raises(StoreError):
        open_store(location)
    assert "note" not in tables(location)["approvals"]
    assert "later_table" not in tables(location)
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS[:-1],))
    store = open_store(location)
    assert store.schema_versions == (LATEST, LATEST + 1)
    store.close()
    assert "note" in tables(location)["approvals"]


def test_llmao_server_upgrades_the_store_at_start_and_says_so(
        old_store: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO"):
        cli.log_upgrade(cli.prepare_state(old_store))  # what llmao-server runs before it binds
    assert f"schema is now version {LATEST} (it was new, or of 0.1.0)" in caplog.text
    store = open_store(old_store)
    assert store.schema_versions == (LATEST, LATEST) and store.approvals() == []
    store.close()
