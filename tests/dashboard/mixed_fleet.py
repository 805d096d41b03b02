"""A fleet in every kind of weather, for the dashboard's screenshot.

The verdicts are not written by hand: reconcile's own planning step
(``llmao.fleet.fleet_plan``) classifies probes that describe each situation
(serving, loading, silent past the grace, 401 to our bearer, gone from the
listings) against Vast and RunPod listings, and ``verdicts_document`` shapes
the result exactly as reconcile posts it to llmao.
"""

from __future__ import annotations

import copy
import math
from types import MappingProxyType
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Models, Probe
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    ListedBox,
    Listings,
    index_listings,
)
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import Route
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import verdicts_document
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import Observations
from ansible_collections.llmao.fleet.plugins.module_utils.server_load import (
    BoxCost,
    ServerLoad,
    model_load,
)
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import ServerMetrics
from ansible_collections.llmao.fleet.plugins.modules.fleet_plan import make_plan, plan_result
from llmao_server.store import AppliedReport, ReconcilePass, StateStore, UnknownBox
from tests.server.fleet_pair import CONFIG, LEGACY, UNKNOWN

SERVING = Probe(True, Models.LISTS)
LOADING = Probe(True, Models.OTHER)
SILENT = Probe(False, Models.SKIPPED, "connection refused")
REJECTING = Probe(True, Models.REJECTED)

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0

# box → (its rows, the probe of each row, minutes since its last config fetch or None)
BOXES: dict[str, tuple[list[list[Any]], list[Probe], float | None]] = {
    "203.0.113.10": ([["gemma", 8001], ["qwen", 8002]], [SERVING, SERVING], 14 * MINUTE),
    "203.0.113.11": ([["qwen", 8001]], [LOADING], 3 * MINUTE),
    "203.0.113.12": ([["gemma", 8001]], [SILENT], 26 * MINUTE),
    "203.0.113.13": ([["gemma", 8001], ["qwen", 8002]], [REJECTING, SERVING], 5 * HOUR),
    "203.0.113.14": ([["qwen", 8001]], [SILENT], 2 * DAY),
    LEGACY: ([["gemma", 8000]], [SERVING], 3 * DAY),
}
VAST = ("203.0.113.10", "203.0.113.11", "203.0.113.12", "203.0.113.13")
RUNPOD = (LEGACY,)
HAND_MADE_ROUTE = Route("a1f3c9e2-hand-added", "qwen", "http://192.0.2.200:8000/v1", None)


def config_document() -> dict[str, Any]:
    """The test fleet's config with these boxes and two provider listings configured."""
    document = copy.deepcopy(CONFIG)
    document["fleet"]["hosts"] = {box: rows for box, (rows, _, _) in BOXES.items()}
    document["providers"] = {"vast": {"api_key": "vast-key-never-used"},
                             "runpod": {"api_key": "runpod-key-never-used"}}
    return document


def listings() -> Listings:
    """Vast and RunPod as they would list the boxes: public ports are not listen ports."""
    listed = [ListedBox(provider, (box,), box,
                        MappingProxyType({row[1]: 40000 + index * 10 + row[1] % 10
                                          for row in BOXES[box][0]}))
              for index, (provider, box) in enumerate(
                  [("vast", box) for box in VAST] + [("runpod", box) for box in RUNPOD])]
    return index_listings(["vast", "runpod"], listed, {})


def seed(store: StateStore, fleet: Fleet, now: float) -> None:
    """Write fetches, an applied report, an unknown box and a reconcile pass into ``store``."""
    fetches = {box: now - ago for box, (_, _, ago) in BOXES.items() if ago is not None}
    store.note_fetches(fetches)
    stalled = "203.0.113.12"
    store.record_applied(AppliedReport(stalled, "5e0f7a1c2b3d4e6f", "2026-01-01T00:00:00Z", (),
                                       now - HOUR))
    for box in ("203.0.113.10", "203.0.113.11"):
        store.record_applied(AppliedReport(box, fleet.assignments[box].revision,
                                           "2026-01-01T00:00:00Z", (), now - HOUR))
    store.note_unknown([UnknownBox(UNKNOWN, now - 40 * MINUTE, now - 2 * MINUTE, 3)])

    listed = listings()
    probes = {}
    for box, (_, box_probes, _) in BOXES.items():
        for server, probe in zip(fleet.assignments[box].servers, box_probes, strict=True):
            probes[server.id] = probe
    routes = [HAND_MADE_ROUTE]
    for server in fleet.servers():
        if probes[server.id] in (SERVING, REJECTING):
            endpoint = listed.endpoint(server.box, server.listen_port, None)
            routes.append(Route(server.id, server.model_name, endpoint.base_url,
                                endpoint.base_url))
    applied = {box: report.revision for box, report in store.applied_reports().items()}
    observations = Observations(now, fetches, applied, {}, listed, tuple(routes))
    result = plan_result(make_plan(fleet, observations, probes), observations)
    document = verdicts_document(result["now"], result["servers"], result["memories"],
                                 result["drift"], result["models"], result["boxes"])
    store.record_pass(ReconcilePass(document["pass_at"], document["verdicts"],
                                    tuple(document["drift"]), now))


