"""The default state store: one SQLite file shared by every worker of one server.

WAL lets readers proceed while one worker writes, and the busy timeout makes
the workers queue for the write lock instead of failing. A connection never
crosses a fork or a thread: each process and thread opens its own on first use.
"""

from __future__ import annotations

import os
import sqlite3
import threading

from .base import StoreError
from .schema import NewerSchema
from .sql import SqlStore

BUSY_TIMEOUT_S = 10.0


class SqliteStore(SqlStore):
    """:class:`SqlStore` on a SQLite file (created if missing, its schema brought up to date)."""

    driver_errors = (sqlite3.Error,)
    # Takes the write lock first (waiting up to the busy timeout): with a deferred start,
    # two workers could both read the turns before either writes.
    turns_lock = "BEGIN IMMEDIATE"
    schema_lock = "BEGIN IMMEDIATE"

    def __init__(self, path: str):
        self.path = path
        self._local = threading.local()
        try:
            self._connection().execute("PRAGMA journal_mode=WAL")
            self.upgrade_schema()
        except (sqlite3.Error, NewerSchema) as exc:
            raise StoreError(f"cannot open the state store {path}: {exc}") from None

    def _connection(self) -> sqlite3.Connection:
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            local.connection = self._open()
            local.pid = os.getpid()
        return local.connection

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        # With WAL, NORMAL loses nothing on a crash of the process, only on power loss.
        connection.execute("PRAGMA synchronous=NORMAL")
        return connection

    def close(self) -> None:
        local = self._local
        if getattr(local, "pid", None) == os.getpid():
            local.connection.close()
        local.pid = None
