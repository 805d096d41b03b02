# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a reconcile pass concludes from the servers' metrics: oversized, saturated, capacity, cost.

Pure, like the lifecycle: the scraped figures, the previous pass's memory and
the prices come in; one :class:`ServerLoad` per server, one :class:`ModelLoad`
per model and one :class:`BoxCost` per box go out. Their ``record`` and
``from_record`` are the wire form reconcile posts to llmao's admin API with the
verdicts (``docs/metrics.md`` is the contract), kept side by side so the
writer and the reader cannot drift apart.

Unknown stays unknown: a verdict that needs a figure nobody read is None,
never False, and a sum over servers that lacks one of them is None, never a
smaller number that looks true.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from .config_file import LoadKnobs
from .lifecycle import Memory
from .vllm_latency import Cumulative, Latency, Scrapes, interval_latency
from .vllm_metrics import MetricsRecordError, ServerMetrics, is_figure

TOKENS_PER_MILLION = 1_000_000
SECONDS_PER_HOUR = 3600
# ModelLoad's fields that are not whole numbers.
MODEL_KINDS = {"saturated": bool, "generation_tokens_per_s": float, "cost_per_hour": float,
               "cost_per_million_tokens": float}


@dataclass(frozen=True)
class ServerLoad:
    """One server after this pass: its figures and what they mean.

    ``context_len`` is the served ``max_model_len`` (observed, else configured);
    ``oversized`` says it exceeds the KV cache; ``waiting_passes`` counts the
    consecutive passes with requests waiting; ``cost_per_hour`` is the server's
    share of its box's price; ``latency`` its latency and preemptions over the last
    pass interval (:mod:`vllm_latency`).
    """

    metrics: ServerMetrics | None = None
    context_len: int | None = None
    oversized: bool | None = None
    saturated: bool | None = None
    waiting_passes: int = 0
    generation_tokens_per_s: float | None = None
    cost_per_hour: float | None = None
    latency: Latency | None = None

    def record(self) -> dict[str, Any]:
        """The keys this adds to the server's verdict (flat, beside ``state``)."""
        record = {item.name: getattr(self, item.name) for item in fields(self)}
        record["metrics"] = self.metrics.record() if self.metrics else None
        record["latency"] = self.latency.record() if self.latency else None
        return record

    @classmethod
    def from_record(cls, record: Any, what: str = "verdict") -> ServerLoad:
        """Back from a verdict; keys of an older reconcile that lacks them are unknown."""
        if not isinstance(record, Mapping):
            raise MetricsRecordError(f"{what} must be an object")
        metrics = record.get("metrics")
        return cls(
            metrics=None if metrics is None else ServerMetrics.from_record(metrics),
            context_len=_optional(record, "context_len", int, what),
            oversized=_optional(record, "oversized", bool, what),
            saturated=_optional(record, "saturated", bool, what),
            waiting_passes=_optional(record, "waiting_passes", int, what) or 0,
            generation_tokens_per_s=_optional(record, "generation_tokens_per_s", float, what),
            cost_per_hour=_optional(record, "cost_per_hour", float, what),
            latency=_latency(record, what),
        )


def _latency(record: Mapping[str, Any], what: str) -> Latency | None:
    try:
        return None if record.get("latency") is None else Latency.from_record(record["latency"])
    except MetricsRecordError as exc:
        raise MetricsRecordError(f"{what}: {exc}") from None


@dataclass(frozen=True)
class ModelLoad:
    """One model across its servers this pass.

    ``capacity`` is how many requests of its full context its Healthy servers
    hold at once (Σ per server of KV tokens // context); ``saturated`` names a
    model that needs another box; costs are in the price's currency (USD).
    """

    servers: int = 0
    healthy: int = 0
    kv_cache_tokens: int | None = None
    capacity: int | None = None
    requests_running: int | None = None
    requests_waiting: int | None = None
    oversized: int = 0
    saturated: bool | None = None
    generation_tokens_per_s: float | None = None
    cost_per_hour: float | None = None
    cost_per_million_tokens: float | None = None
    latency: Latency | None = None

    def record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: Any, what: str = "model") -> ModelLoad:
        if not isinstance(record, Mapping):
            raise MetricsRecordError(f"{what} must be an object")
        values = {item.name: _optional(record, item.name, MODEL_KINDS.get(item.name, int), what)
                  for item in fields(cls) if item.name != "latency"}
        for counted in ("servers", "healthy", "oversized"):
            values[counted] = values[counted] or 0
        return cls(**values, latency=_latency(record, what))