# ---------------------------------------------------------------- load, over hours

# Healthy server → (KV tokens, context it serves). gemma on .10 is oversized (its context
# does not fit its cache); qwen on .10 fills up in the last hour until requests wait; the
# others are calm.
LOADED = {("203.0.113.10", 8001): (2_048, 8_192), ("203.0.113.10", 8002): (98_304, 16_384),
          ("203.0.113.13", 8002): (131_072, 16_384), (LEGACY, 8000): (262_144, 8_192)}
# What the listings bill per hour; .14 is in none of them: unknown.
PRICES = {"203.0.113.10": 1.10, "203.0.113.11": 0.80, "203.0.113.12": 0.80,
          "203.0.113.13": 1.80, LEGACY: 0.30}
HISTORY_HOURS, HISTORY_STEP = 6, 5 * MINUTE


def busy(box: str, port: int, hours_ago: float) -> tuple[float, int, int, float]:
    """(KV usage, running, waiting, tokens/s) of a server at a time: a day's curve."""
    wave = 0.5 + 0.4 * math.sin(hours_ago * 1.3 + port)
    if (box, port) == ("203.0.113.10", 8002):
        pressure = max(0.0, 1.0 - hours_ago)  # the last hour: the queue builds
        return min(0.97, 0.55 + 0.45 * pressure), 6 + int(4 * wave), int(9 * pressure), \
            120 + 60 * wave
    return 0.15 + 0.3 * wave, 1 + int(4 * wave), 0, 40 + 50 * wave


def loaded_pass(record: ReconcilePass, at: float, now: float) -> ReconcilePass:
    """``record``'s verdicts with each Healthy server's load at ``at``, and the model and
    box figures the core computes from them (``server_load.model_load``)."""
    verdicts, by_model = {}, {}
    for key, verdict in record.verdicts.items():
        place = (verdict["box"], verdict["listen_port"])
        healthy = verdict["state"] == "Healthy"
        price = PRICES.get(verdict["box"])
        share = None if price is None else price / len(BOXES[verdict["box"]][0])
        if place not in LOADED or not healthy:
            load = ServerLoad(cost_per_hour=share)
        else:
            kv_tokens, context = LOADED[place]
            usage, running, waiting, rate = busy(*place, (now - at) / HOUR)
            metrics = ServerMetrics(kv_tokens, usage, running, waiting, None, None, context, at)
            load = ServerLoad(metrics, context, context > kv_tokens, waiting > 0 or usage > 0.9,
                              1 if waiting else 0, rate, share)
        verdicts[key] = {**verdict, **load.record()}
        by_model.setdefault(verdict["model_name"], []).append((load, healthy))
    models = {name: model_load(loads).record() for name, loads in by_model.items()}
    boxes = {box: BoxCost("vast" if box in VAST else "runpod" if box in RUNPOD else "unlisted",
                          PRICES.get(box), "listing" if box in PRICES else None).record()
             for box in BOXES}
    return ReconcilePass(at, verdicts, record.drift, at, models, boxes)


def seed_load(store: StateStore, now: float) -> None:
    """Six hours of passes over the latest one's servers, five minutes apart, ending now."""
    record = store.last_pass()
    steps = int(HISTORY_HOURS * HOUR // HISTORY_STEP)
    for step in range(steps, -1, -1):
        store.record_pass(loaded_pass(record, now - step * HISTORY_STEP, now))
