"""Fetch and check times and unknown sightings, kept in memory, written to the store in batches.

Writing each fetch as its own SQLite transaction serialises every worker on the
database's write lock: under a boot storm that lock, not the answer, sets the
pace. So each worker keeps the latest time per box (and the newest unknown
names, bounded like the store's list) and a background thread writes them in
one transaction every :data:`FLUSH_INTERVAL_S`: the state reaches every worker
within about that long, and a clean exit writes what is left.

That thread is a native one even in a gevent worker, whose ``threading`` is
patched to make greenlets: a flush run as a greenlet held the worker's one loop
for as long as the store took, and while another worker held SQLite's write
lock the busy wait slept inside it, so every connection of that worker waited
with it. On its own thread the flush waits with the interpreter lock released,
and the loop goes on answering. (It has a store connection of its own: one more
per worker.)

When the store cannot be written (disk full, read-only, database down) the
fetches stay in memory (bounded: one time per known box, the newest unknown
names), the flusher backs off, and the log gets one line when a failure streak
starts and one when it ends, never a traceback every half second.
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Callable
from typing import Any

from gevent import monkey

from .process_id import pid
from .store import UNKNOWN_LIMIT, StateStore, StoreError, UnknownBox

FLUSH_INTERVAL_S = 0.5
# During a failure streak each wait is twice the last, up to this long.
MAX_RETRY_INTERVAL_S = 30.0
MAX_BACKOFF_DOUBLINGS = 10

log = logging.getLogger(__name__)
# What ``_thread`` held before gevent patched it (as it is, unpatched): a thread and a lock
# of the operating system's, never a greenlet or a lock only greenlets can share.
start_native_thread, native_lock = monkey.get_original(
    "_thread", ("start_new_thread", "allocate_lock"))


class FetchRecorder:
    """Per-process buffer in front of :meth:`StateStore.note_fetches` / ``note_checks`` /
    ``note_unknown``."""

    def __init__(self, store: StateStore, interval_s: float = FLUSH_INTERVAL_S,
                 redact: Callable[[str], str] = str):
        self.store = store
        self.interval_s = interval_s
        self.redact = redact
        self.failures = 0  # consecutive failed flushes: the current failure streak
        # Held briefly by requests and the flusher alike (no call inside it waits).
        self._lock = native_lock()
        # Held for a whole flush, so that close() waits for the flusher's write in progress.
        self._flushing = native_lock()
        self._fetches: dict[str, float] = {}
        self._checks: dict[str, float] = {}
        self._unknown: dict[str, UnknownBox] = {}
        self._flusher_pid: int | None = None
        # Held while this process's flusher runs; close() releases it to end its wait.
        self._stop = native_lock()

    def note_fetch(self, box: str, when: float) -> None:
        with self._lock:
            if when > self._fetches.get(box, 0.0):
                self._fetches[box] = when
        self._ensure_flusher()

    def note_check(self, box: str, when: float) -> None:
        """A follow check: kept apart from fetches, which start a server's Loading window."""
        with self._lock:
            if when > self._checks.get(box, 0.0):
                self._checks[box] = when
        self._ensure_flusher()

    def note_unknown(self, name: str, when: float) -> None:
        with self._lock:
            self._merge_unknown([UnknownBox(name, when, when, 1)])
        self._ensure_flusher()

    def flush(self) -> None:
        """Write what this process holds in one go; on failure keep it for the next try."""
        with self._flushing:
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            fetches, checks, unknown = self._fetches, self._checks, list(self._unknown.values())
            self._fetches, self._checks, self._unknown = {}, {}, {}
        if not fetches and not checks and not unknown:
            return
        try:
            self.store.note_fetches(fetches)
            self.store.note_checks(checks)
            self.store.note_unknown(unknown)
        except Exception as exc:  # any fault: the next flush retries; the log says why
            with self._lock:
                _merge_times(self._fetches, fetches)
                _merge_times(self._checks, checks)
                self._merge_unknown(unknown)
            self._note_failure(exc, len(fetches) + len(checks), len(unknown))
            return
        if self.failures:
            log.warning("the state store takes writes again after %d failed flush(es); "
                        "the fetch times held meanwhile are written", self.failures)
            self.failures = 0

    def next_wait_s(self) -> float:
        """How long the flusher waits: the interval, doubled per failure of the streak."""
        doublings = min(self.failures, MAX_BACKOFF_DOUBLINGS)
        return min(self.interval_s * 2 ** doublings, max(self.interval_s, MAX_RETRY_INTERVAL_S))

    def _note_failure(self, exc: Exception, fetches: int, unknown: int) -> None:
        """One line when a streak starts; the store's own message only (it holds no secret)."""
        self.failures += 1
        if self.failures > 1:
            return
        reason = str(exc) if isinstance(exc, StoreError) else type(exc).__name__
        log.warning("%s", self.redact(
            f"cannot write {fetches} fetch or check time(s) and {unknown} unknown sighting(s) "
            f"to the state store ({reason}); keeping them in memory and retrying with back-off, "
            f"up to every {MAX_RETRY_INTERVAL_S:g} s; one line follows when it works again"))

    def close(self) -> None:
        """Stop this process's flusher and write what is left (a clean exit loses nothing)."""
        with self._lock:
            if self._stop.locked():
                self._stop.release()
        atexit.unregister(self.close)
        self.flush()

    def _merge_unknown(self, sightings: list[UnknownBox]) -> None:
        """Fold sightings in; only the most recently seen names are kept."""
        for seen in sightings:
            held = self._unknown.get(seen.name)
            if held is not None:
                seen = UnknownBox(seen.name, min(held.first_seen, seen.first_seen),
                                  max(held.last_seen, seen.last_seen), held.count + seen.count)
            self._unknown[seen.name] = seen
        while len(self._unknown) > UNKNOWN_LIMIT:
            oldest = min(self._unknown.values(), key=lambda held: held.last_seen)
            del self._unknown[oldest.name]

    def _ensure_flusher(self) -> None:
        """Start the flusher in this process (a forked worker does not inherit threads)."""
        if self._flusher_pid == pid():
            return
        with self._lock:
            if self._flusher_pid == pid():
                return
            self._flusher_pid = pid()
            stop = self._stop = native_lock()
            stop.acquire()
        start_native_thread(self._run, (stop,))
        atexit.register(self.close)

    def _run(self, stop: Any) -> None:
        """The flusher: a flush each wait until ``stop`` is released (it is then taken)."""
        while not stop.acquire(timeout=self.next_wait_s()):
            self.flush()


def _merge_times(held: dict[str, float], times: dict[str, float]) -> None:
    """Keep the latest time per box."""
    for box, when in times.items():
        if when > held.get(box, 0.0):
            held[box] = when
