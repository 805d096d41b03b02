"""The state store on PostgreSQL: one database shared by several ``llmao-server`` instances.

Behind a load balancer each instance runs its own workers, and a box's fetch,
an admin's approval or a reconcile verdict may land on any of them; SQLite is
one file on one machine, PostgreSQL is what every instance can reach. The SQL
is :class:`SqlStore`'s, with psycopg's ``%s`` placeholders. As with SQLite, a
connection never crosses a fork or a thread, and a broken one (the database
restarted) is replaced on next use.

The URL may hold a password: it is never put in a message, and an error text
from the driver is scrubbed of it before it is shown.
"""

from __future__ import annotations

import os
import threading
from urllib.parse import urlsplit, urlunsplit

import psycopg

from .base import StoreError
from .schema import NewerSchema
from .sql import SqlStore

CONNECT_TIMEOUT_S = 10
APPLICATION_NAME = "llmao-server"
# Any constant: instances starting together take turns upgrading the schema
# (PostgreSQL's CREATE TABLE IF NOT EXISTS is not safe against a concurrent twin).
SCHEMA_LOCK = 0x6C6D616F
# Another constant: grants and updates of rollout turns take turns, till their commit.
TURNS_LOCK = 0x6C6D6174


def shown_url(url: str) -> str:
    """The URL without its password, fit for a message or a log line."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            user, _, place = netloc.rpartition("@")
            netloc = f"{user.partition(':')[0]}@{place}"
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "the postgresql:// URL given"


def password_of(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


class PostgresStore(SqlStore):
    """:class:`SqlStore` on a PostgreSQL database (its schema brought up to date)."""

    driver_errors = (psycopg.Error,)

    placeholder = "%s"
    turns_lock = f"SELECT pg_advisory_xact_lock({TURNS_LOCK})"
    # Held until the upgrade commits.
    schema_lock = f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})"

    def __init__(self, url: str):
        self.url = url
        self._local = threading.local()
        try:
            self.upgrade_schema()
        except (psycopg.Error, NewerSchema) as exc:
            raise StoreError(f"cannot open the state store {shown_url(url)}: "
                             f"{self._scrub(str(exc))}") from None

    def _connection(self) -> psycopg.Connection:
        local = self._local
        connection = getattr(local, "connection", None)
        if getattr(local, "pid", None) != os.getpid() or connection is None or connection.broken:
            local.connection = psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_S,
                                               application_name=APPLICATION_NAME)
            local.pid = os.getpid()
        return local.connection

    def _scrub(self, text: str) -> str:
        password = password_of(self.url)
        text = text.replace(self.url, shown_url(self.url))
        return text.replace(password, "<redacted>") if password else text

    def close(self) -> None:
        local = self._local
        if getattr(local, "pid", None) == os.getpid() and local.connection is not None:
            local.connection.close()
        local.pid = None
        local.connection = None
