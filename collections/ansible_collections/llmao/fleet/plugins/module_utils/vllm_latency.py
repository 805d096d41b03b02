# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How fast one vLLM server answered over the last pass interval, and how often it preempted.

vLLM exports its latencies as cumulative histograms (time to first token,
end-to-end request latency, inter-token latency) and its preemptions as a
counter, all since it started. A quantile of the cumulative totals would say
how the server did since its start, and move less with every hour it runs; so
each pass keeps the scrape's cumulative buckets (:class:`Cumulative`, in the
server's lifecycle memory) and the next pass reads the p50 and p95 of the
bucket DELTAS between the two scrapes (:func:`interval_latency`), as
Prometheus's ``histogram_quantile`` over ``rate()`` would.

Unknown stays unknown: a first scrape, a histogram not exported, an interval
without a request, or an answer out of bounds gives None, never 0. A counter
that went back (vLLM restarted) counts from zero again. Names are checked
against a real vLLM 0.32 answer (``shared/vectors/vllm-metrics-0.32.txt``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Optional

from .json_values import is_number
from .prometheus_text import Exposition, ExpositionError, Sample, read_exposition
from .vllm_metrics import MetricsRecordError

# Figure name → vLLM's histogram names, newest first (before 0.11 vLLM called the
# inter-token latency time_per_output_token).
HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
}
PREEMPTIONS = "vllm:num_preemptions_total"
READ = frozenset({f"{name}_bucket" for names in HISTOGRAMS.values() for name in names}
                 | {PREEMPTIONS})
QUANTILES = (("p50", 0.5), ("p95", 0.95))
# Bounds on what a server may say: vLLM's histograms have about 20 buckets; a count is a
# whole number a JSON reader keeps exactly.
MAX_BUCKETS = 64
MAX_COUNT = 2**53
# A latency past 11 days is no latency: a histogram with a bound that far (le="1e300") gives
# an unknown quantile rather than a figure the pass record refuses.
MAX_SECONDS = 1e6
# A note names each figure once with a fixed reason: a few hundred characters at most.
MAX_NOTE = 500

Buckets = tuple[tuple[float, float], ...]


class LatencyRecordError(MetricsRecordError):
    """A latency record does not have the shape its ``record`` writes."""


@dataclass(frozen=True)
class Cumulative:
    """One scrape's histograms and preemption counter, since the server started.

    ``histograms`` maps a figure (``ttft``, ``e2e``, ``itl``) to its cumulative
    ``(upper bound, count)`` pairs, ``+Inf`` last, summed over the engines.
    """

    histograms: Mapping[str, Buckets] = field(default_factory=lambda: MappingProxyType({}))
    preemptions_total: float | None = None

    def record(self) -> dict[str, Any]:
        """JSON: bounds as numbers, ``+Inf`` as the string ``"+Inf"``; every bucket, empty
        ones included. The record is what reconcile hands from the probe to the plan and keeps
        for the next pass: a bucket left out would move a quantile's lower edge (an empty
        bucket below the observations is where Prometheus starts interpolating) and hide the
        server's layout from the model's merge."""
        return {"histograms": {name: [[_bound_text(bound), count] for bound, count in buckets]
                               for name, buckets in self.histograms.items()},
                "preemptions_total": self.preemptions_total}

    @classmethod
    def from_record(cls, record: Any) -> Cumulative:
        if not isinstance(record, Mapping) or not isinstance(record.get("histograms"), Mapping):
            raise LatencyRecordError("latency_seen must be an object with histograms")
        histograms = {}
        for name, pairs in record["histograms"].items():
            if name not in HISTOGRAMS or not isinstance(pairs, list):
                raise LatencyRecordError(f"latency_seen.histograms.{name} is not a histogram")
            try:
                buckets = tuple((_bound(str(bound)), float(count)) for bound, count in pairs)
            except (TypeError, ValueError):
                raise LatencyRecordError(f"latency_seen.histograms.{name} holds a pair that "
                                         "is not a bound and a count") from None
            histograms[name] = _checked(buckets)
        total = record.get("preemptions_total")
        if total is not None and not _is_count(total):
            raise LatencyRecordError("latency_seen.preemptions_total must be a count or null")
        return cls(MappingProxyType(histograms), total)


