"""Fetch times and unknown sightings, gathered in memory and written to the store in batches.

Writing each fetch as its own SQLite transaction serialises every worker on the
database's write lock: under a boot storm that lock, not the answer, sets the
pace. So each worker keeps the latest time per box (and the newest unknown
names, bounded like the store's list) and a background thread writes them in
one transaction every :data:`FLUSH_INTERVAL_S`: the state reaches every worker
within about that long, and a clean exit writes what is left.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading

from .store import UNKNOWN_LIMIT, StateStore, UnknownBox

FLUSH_INTERVAL_S = 0.5

log = logging.getLogger(__name__)


class FetchRecorder:
    """Per-process buffer in front of :meth:`StateStore.note_fetches` / ``note_unknown``."""

    def __init__(self, store: StateStore, interval_s: float = FLUSH_INTERVAL_S):
        self.store = store
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._fetches: dict[str, float] = {}
        self._unknown: dict[str, UnknownBox] = {}
        self._flusher_pid: int | None = None
        self._stop = threading.Event()

    def note_fetch(self, box: str, when: float) -> None:
        with self._lock:
            self._merge_fetches({box: when})
        self._ensure_flusher()

    def note_unknown(self, name: str, when: float) -> None:
        with self._lock:
            self._merge_unknown([UnknownBox(name, when, when, 1)])
        self._ensure_flusher()

    def flush(self) -> None:
        """Write what this process holds in one go; on failure keep it for the next try."""
        with self._lock:
            fetches, unknown = self._fetches, list(self._unknown.values())
            self._fetches, self._unknown = {}, {}
        if not fetches and not unknown:
            return
        try:
            self.store.note_fetches(fetches)
            self.store.note_unknown(unknown)
        except Exception:  # any fault: the next flush retries; the log says why
            log.exception("could not write %d fetch time(s) and %d unknown sighting(s); "
                          "keeping them for the next flush", len(fetches), len(unknown))
            with self._lock:
                self._merge_fetches(fetches)
                self._merge_unknown(unknown)

    def close(self) -> None:
        """Stop this process's flusher and write what is left (a clean exit loses nothing)."""
        self._stop.set()
        atexit.unregister(self.close)
        self.flush()

    def _merge_fetches(self, fetches: dict[str, float]) -> None:
        for box, when in fetches.items():
            if when > self._fetches.get(box, 0.0):
                self._fetches[box] = when

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
        pid = os.getpid()
        if self._flusher_pid == pid:
            return
        with self._lock:
            if self._flusher_pid == pid:
                return
            self._flusher_pid = pid
            self._stop = threading.Event()
        threading.Thread(target=self._run, name="llmao-fetch-recorder", daemon=True).start()
        atexit.register(self.close)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()
