# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one vLLM server says about itself: its KV cache, its queue, its token counters.

Read from the server's own ``/metrics`` (Prometheus text) and ``/v1/models``
during a reconcile pass. Every figure is a number or None, and None means
unknown: a figure vLLM did not expose, exposed twice in contradiction, or as
garbage. An unknown figure is never replaced by zero, because a zero KV cache
or an idle queue would be a verdict, and a wrong one.

A server is a rented box and may answer anything, so every figure is bounded
where it is read: a value is a finite number within ``MAX_FIGURE`` (sums
too), the labels read as numbers are short ASCII digits, and a series given
twice is a contradiction. An answer that breaks any of these leaves every
figure of the exposition unknown, with a short reason; reading never raises.

The metric names are vLLM's, as its engine (V0, ``vllm/engine/metrics.py``) and
its V1 engine (``vllm/v1/metrics/loggers.py``) register them: see
``docs/metrics.md`` for the versions covered.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from .json_values import is_number
from .prometheus_text import Exposition, ExpositionError, Sample, read_exposition

CACHE_CONFIG_INFO = "vllm:cache_config_info"
# vLLM 0.9 renamed the KV usage gauge; the old name stays for older servers.
KV_USAGE_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
READ = frozenset({CACHE_CONFIG_INFO, *KV_USAGE_NAMES, RUNNING, WAITING, PROMPT_TOKENS,
                  GENERATION_TOKENS})
# The largest figure believed: the largest whole number a JSON reader keeps exactly, far
# beyond any real cache, queue or counter, and small enough that sums over a fleet stay finite.
MAX_FIGURE = 2**53
# A label read as a number (num_gpu_blocks, block_size): a few ASCII digits, nothing else.
LABEL_NUMBER = re.compile(r"[0-9]{1,15}")
WHOLE_NUMBERS = frozenset({"kv_cache_tokens", "requests_running", "requests_waiting",
                           "prompt_tokens_total", "generation_tokens_total", "max_model_len"})


class MetricsRecordError(ValueError):
    """A metrics record does not have the shape :meth:`ServerMetrics.record` writes."""


class UnreadFigures(ValueError):
    """An answer the figures cannot be read from; the message is the short reason."""


@dataclass(frozen=True)
class ServerMetrics:
    """One scrape of one server; every field a number, or None for unknown.

    ``kv_cache_tokens`` is what one engine's KV cache holds (blocks × block
    size); ``kv_cache_usage_ratio`` is 0..1; ``max_model_len`` is the context
    ``/v1/models`` says the server serves; ``scraped_at`` is the pass's clock.
    """

    kv_cache_tokens: int | None = None
    kv_cache_usage_ratio: float | None = None
    requests_running: int | None = None
    requests_waiting: int | None = None
    prompt_tokens_total: int | None = None
    generation_tokens_total: int | None = None
    max_model_len: int | None = None
    scraped_at: float | None = None

    def record(self) -> dict[str, int | float | None]:
        """The JSON form: an object with every field, each a number or null."""
        # (every field a number: a copy of the fields, without asdict's deep copy,
        # which costs 300 servers' records a pass more than their reading)
        return dict(vars(self))

    @classmethod
    def from_record(cls, record: Any) -> ServerMetrics:
        """Back from :meth:`record`; a missing field is unknown, a wrong type raises."""
        if not isinstance(record, Mapping):
            raise MetricsRecordError("metrics must be an object")
        values: dict[str, Any] = {}
        for item in fields(cls):
            value = record.get(item.name)
            if value is None:
                values[item.name] = None
                continue
            if not is_figure(value):
                raise MetricsRecordError(f"metrics.{item.name} must be a number within "
                                         f"±{MAX_FIGURE} or null")
            if item.name in WHOLE_NUMBERS:
                if value != int(value):
                    raise MetricsRecordError(f"metrics.{item.name} must be a whole number")
                value = int(value)
            values[item.name] = value
        return cls(**values)


def is_figure(value: Any) -> bool:
    """A number (not a bool) that is finite and within ±``MAX_FIGURE``; never raises."""
    return is_number(value) and -MAX_FIGURE <= value <= MAX_FIGURE


def read_metrics(exposition: str | None, models_body: bytes | None, served_model_name: str,
                 scraped_at: float) -> ServerMetrics:
    """The figures of one server from its ``/metrics`` text and its ``/v1/models`` body."""
    return read_figures(exposition, models_body, served_model_name, scraped_at)[0]