@dataclass(frozen=True)
class BoxCost:
    """A box's price per hour and where it comes from (``listing``, ``config``, or None)."""

    provider: str
    cost_per_hour: float | None = None
    source: str | None = None

    def record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: Any, what: str = "box") -> BoxCost:
        if not isinstance(record, Mapping) or not isinstance(record.get("provider"), str):
            raise MetricsRecordError(f"{what} must be an object with a provider")
        source = record.get("source")
        if source not in (None, "listing", "config"):
            raise MetricsRecordError(f"{what}.source must be listing, config or null")
        return cls(record["provider"], _optional(record, "cost_per_hour", float, what), source)


def _optional(record: Mapping[str, Any], key: str, kind: type, what: str) -> Any:
    """``record[key]`` as ``kind`` or None; a value of another type raises."""
    value = record.get(key)
    if value is None:
        return None
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif is_figure(value) and (kind is float or value == int(value)):
        return kind(value)
    raise MetricsRecordError(f"{what}.{key} must be {kind.__name__} or null")


# ------------------------------------------------------------------ one server


def context_len(metrics: ServerMetrics | None, configured: int | None) -> int | None:
    """What the server serves: what ``/v1/models`` said, else what models.yaml asks."""
    if metrics is not None and metrics.max_model_len is not None:
        return metrics.max_model_len
    return configured


def is_oversized(context: int | None, metrics: ServerMetrics | None) -> bool | None:
    """A context longer than the KV cache: vLLM takes such a request, then hangs on it."""
    if context is None or metrics is None or metrics.kv_cache_tokens is None:
        return None
    return context > metrics.kv_cache_tokens


def count_waiting(previous: int, metrics: ServerMetrics | None) -> int:
    """Consecutive passes with requests waiting, this one included; unknown breaks the run."""
    if metrics is None or not metrics.requests_waiting:
        return 0
    return previous + 1


def is_saturated(waiting_passes: int, metrics: ServerMetrics | None,
                 knobs: LoadKnobs) -> bool | None:
    if waiting_passes >= knobs.saturated_passes:
        return True
    usage = metrics.kv_cache_usage_ratio if metrics else None
    if usage is not None and usage > knobs.saturated_kv_usage:
        return True
    if metrics is None or (usage is None and metrics.requests_waiting is None):
        return None
    return False


def generation_rate(metrics: ServerMetrics | None, previous_total: int | None,
                    previous_at: float | None) -> float | None:
    """Generated tokens per second since the previous pass; a restart's reset is unknown."""
    if metrics is None or None in (metrics.generation_tokens_total, metrics.scraped_at,
                                   previous_total, previous_at):
        return None
    elapsed = metrics.scraped_at - previous_at
    generated = metrics.generation_tokens_total - previous_total
    if elapsed <= 0 or generated < 0:
        return None
    return bounded(generated / elapsed)


def server_load(metrics: ServerMetrics | None, configured_context: int | None,
                healthy: bool, previous: Memory, cost_share: float | None,
                knobs: LoadKnobs) -> ServerLoad:
    """One server's verdicts; only a Healthy server can be saturated."""
    context = context_len(metrics, configured_context)
    waiting = count_waiting(previous.waiting_passes, metrics)
    return ServerLoad(metrics, context, is_oversized(context, metrics),
                      is_saturated(waiting, metrics, knobs) if healthy else False, waiting,
                      generation_rate(metrics, previous.generation_tokens_total,
                                      previous.generation_counted_at), cost_share)


def seen_latency(memory: Memory) -> Cumulative | None:
    """The histograms the previous pass scraped; a stored record of another shape is
    forgotten (the next interval starts from this pass)."""
    if memory.latency_seen is None:
        return None
    try:
        return Cumulative.from_record(memory.latency_seen)
    except MetricsRecordError:
        return None


def with_latency(load: ServerLoad, scrapes: Scrapes) -> ServerLoad:
    """``load`` with its latency between the previous pass's scrape and this one's."""
    return replace(load, latency=interval_latency([scrapes]))


def remember_latency(memory: Memory, previous: Memory, seen: Cumulative | None) -> Memory:
    """This pass's histograms for the next; unread, the previous ones are kept so the next
    interval spans both passes rather than none."""
    return replace(memory, latency_seen=seen.record() if seen is not None
                   else previous.latency_seen)


def remember_load(memory: Memory, previous: Memory, load: ServerLoad) -> Memory:
    """The lifecycle memory with what the next pass's load needs.

    A generation counter this pass could not read keeps the previous one, so
    the next rate spans both passes rather than none.
    """
    metrics = load.metrics
    counted = metrics is not None and metrics.generation_tokens_total is not None \
        and metrics.scraped_at is not None
    return replace(memory, waiting_passes=load.waiting_passes,
                   generation_tokens_total=metrics.generation_tokens_total if counted
                   else previous.generation_tokens_total,
                   generation_counted_at=metrics.scraped_at if counted
                   else previous.generation_counted_at)


# ------------------------------------------------------------------ one model


