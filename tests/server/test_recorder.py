"""The per-worker buffer of fetch times and unknown sightings in front of the store."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from llmao_server.recorder import FetchRecorder
from llmao_server.store import UNKNOWN_LIMIT, SqliteStore, UnknownBox


class ObservedStore(SqliteStore):
    """The real SQLite store, noting each batch it is given; optionally failing once."""

    def __init__(self, path: str, fail_first: bool = False):
        super().__init__(path)
        self.batches: list[int] = []
        self.fail_first = fail_first

    def note_fetches(self, fetches: Mapping[str, float]) -> None:
        if self.fail_first:
            self.fail_first = False
            raise OSError("disk unplugged")
        super().note_fetches(fetches)

    def note_unknown(self, sightings: Iterable[UnknownBox]) -> None:
        sightings = list(sightings)
        self.batches.append(len(sightings))
        super().note_unknown(sightings)


@pytest.fixture
def store(tmp_path: Path) -> ObservedStore:
    return ObservedStore(str(tmp_path / "state.sqlite3"))


def test_nothing_reaches_the_store_before_a_flush_and_all_of_it_after(
        store: ObservedStore) -> None:
    recorder = FetchRecorder(store, interval_s=3600)
    recorder.note_fetch("a", 1.0)
    recorder.note_fetch("a", 3.0)
    recorder.note_fetch("b", 2.0)
    recorder.note_unknown("u", 5.0)
    recorder.note_unknown("u", 7.0)
    assert store.fetch_times() == {}
    recorder.flush()
    assert store.fetch_times() == {"a": 3.0, "b": 2.0}
    assert store.unknown_boxes() == [UnknownBox("u", 5.0, 7.0, 2)]
    recorder.close()


def test_the_buffer_holds_only_the_newest_unknown_names(store: ObservedStore) -> None:
    recorder = FetchRecorder(store, interval_s=3600)
    for index in range(UNKNOWN_LIMIT * 4):
        recorder.note_unknown(f"n{index}", float(index))
    recorder.close()
    assert store.batches == [UNKNOWN_LIMIT]
    names = {u.name for u in store.unknown_boxes()}
    assert names == {f"n{index}" for index in range(UNKNOWN_LIMIT * 3, UNKNOWN_LIMIT * 4)}


def test_a_failed_write_is_kept_for_the_next_flush(tmp_path: Path) -> None:
    store = ObservedStore(str(tmp_path / "state.sqlite3"), fail_first=True)
    recorder = FetchRecorder(store, interval_s=3600)
    recorder.note_fetch("a", 1.0)
    recorder.note_unknown("u", 1.0)
    recorder.flush()
    assert store.fetch_times() == {}
    recorder.note_fetch("a", 0.5)
    recorder.flush()
    assert store.fetch_times() == {"a": 1.0}
    assert store.unknown_boxes() == [UnknownBox("u", 1.0, 1.0, 1)]
    recorder.close()


def test_close_writes_what_is_left(store: ObservedStore) -> None:
    recorder = FetchRecorder(store, interval_s=3600)
    recorder.note_fetch("a", 1.0)
    recorder.close()
    assert store.fetch_times() == {"a": 1.0}


def test_the_background_thread_writes_within_the_interval(store: ObservedStore) -> None:
    recorder = FetchRecorder(store, interval_s=0.1)
    recorder.note_fetch("a", 1.0)
    deadline = time.monotonic() + 5
    while not store.fetch_times() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store.fetch_times() == {"a": 1.0}
    recorder.close()


def test_checks_are_kept_apart_from_fetches(store: ObservedStore) -> None:
    recorder = FetchRecorder(store, interval_s=3600)
    recorder.note_check("a", 2.0)
    recorder.note_check("a", 1.0)
    recorder.note_fetch("b", 3.0)
    recorder.flush()
    assert store.check_times() == {"a": 2.0}
    assert store.fetch_times() == {"b": 3.0}


# A gevent worker's process (threading patched), and a store whose write waits natively for
# 1.5 s, as SQLite's busy wait does while another worker holds the write lock.
FLUSH_UNDER_GEVENT = textwrap.dedent("""
    from gevent import monkey
    monkey.patch_all()
    import time
    import gevent
    from llmao_server.recorder import FetchRecorder

    native_sleep = monkey.get_original("time", "sleep")
    written = {}

    class WaitingStore:
        def note_fetches(self, fetches):
            native_sleep(1.5)
            written.update(fetches)

        def note_checks(self, checks):
            pass

        def note_unknown(self, unknown):
            pass

    recorder = FetchRecorder(WaitingStore(), interval_s=0.05)
    recorder.note_fetch("a", 1.0)
    started = time.monotonic()
    for tick in range(20):
        gevent.sleep(0.01)
    answered_in = time.monotonic() - started
    recorder.close()
    assert written == {"a": 1.0}, written
    assert answered_in < 1.0, f"the loop stood still for {answered_in:.2f} s of a flush"
""")


def test_a_flush_under_gevent_leaves_the_loop_free() -> None:
    # The flusher is a native thread: its write waiting on the store does not stop the
    # greenlets that answer requests, and close() still writes what it was writing.
    done = subprocess.run([sys.executable, "-c", FLUSH_UNDER_GEVENT], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
