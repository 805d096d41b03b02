"""Request counts and latencies of the box API, shared by every worker of one server.

``/metrics`` is built from the shared store so that every worker answers the same;
counting each request there would cost the hot path of a boot storm a database
write. These figures live instead in one block of shared memory made before
gunicorn forks its workers (the app is preloaded in the arbiter): every worker
adds to the same counters under one process-shared lock, held for a few additions.
A worker replaced later is forked from the same arbiter and shares the block too.
The figures are this server process's (each instance of a multi-instance
deployment has its own, as Prometheus scrapes each one), and start from zero when
it starts, as a Prometheus counter may.

Labels are bounded: the box API's four paths, and the status code's class.
"""

from __future__ import annotations

import bisect
import multiprocessing
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

PATHS = ("/vllm/config", "/vllm/applied", "/vllm/turn", "/vllm/cert")
CODE_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
# Upper bounds (seconds) of the latency histogram's buckets: a keyed fetch takes about a
# millisecond, a turn may wait on the store's write lock.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# An HTTP status's hundreds (0-9) -> the offset of its class in a path's counts: below 100
# counts as 1xx, 600 and above as 5xx.
CODE_OFFSETS = (0, 0, 1, 2, 3, 4, 4, 4, 4, 4)
# Per path: a count per code class, a count per bucket (+Inf last), the sum of seconds.
_PER_PATH = len(CODE_CLASSES) + len(BUCKETS) + 2


class BoxApiStats:
    """Counters and a latency histogram per box API path, in memory every worker shares."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork")
        # Read and written as a memoryview of floats: an item through it costs a fraction of
        # one through ctypes, and a fetch's hot path adds to three.
        self._values = memoryview(context.RawArray("d", len(PATHS) * _PER_PATH)).cast(
            "B").cast("d")
        self._lock = context.Lock()
        self._index = {path: number * _PER_PATH for number, path in enumerate(PATHS)}

    def observe(self, path: str, status: int, seconds: float) -> None:
        """One answered request (``status``: 0-999); a path outside the box API's
        :data:`PATHS` is not counted."""
        base = self._index.get(path)
        if base is None:
            return
        code = base + CODE_OFFSETS[status // 100]
        # The first bound >= seconds; +Inf last.
        bucket = base + len(CODE_CLASSES) + bisect.bisect_left(BUCKETS, seconds)
        values, lock = self._values, self._lock
        lock.acquire()  # a fetch's hot path: well under 1 us in all, measured against P1
        try:
            values[code] += 1.0
            values[bucket] += 1.0
            values[base + _PER_PATH - 1] += seconds
        finally:
            lock.release()

    def metrics(self) -> Iterator[Metric]:
        """``llmao_box_api_requests_total{path,code}`` and
        ``llmao_box_api_request_duration_seconds{path}``, read under the lock."""
        with self._lock:
            values = list(self._values)
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
