"""The load history's samples: the few figures of a pass the dashboard's charts draw.

A pass holds every verdict with its reasons and memory; the history keeps only
numbers, so that two days of passes stay small. What is kept, and how it is
thinned, is the store's (:data:`.base.HISTORY_FULL_S` and its neighbours).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.server_load import read_load_document
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import (
    MetricsRecordError,
)

from .base import LoadSample, ReconcilePass

SERVER_FIGURES = ("kv_cache_usage_ratio", "requests_running", "requests_waiting")
MODEL_FIGURES = ("capacity", "requests_running", "requests_waiting", "generation_tokens_per_s",
                 "cost_per_hour")
# A model's KV cache in use: its fullest server's, the one that saturates first.
MODEL_KV = "kv_cache_usage_ratio"


def load_sample(record: ReconcilePass) -> LoadSample:
    """The pass's sample; a pass whose loads cannot be read has an empty one."""
    try:
        servers, models, _boxes = read_load_document(
            {"verdicts": record.verdicts, "models": record.models, "boxes": record.boxes})
    except MetricsRecordError:
        return LoadSample(record.pass_at, {}, {})
    per_server = {key: {**{name: getattr(load.metrics, name) if load.metrics else None
                           for name in SERVER_FIGURES},
                        "generation_tokens_per_s": load.generation_tokens_per_s}
                  for key, load in servers.items()}
    return LoadSample(
        record.pass_at, per_server,
        {name: {**{figure: getattr(load, figure) for figure in MODEL_FIGURES},
                MODEL_KV: fullest(record.verdicts, per_server, name)}
         for name, load in models.items()})


def fullest(verdicts: Mapping[str, Mapping[str, Any]],
            per_server: Mapping[str, Mapping[str, Any]], model: str) -> float | None:
    """The highest KV cache usage among ``model``'s servers that have a figure, or None."""
    usages = [figures[MODEL_KV] for key, figures in per_server.items()
              if figures[MODEL_KV] is not None
              and (verdicts.get(key) or {}).get("model_name") == model]
    return max(usages, default=None)