@dataclass(frozen=True)
class Latency:
    """The last pass interval: p50 and p95 in seconds per figure, and the preemptions;
    ``note`` says why a model's figure is unknown although its servers have one (their
    buckets cannot be added)."""

    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p95_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    preemptions: int | None = None
    note: str | None = None

    def record(self) -> dict[str, Any]:
        return dict(vars(self))  # every field a number or text: no deep copy needed

    @classmethod
    def from_record(cls, record: Any) -> Latency:
        """Back from :meth:`record`; a missing figure is unknown, a wrong type raises."""
        if record is None:
            return cls()
        if not isinstance(record, Mapping):
            raise LatencyRecordError("latency must be an object")
        values = {}
        for item in fields(cls):
            value = record.get(item.name)
            if item.name == "note":
                if value is not None and not (isinstance(value, str)
                                              and len(value) <= MAX_NOTE):
                    raise LatencyRecordError("latency.note must be a short text or null")
            elif value is not None and not (is_number(value) and 0 <= value <= MAX_COUNT):
                raise LatencyRecordError(f"latency.{item.name} must be a number or null")
            values[item.name] = value
        if values["preemptions"] is not None:
            values["preemptions"] = int(values["preemptions"])
        return cls(**values)


def read_latency(exposition: str | Exposition | None) -> Cumulative | None:
    """The cumulative histograms and counter of one ``/metrics`` answer; None when unread.

    The answer may come already read (:func:`read_exposition` with at least
    :data:`READ`). Only the lines of the names read are parsed. A histogram whose
    buckets are out of bounds or contradict each other is left out; an answer with
    a line of those names that is not in the text format reads nothing.
    """
    if exposition is None:
        return None
    if isinstance(exposition, str):
        exposition = read_exposition(exposition, READ)
    try:
        samples = exposition.named(READ)
    except ExpositionError:
        return None
    return cumulative(samples)


def cumulative(samples: Iterable[Sample]) -> Cumulative:
    """Each histogram's buckets summed over engines (the first name vLLM exports), and the
    preemption counter summed likewise."""
    by_name: dict[str, list[Sample]] = {}
    for sample in samples:
        by_name.setdefault(sample.name, []).append(sample)
    histograms = {}
    for figure, names in HISTOGRAMS.items():
        for name in names:
            buckets = _summed_buckets(by_name.get(f"{name}_bucket", ()))
            if buckets:
                histograms[figure] = buckets
                break
    counts = [sample.value for sample in by_name.get(PREEMPTIONS, ())]
    total = math.fsum(counts) if counts and all(map(_is_count, counts)) else None
    return Cumulative(MappingProxyType(histograms),
                      total if total is not None and total <= MAX_COUNT else None)


def _summed_buckets(samples: Iterable[Sample]) -> Buckets:
    """``(bound, count)`` over engines, or () when the buckets cannot be believed.

    While each ``le`` has come once (one engine, vLLM's usual answer), no label set can
    have been given twice and none is compared; from the first ``le`` that comes again,
    every label set is kept by its content, so a box writing many engines costs one set
    lookup a sample, never a comparison with each earlier one.
    """
    by_bound: dict[float, float] = {}
    first: dict[str, Mapping[str, str]] = {}
    seen: set[frozenset[tuple[str, str]]] | None = None
    for sample in samples:
        labels, value = sample.labels, sample.value
        le = labels.get("le", "")
        bound = _known_bound(le)
        if bound is None or not _is_count(value):
            return ()
        if seen is None and le not in first:
            first[le] = labels
        else:
            if seen is None:
                seen = {frozenset(known.items()) for known in first.values()}
            content = frozenset(labels.items())
            if content in seen:
                return ()
            seen.add(content)
        by_bound[bound] = by_bound.get(bound, 0.0) + value
    try:
        return _checked(tuple(sorted(by_bound.items())))
    except LatencyRecordError:
        return ()


def _checked(buckets: Buckets) -> Buckets:
    """Buckets that make a histogram: few, ``+Inf`` last, counts never falling, in bounds."""
    if not buckets or len(buckets) > MAX_BUCKETS or buckets[-1][0] != math.inf:
        raise LatencyRecordError("the buckets do not make a histogram")
    below = 0.0
    for bound, count in buckets:
        # (each count is a float: ``not below <= count <= MAX_COUNT`` is true of NaN and
        # the infinities, as ``not bound >= 0`` is of NaN)
        if not below <= count <= MAX_COUNT or not bound >= 0:
            raise LatencyRecordError("the buckets do not make a histogram")
        below = count
    return buckets


def _bound(text: str) -> float:
    """An ``le`` label: a number or ``+Inf``; anything else raises ValueError."""
    if text == "+Inf":
        return math.inf
    bound = float(text)
    if not math.isfinite(bound) or len(text) > 32:
        raise ValueError(text)
    return bound


# The ``le`` texts read, and their bounds: one model's servers write the same 20 or so.
# Bounded as prometheus_text's label sets are.
_BOUNDS: dict[str, float] = {}
MAX_BOUNDS = 1024


def _known_bound(text: str) -> float | None:
    """:func:`_bound` of an ``le`` label, read once; None when it is not a bound."""
    bound = _BOUNDS.get(text)
    if bound is None:
        try:
            bound = _bound(text)
        except ValueError:
            return None
        if len(_BOUNDS) >= MAX_BOUNDS:
            _BOUNDS.clear()
        _BOUNDS[text] = bound
    return bound