def read_figures(exposition: str | Exposition | None, models_body: bytes | None,
                 served_model_name: str, scraped_at: float) -> tuple[ServerMetrics, str]:
    """The figures of one server, and why those of its ``/metrics`` are unknown ("" if read).

    Either answer may be None (not read); the exposition may come already read
    (:func:`read_exposition` with at least :data:`READ`, as the probe reads it once
    for the latency too). Only the lines of the metrics read are parsed; one of them
    that is not in the text format, or a figure out of bounds, makes every figure of
    the exposition unknown; ``max_model_len`` still comes from ``/v1/models``.
    """
    max_model_len = served_max_model_len(models_body, served_model_name)
    figures, reason = ServerMetrics(), ""
    if isinstance(exposition, str):
        exposition = read_exposition(exposition, READ)
    if exposition is not None:
        try:
            figures = _figures(exposition.named(READ))
        except (ExpositionError, UnreadFigures) as exc:
            reason = str(exc)[:200]
    return replace(figures, max_model_len=max_model_len, scraped_at=scraped_at), reason


def _figures(samples: list[Sample]) -> ServerMetrics:
    """The exposition's figures; a value out of bounds or a series given twice raises."""
    seen = set()
    for sample in samples:
        series = (sample.name, tuple(sorted(sample.labels.items())))
        if series in seen:
            raise UnreadFigures(f"{sample.name} is given twice with the same labels")
        seen.add(series)
        if math.isfinite(sample.value) and not is_figure(sample.value):
            raise UnreadFigures(f"{sample.name} is out of bounds")
    return ServerMetrics(
        kv_cache_tokens=_kv_cache_tokens(samples),
        kv_cache_usage_ratio=_kv_usage(samples),
        requests_running=_whole(_total(samples, RUNNING)),
        requests_waiting=_whole(_total(samples, WAITING)),
        prompt_tokens_total=_whole(_total(samples, PROMPT_TOKENS)),
        generation_tokens_total=_whole(_total(samples, GENERATION_TOKENS)),
    )


def _finite(values: Iterable[float]) -> list[float] | None:
    """The values, or None when there are none or one is NaN or infinite."""
    values = list(values)
    if not values or not all(math.isfinite(value) for value in values):
        return None
    return values


def _total(samples: list[Sample], name: str) -> float | None:
    """Summed over engines (V1 labels each data-parallel engine); negative is garbage."""
    values = _finite(sample.value for sample in samples if sample.name == name)
    if values is None or any(value < 0 for value in values):
        return None
    total = math.fsum(values)
    if not is_figure(total):
        raise UnreadFigures(f"{name} sums out of bounds")
    return total


def _whole(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def _kv_usage(samples: list[Sample]) -> float | None:
    """The fullest engine's usage, from the current gauge name or else the old one."""
    for name in KV_USAGE_NAMES:
        values = _finite(sample.value for sample in samples if sample.name == name)
        if values is not None:
            return max(values) if all(0 <= value <= 1 for value in values) else None
    return None


def _kv_cache_tokens(samples: list[Sample]) -> int | None:
    """Blocks × block size from the cache config labels, the smallest engine's.

    One request lives in one engine's cache, so the smallest engine bounds what
    a single request can use. vLLM writes the labels with ``str()``, so a cache
    not yet profiled says ``num_gpu_blocks="None"``: unknown. Any other label
    value that is not a few ASCII digits is garbage: the whole answer is unread.
    """
    sizes = []
    for sample in samples:
        if sample.name != CACHE_CONFIG_INFO:
            continue
        blocks = _label_number(sample.labels, "num_gpu_blocks")
        block_size = _label_number(sample.labels, "block_size")
        if not blocks or not block_size:
            return None
        if blocks * block_size > MAX_FIGURE:
            raise UnreadFigures(f"{CACHE_CONFIG_INFO} is out of bounds")
        sizes.append(blocks * block_size)
    return min(sizes) if sizes else None


def _label_number(labels: Mapping[str, str], name: str) -> int | None:
    """The label as a whole number; None when absent or "None"; anything else raises."""
    text = labels.get(name)
    if text is None or text == "None":
        return None
    if not LABEL_NUMBER.fullmatch(text):
        raise UnreadFigures(f"{CACHE_CONFIG_INFO}: {name} is not a number")
    return int(text)


def served_max_model_len(body: bytes | None, served_model_name: str) -> int | None:
    """``max_model_len`` of the served name's entry in a ``/v1/models`` answer."""
    if body is None:
        return None
    try:
        data = json.loads(body).get("data")
    except (ValueError, AttributeError, RecursionError):
        return None
    for model in data if isinstance(data, list) else ():
        if isinstance(model, dict) and model.get("id") == served_model_name:
            value = model.get("max_model_len")
            if isinstance(value, int) and is_figure(value) and value > 0:
                return value
            return None
    return None