def bounded(value: float | None) -> float | None:
    """``value``, or None (unknown) past what a record holds (:func:`is_figure`).

    Each server's figures are bounded where they are read, but a sum over servers or a
    rate over a short time can still pass the bound; llmao would refuse the whole pass.
    """
    return value if value is None or is_figure(value) else None


def _sum(values: Iterable[float | None]) -> float | None:
    """The sum, or None when any term is unknown, there is none, or it is out of bounds."""
    values = list(values)
    if not values or any(value is None for value in values):
        return None
    return bounded(sum(values))


def model_load(loads: list[tuple[ServerLoad, bool]],
               scrapes: Iterable[Scrapes] = ()) -> ModelLoad:
    """A model from its servers' loads, each paired with whether it is Healthy, and the
    pairs of scrapes of its Healthy servers (their latency summed).

    Load and capacity count Healthy servers only (the others get no traffic);
    the cost counts every server, since a box is paid for whatever it does.
    """
    healthy = [load for load, is_healthy in loads if is_healthy]
    capacity = _sum(None if load.context_len is None or load.metrics is None
                    or load.metrics.kv_cache_tokens is None
                    else load.metrics.kv_cache_tokens // load.context_len for load in healthy)
    rates = [load.generation_tokens_per_s for load in healthy]
    # A server that just restarted has no rate for a pass: the others' still tell the model's.
    rate = _sum(known for known in rates if known is not None)
    cost = _sum(load.cost_per_hour for load, _healthy in loads)
    per_million = None
    # Priced on every server's tokens only: a part of them would make each one dearer.
    if cost is not None and rate and None not in rates:
        per_million = bounded(cost / (rate * SECONDS_PER_HOUR / TOKENS_PER_MILLION))
    saturated = [load.saturated for load in healthy]
    return ModelLoad(
        servers=len(loads), healthy=len(healthy),
        kv_cache_tokens=_whole(_sum(_figure(load, "kv_cache_tokens") for load in healthy)),
        capacity=_whole(capacity),
        requests_running=_whole(_sum(_figure(load, "requests_running") for load in healthy)),
        requests_waiting=_whole(_sum(_figure(load, "requests_waiting") for load in healthy)),
        oversized=sum(1 for load, _healthy in loads if load.oversized),
        saturated=True if any(saturated) else None if None in saturated or not healthy
        else False,
        generation_tokens_per_s=rate, cost_per_hour=cost, cost_per_million_tokens=per_million,
        latency=interval_latency(scrapes))


def _figure(load: ServerLoad, name: str) -> float | None:
    return None if load.metrics is None else getattr(load.metrics, name)


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


# -------------------------------------------------------------------- a box


def box_cost(provider: str, listed_price: float | None, configured: float | None) -> BoxCost:
    """The listing's price (what the provider bills), else ``fleet.cost_per_hour``'s."""
    if listed_price is not None:
        return BoxCost(provider, listed_price, "listing")
    if configured is not None:
        return BoxCost(provider, configured, "config")
    return BoxCost(provider)


def cost_share(cost: BoxCost, servers: int) -> float | None:
    """One server's part of its box's price: the box's servers share it equally."""
    if cost.cost_per_hour is None or servers < 1:
        return None
    return cost.cost_per_hour / servers


# -------------------------------------------------------------------- a pass


def load_document(models: Mapping[str, ModelLoad],
                  boxes: Mapping[str, BoxCost]) -> dict[str, Any]:
    """The pass's ``models`` and ``boxes``, as fleet_plan returns and the admin API takes
    them; each server's record goes into its verdict. :func:`read_load_document` reads it."""
    return {"models": {name: load.record() for name, load in models.items()},
            "boxes": {box: cost.record() for box, cost in boxes.items()}}


LoadDocument = tuple[dict[str, ServerLoad], dict[str, ModelLoad], dict[str, BoxCost]]


def read_load_document(document: Any) -> LoadDocument:
    """A posted pass's loads: per server (from its verdict), per model, per box.

    For the server side. A pass from a reconcile older than the metrics has
    no ``models`` or ``boxes``: empty, not an error.
    """
    if not isinstance(document, Mapping):
        raise MetricsRecordError("the pass must be an object")
    verdicts, models, boxes = (document.get(key, {}) for key in ("verdicts", "models", "boxes"))
    if not all(isinstance(part, Mapping) for part in (verdicts, models, boxes)):
        raise MetricsRecordError("verdicts, models and boxes must be objects")
    return ({str(key): ServerLoad.from_record(value, f"verdicts[{key!r}]")
             for key, value in verdicts.items()},
            {str(name): ModelLoad.from_record(value, f"models[{name!r}]")
             for name, value in models.items()},
            {str(box): BoxCost.from_record(value, f"boxes[{box!r}]")
             for box, value in boxes.items()})