def _bound_text(bound: float) -> float | str:
    return "+Inf" if bound == math.inf else bound


def _is_count(value: Any) -> bool:
    # A float within bounds is finite (NaN and the infinities fail the comparison): a
    # parsed value, most of those checked, needs no more.
    if isinstance(value, float):
        return 0 <= value <= MAX_COUNT
    return is_number(value) and 0 <= value <= MAX_COUNT


# A module-level alias is evaluated at import: ansible-test's pylint refuses `X | None` there.
Scrapes = tuple[Optional[Cumulative], Optional[Cumulative]]  # noqa: UP045


def interval_latency(scrapes: Iterable[Scrapes]) -> Latency:
    """The p50 and p95 of each histogram's bucket deltas between two scrapes, and the
    preemptions between them, over one server's pair of scrapes or the sum of several
    servers' (a model's); None for what any scrape lacks or nobody asked."""
    pairs = list(scrapes)
    if not pairs or any(before is None or after is None for before, after in pairs):
        return Latency()
    figures: dict[str, float | None] = {}
    notes = []
    for figure in HISTOGRAMS:
        delta, why = _merged([_delta(before.histograms.get(figure),
                                     after.histograms.get(figure)) for before, after in pairs])
        if why:
            notes.append(f"{figure}: {why}")
        for suffix, quantile in QUANTILES:
            seconds = None if delta is None else bucket_quantile(quantile, delta)
            figures[f"{figure}_{suffix}_s"] = \
                seconds if seconds is None or seconds <= MAX_SECONDS else None
    grown = [_grown(before.preemptions_total, after.preemptions_total)
             for before, after in pairs]
    preemptions = None if None in grown else math.fsum(grown)
    return Latency(**figures, preemptions=None if preemptions is None
                   or not _is_count(preemptions) else int(preemptions),
                   note="; ".join(notes) or None)


def _grown(before: float | None, after: float | None) -> float | None:
    """A counter's growth; all of ``after`` when it went back (vLLM restarted)."""
    if before is None or after is None:
        return None
    return after if after < before else after - before


def _merged(deltas: list[Buckets | None]) -> tuple[Buckets | None, str]:
    """Several servers' deltas as one histogram, and why not when they cannot be one.

    A cumulative count is known at a bound only for a server that has that bound, so the
    sum is exact at the bounds every server has: servers whose layouts differ (another
    vLLM version, another configuration) merge on their common bounds, a coarser histogram
    of the same requests. With no finite bound in common there is nothing to interpolate
    in: None and the reason. A server lacking the histogram makes it unknown (no reason:
    nothing was asked of it, or it does not export it).
    """
    if not deltas or None in deltas:
        return None, ""
    common = set.intersection(*({bound for bound, _count in delta} for delta in deltas))
    if len(deltas) > 1 and not common - {math.inf}:
        return None, "the servers' buckets share no bound below +Inf"
    counts = [dict(delta) for delta in deltas]
    return tuple((bound, math.fsum(each[bound] for each in counts))
                 for bound in sorted(common)), ""


def _delta(before: Buckets | None, after: Buckets | None) -> Buckets | None:
    """What happened between two scrapes; the whole of ``after`` when vLLM restarted (a
    count went back, or its buckets changed), None when either lacks the histogram.

    ``before`` may be sparse (the memory records written before every bucket was kept held
    only the buckets whose count differs from the one below): a bound it lacks has the count
    of the bound below it.
    """
    if before is None or after is None:
        return None
    stored = dict(before)
    if not set(stored) <= {bound for bound, _count in after}:
        return after
    filled, below = [], 0.0
    for bound, _count in after:
        below = stored.get(bound, below)
        filled.append(below)
    delta = tuple((bound, count - old) for (bound, count), old in zip(after, filled, strict=True))
    if any(count < 0 for _bound_value, count in delta):
        return after
    return delta


def bucket_quantile(quantile: float, buckets: Buckets) -> float | None:
    """The ``quantile`` of cumulative ``buckets`` as Prometheus's ``histogram_quantile``
    computes it (the same steps in the same order, so the same float): interpolated inside
    the bucket holding the rank, from the bound below it (0 for the first bucket); None when
    the buckets count nothing or have no finite bound (Prometheus: NaN).

    A rank in the ``+Inf`` bucket is the largest finite bound (no more is known).
    """
    total = buckets[-1][1]
    if total <= 0 or len(buckets) < 2:
        return None
    rank = quantile * total
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == math.inf:
                return lower
            inside = count - below
            return bound if inside <= 0 else lower + (bound - lower) * ((rank - below) / inside)
        lower, below = bound, count
    return lower
