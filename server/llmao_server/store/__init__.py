"""The fleet's observed state, shared by every worker: pick a store by its location."""

from __future__ import annotations

from .base import (
    ATTEMPT_PEER_LIMIT,
    HISTORY_BUCKET_S,
    HISTORY_FULL_S,
    HISTORY_KEEP_S,
    HISTORY_LIMIT,
    OVERALL_SCOPE,
    POOL_DECISIONS_KEPT,
    UNKNOWN_LIMIT,
    AppliedCard,
    AppliedReport,
    AppliedServer,
    Approval,
    BindingConflict,
    BindingWrite,
    BoxBinding,
    Enrollment,
    IssuedLeaf,
    LoadSample,
    PassLease,
    PoolRecord,
    PoolsReport,
    ReconcilePass,
    StateStore,
    StoreError,
    UnknownBox,
)
from .sqlite import SqliteStore

__all__ = ["ATTEMPT_PEER_LIMIT", "HISTORY_BUCKET_S", "HISTORY_FULL_S", "HISTORY_KEEP_S",
           "HISTORY_LIMIT", "OVERALL_SCOPE", "POOL_DECISIONS_KEPT", "UNKNOWN_LIMIT",
           "AppliedCard", "AppliedReport",
           "AppliedServer", "Approval", "BindingConflict", "BindingWrite", "BoxBinding",
           "Enrollment", "IssuedLeaf", "LoadSample",
           "PassLease", "PoolRecord", "PoolsReport", "ReconcilePass", "SqliteStore",
           "StateStore", "StoreError", "UnknownBox", "open_store"]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_store(location: str) -> StateStore:
    """A SQLite path (the default), or a ``postgresql://`` URL for several server instances."""
    if location.startswith(POSTGRES_SCHEMES):
        # Imported here: a SQLite deployment never loads the PostgreSQL driver.
        from .postgres import PostgresStore

        return PostgresStore(location)
    return SqliteStore(location)
