"""The default state store: one SQLite file shared by every worker of one server.

WAL lets readers proceed while one worker writes, and the busy timeout makes
the workers queue for the write lock instead of failing. A connection never
crosses a fork or a thread: each process and thread opens its own on first use.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading

from .base import StoreError
from .schema import NewerSchema
from .sql import SqlStore

BUSY_TIMEOUT_S = 10.0
PRIVATE_MODE = 0o600
SIDE_FILES = ("-wal", "-shm")
# Names SQLite reads as a database without a file.
IN_MEMORY = ("", ":memory:")

log = logging.getLogger(__name__)


def keep_private(path: str) -> None:
    """Make the store file (and its WAL files) readable by this user only: it holds the
    cookie signing key and the admin session ids.

    A new file is created 0600 whatever the umask; an existing one open to others is
    tightened, with a warning, or only warned about when that is not allowed. SQLite
    gives the ``-wal`` and ``-shm`` files it creates the database file's mode.
    """
    if path in IN_MEMORY:
        return
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_MODE))
    except OSError:
        return  # sqlite3 names the fault when it opens the file
    for name in (path, *(path + suffix for suffix in SIDE_FILES)):
        try:
            mode = os.stat(name).st_mode & 0o777
        except FileNotFoundError:
            continue
        if not mode & 0o077:
            continue
        try:
            os.chmod(name, mode & 0o700)
            log.warning("the state store %s was readable by others (mode %o): made %o", name,
                        mode, mode & 0o700)
        except OSError as exc:
            log.warning("the state store %s is readable by others (mode %o) and cannot be made "
                        "private (%s): it holds the cookie signing key and the admin sessions",
                        name, mode, exc.strerror)


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
        keep_private(path)
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
