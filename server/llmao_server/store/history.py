"""The load history's samples: the few figures of a pass the dashboard's charts draw.

A pass holds every verdict with its reasons and memory; the history keeps only
numbers, so that two days of passes stay small. What is kept, and how it is
thinned, is the store's (:data:`.base.HISTORY_FULL_S` and its neighbours).
"""

from __future__ import annotations

from ansible_collections.llmao.fleet.plugins.module_utils.fleet_load import read_load_document
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import (
    MetricsRecordError,
)

from .base import LoadSample, ReconcilePass

SERVER_FIGURES = ("kv_cache_usage_ratio", "requests_running", "requests_waiting")
MODEL_FIGURES = ("capacity", "requests_running", "requests_waiting", "generation_tokens_per_s",
                 "cost_per_hour")


def load_sample(record: ReconcilePass) -> LoadSample:
    """The pass's sample; a pass whose loads cannot be read has an empty one."""
    try:
        servers, models, _boxes = read_load_document(
            {"verdicts": record.verdicts, "models": record.models, "boxes": record.boxes})
    except MetricsRecordError:
        return LoadSample(record.pass_at, {}, {})
    return LoadSample(
        record.pass_at,
        {key: {**{name: getattr(load.metrics, name) if load.metrics else None
                  for name in SERVER_FIGURES},
               "generation_tokens_per_s": load.generation_tokens_per_s}
         for key, load in servers.items()},
        {name: {figure: getattr(load, figure) for figure in MODEL_FIGURES}
         for name, load in models.items()})
