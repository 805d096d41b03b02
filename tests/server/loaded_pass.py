"""A recorded pass with loads for the test fleet (tests/server/fleet_pair.py).

gemma on KNOWN is Healthy and oversized, qwen on KNOWN Healthy and saturated with
its KV size unknown, qwen on OTHER_KNOWN Stalled and never scraped: what
``/metrics``, the dashboard and a real Prometheus are checked against.
"""

from __future__ import annotations

import time
from typing import Any

from llmao_server.store import ReconcilePass
from tests.server.fleet_pair import KNOWN, LEGACY, OTHER_KNOWN

GEMMA = f"llmao:{KNOWN}:8001:gemma"
QWEN = f"llmao:{KNOWN}:8002:qwen"
OTHER_QWEN = f"llmao:{OTHER_KNOWN}:8001:qwen"
LEGACY_GEMMA = f"llmao:{LEGACY}:8000:gemma"


def scraped(box: str, port: int, name: str, state: str, **load: Any) -> dict[str, Any]:
    return {"id": f"llmao:{box}:{port}:{name}", "box": box, "name": name, "model_name": name,
            "listen_port": port, "state": state, "reason": f"{state} in the test pass",
            "in_litellm": state == "Healthy", "memory": {}, **load}


def metrics(kv_tokens: int | None, usage: float | None, waiting: int | None) -> dict[str, Any]:
    return {"kv_cache_tokens": kv_tokens, "kv_cache_usage_ratio": usage,
            "requests_running": 2, "requests_waiting": waiting, "prompt_tokens_total": 100,
            "generation_tokens_total": 900, "max_model_len": 32768, "scraped_at": time.time()}


# gemma's latency over the last interval; its e2e p95 is unknown (absent, never 0).
LATENCY = {"ttft_p50_s": 0.05, "ttft_p95_s": 0.2, "e2e_p50_s": 1.5, "e2e_p95_s": None,
           "itl_p50_s": 0.02, "itl_p95_s": 0.04, "preemptions": 1}


def a_pass(now: float) -> ReconcilePass:
    """One server of each kind: oversized, saturated, healthy, Stalled (never scraped)."""
    return ReconcilePass(
        now - 30,
        {GEMMA: scraped(KNOWN, 8001, "gemma", "Healthy", metrics=metrics(2048, 0.25, 0),
                        context_len=32768, oversized=True, saturated=False,
                        generation_tokens_per_s=12.5, cost_per_hour=0.4,
                        latency=LATENCY),
         QWEN: scraped(KNOWN, 8002, "qwen", "Healthy",
                       metrics=metrics(None, 0.97, 7), context_len=32768, oversized=None,
                       saturated=True, waiting_passes=4, cost_per_hour=0.4),
         OTHER_QWEN: scraped(OTHER_KNOWN, 8001, "qwen", "Stalled", metrics=None),
         LEGACY_GEMMA: scraped(LEGACY, 8000, "gemma", "Healthy",
                               metrics=metrics(65536, 0.31, 0), context_len=32768,
                               oversized=False, saturated=False, generation_tokens_per_s=40.0,
                               cost_per_hour=0.6)},
        ({"kind": "revision_behind", "box": KNOWN}, {"kind": "orphan_route"},
         {"kind": "orphan_route"}),
        now,
        {"gemma": {"servers": 2, "healthy": 2, "kv_cache_tokens": 67584, "capacity": 2,
                   "requests_running": 4, "requests_waiting": 0, "oversized": 1,
                   "saturated": False, "generation_tokens_per_s": 52.5, "cost_per_hour": 1.0,
                   "cost_per_million_tokens": 5.291, "latency": LATENCY},
         "qwen": {"servers": 2, "healthy": 1, "requests_running": 2, "requests_waiting": 7,
                  "oversized": 0, "saturated": True}},
        {KNOWN: {"provider": "local", "cost_per_hour": 0.8, "source": "config"},
         OTHER_KNOWN: {"provider": "local", "cost_per_hour": None, "source": None},
         LEGACY: {"provider": "local", "cost_per_hour": 0.6, "source": "config"}})


def pass_document(record: ReconcilePass) -> dict[str, Any]:
    """The pass as reconcile posts it to ``POST /admin/api/verdicts``."""
    return {"pass_at": record.pass_at, "verdicts": dict(record.verdicts),
            "drift": list(record.drift), "models": dict(record.models),
            "boxes": dict(record.boxes)}
