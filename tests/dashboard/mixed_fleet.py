"""A fleet in every kind of weather, for the dashboard's screenshot.

The verdicts are not written by hand: reconcile's own planning step
(``llmao.fleet.fleet_plan``) classifies probes that describe each situation
(serving, loading, silent past the grace, 401 to our bearer, gone from the
listings) against Vast and RunPod listings, and ``verdicts_document`` shapes
the result exactly as reconcile posts it to llmao.
"""

from __future__ import annotations

import copy
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
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_plan import server_key
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import Observations
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
            probes[server_key(server)] = probe
    routes = [HAND_MADE_ROUTE]
    for server in fleet.servers():
        if probes[server_key(server)] in (SERVING, REJECTING):
            endpoint = listed.endpoint(server.box, server.listen_port, None)
            routes.append(Route(server_key(server), server.model_name, endpoint.base_url,
                                endpoint.base_url))
    applied = {box: report.revision for box, report in store.applied_reports().items()}
    observations = Observations(now, fetches, applied, {}, listed, tuple(routes))
    result = plan_result(make_plan(fleet, observations, probes), observations)
    document = verdicts_document(result["now"], result["servers"], result["memories"],
                                 result["drift"], result["models"], result["boxes"])
    store.record_pass(ReconcilePass(document["pass_at"], document["verdicts"],
                                    tuple(document["drift"]), now))
