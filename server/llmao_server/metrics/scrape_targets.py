"""``GET /metrics/targets``: every intended vLLM server, for Prometheus to scrape directly.

The answer is Prometheus's HTTP service discovery format (``http_sd_configs``): a
JSON list of target groups, one per server, each ``{"targets": ["host:port"],
"labels": {"box", "server", "model", "provider"}}``. The address is the public one
the latest reconcile pass dialled (it read the provider listings); a server that
pass could not place (no public address known) is left out until one does. A
fleet without provider listings is dialled at its listen ports, so its servers
are listed before any pass too. Under ``box_tls`` every vLLM speaks HTTPS only, so
each group says so in Prometheus's ``__scheme__`` label (Prometheus needs the fleet CA
in ``tls_config``). The same bearer rule as ``/metrics`` applies.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Response

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import IntendedServer
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    LOCAL_PROVIDER,
    index_listings,
)

from ..state import ServerState, app_state
from .fleet_metrics import require_scraper

bp = Blueprint("scrape_targets", __name__)


@bp.get("/metrics/targets")
def targets() -> Response:
    state = app_state()
    require_scraper(state.fleet.settings.metrics.token)
    return Response(json.dumps(list(target_groups(state))), 200,
                    content_type="application/json", headers={"Cache-Control": "no-store"})


def target_groups(state: ServerState) -> Iterator[dict[str, Any]]:
    """One group per intended server (``fleet.hosts`` and approved boxes) with an address."""
    last = state.store.last_pass()
    verdicts = last.verdicts if last else {}
    scheme = {} if state.fleet.settings.box_tls is None else {"__scheme__": "https"}
    for server in served_servers(state):
        verdict = verdicts.get(server.id, {})
        address, provider = verdict.get("public"), verdict.get("provider")
        if not address:
            address, provider = local_address(state.fleet, server), LOCAL_PROVIDER
        if address:
            yield {"targets": [address],
                   "labels": {"box": server.box, "server": server.name,
                              "model": server.model_name,
                              "provider": str(provider or LOCAL_PROVIDER), **scheme}}


def served_servers(state: ServerState) -> Iterator[IntendedServer]:
    """The servers of ``fleet.hosts``, then those of boxes approved on the dashboard."""
    yield from state.fleet_in_force().servers()


def local_address(fleet: Fleet, server: IntendedServer) -> str | None:
    """``host:port`` of a server of a fleet without listings (public equals listen)."""
    if fleet.settings.providers:
        return None
    endpoint = index_listings([], [], {}).endpoint(server.box, server.listen_port,
                                                   server.seed_public_port)
    return None if endpoint is None else endpoint.address
