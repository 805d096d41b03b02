"""Request counts and latencies of the box API, shared by every worker of one server.

``/metrics`` is built from the shared store so that every worker answers the same;
counting each request there would cost the hot path of a boot storm a database
write. These figures live instead in one block of shared memory made before
gunicorn forks its workers (the app is preloaded in the arbiter), read whole by
whichever worker answers ``/metrics``.

Each worker adds to a slot of its own in that block, its first request claiming a
free one: counters that every worker wrote under one process-shared lock cost a
fetch that lock's system calls whenever two workers met on it, and the cache
lines the counters sit on went from core to core at every request. A slot is a
whole number of cache lines, written by its worker alone: no lock, no line
shared. A worker replaced later takes over the slot of one that exited, and adds
to what it holds: a count never goes back. The figures are this server process's
(each instance of a multi-instance deployment has its own, as Prometheus scrapes
each one), and start from zero when it starts, as a Prometheus counter may.

Labels are bounded: the box API's four paths, and the status code's class.
"""

from __future__ import annotations

import bisect
import multiprocessing
import os
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import BOX_API_PATHS

from .process_id import pid

CODE_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
# Upper bounds (seconds) of the latency histogram's buckets: a keyed fetch takes about a
# millisecond, a turn may wait on the store's write lock.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# An HTTP status's hundreds (0-9) -> the offset of its class in a path's counts: below 100
# counts as 1xx, 600 and above as 5xx.
CODE_OFFSETS = (0, 0, 1, 2, 3, 4, 4, 4, 4, 4)
# Per path: a count per code class, a count per bucket (+Inf last), the sum of seconds.
_PER_PATH = len(CODE_CLASSES) + len(BUCKETS) + 2
# Slots for this many processes alive at once (gunicorn's workers, and a process serving
# the app alone); more than that share one last slot under a lock.
SLOTS = 64
# A slot's values, rounded up to whole cache lines of 64 bytes (8 values), and one line more:
# wherever the block starts, no line holds values of two slots.
_SLOT = -(-len(BOX_API_PATHS) * _PER_PATH // 8) * 8 + 8


class BoxApiStats:
    """Counters and a latency histogram per box API path, in memory every worker shares,
    a slot per worker."""

    def __init__(self, slots: int = SLOTS) -> None:
        context = multiprocessing.get_context("fork")
        # Read and written as a memoryview of floats: an item through it costs a fraction of
        # one through ctypes, and a fetch's hot path adds to three. The last slot is shared.
        self._values = memoryview(context.RawArray("d", (slots + 1) * _SLOT)).cast(
            "B").cast("d")
        # The id of the process that holds each slot (0: none yet).
        self._owners = memoryview(context.RawArray("q", slots)).cast("B").cast("q")
        self._lock = context.Lock()  # taken to claim a slot, and to add to the shared one
        self._index = {path: number * _PER_PATH for number, path in enumerate(BOX_API_PATHS)}
        # This process's slot (its first value's index), and the lock it adds under: None
        # for a slot of its own.
        self._slot_pid = 0
        self._slot = slots * _SLOT
        self._slot_lock: Any = self._lock

    def observe(self, path: str, status: int, seconds: float) -> None:
        """One answered request (``status``: 0-999); a path outside the box API's
        :data:`BOX_API_PATHS` is not counted."""
        base = self._index.get(path)
        if base is None:
            return
        if self._slot_pid != pid():
            self._claim_slot()
        base += self._slot
        code = base + CODE_OFFSETS[status // 100]
        # The first bound >= seconds; +Inf last.
        bucket = base + len(CODE_CLASSES) + bisect.bisect_left(BUCKETS, seconds)
        if self._slot_lock is None:
            _add(self._values, code, bucket, base + _PER_PATH - 1, seconds)
        else:
            with self._slot_lock:
                _add(self._values, code, bucket, base + _PER_PATH - 1, seconds)

    def _claim_slot(self) -> None:
        """Take a slot no live process holds (a replaced worker's, with its counts, which
        this one adds to), else share the last one."""
        me = pid()
        self._slot_pid, self._slot, self._slot_lock = me, len(self._owners) * _SLOT, self._lock
        with self._lock:
            for number, owner in enumerate(self._owners):
                if owner == 0 or owner == me or not _alive(owner):
                    self._owners[number] = me
                    self._slot, self._slot_lock = number * _SLOT, None
                    return

    def metrics(self) -> Iterator[Metric]:
        """``llmao_box_api_requests_total{path,code}`` and
        ``llmao_box_api_request_duration_seconds{path}``, every slot summed."""
        slots = [number * _SLOT for number, owner in enumerate(self._owners) if owner]
        slots.append(len(self._owners) * _SLOT)
        values = [sum(self._values[slot + offset] for slot in slots)
                  for offset in range(len(BOX_API_PATHS) * _PER_PATH)]
        requests = CounterMetricFamily("llmao_box_api_requests",
                                       "Box API requests this server answered, by path and "
                                       "status class.", labels=["path", "code"])
        durations = HistogramMetricFamily("llmao_box_api_request_duration_seconds",
                                          "Seconds this server took to answer a box API "
                                          "request.", labels=["path"])
        for path, base in self._index.items():
            for number, code in enumerate(CODE_CLASSES):
                requests.add_metric([path, code], values[base + number])
            counts = values[base + len(CODE_CLASSES):base + _PER_PATH - 1]
            cumulative, buckets = 0.0, []
            for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            durations.add_metric([path], buckets, values[base + _PER_PATH - 1])
        yield requests
        yield durations


def _add(values: memoryview, code: int, bucket: int, total: int, seconds: float) -> None:
    """One request into a slot: its status class, its bucket, its seconds."""
    values[code] += 1.0
    values[bucket] += 1.0
    values[total] += seconds


def _alive(process: int) -> bool:
    """Whether a process of this id runs (a slot's holder that exited frees it)."""
    try:
        os.kill(process, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
