"""What a pool pass tells llmao-server (``pool_report``, sent by ``llmao.fleet.box_pool``), with
the real llmao-server and the fake Vast: after real passes (a rent, an interruption replaced, a
429) ``/metrics`` counts the rents, returns and failed rents and shows the pool's boxes and
spend, and the kept decisions say why, naming no secret."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import LlmaoAdmin
from ansible_collections.llmao.fleet.plugins.module_utils.pool_apply import (
    Hands,
    apply_pass,
    load_memory,
    observe,
    plan_pass,
    save_memory,
)
from ansible_collections.llmao.fleet.plugins.module_utils.pool_report import pool_report
from rig.rent_api import serve_rent_api, vast_offer
from tests.integration.test_box_pool_pass import VAST_KEY, PoolRig
from tests.server.fleet_pair import SECRETS

pytestmark = pytest.mark.slow


@pytest.fixture
def pool_rig(tmp_path: Path) -> Iterator[PoolRig]:
    with serve_rent_api() as api:
        api.vast_offers = [vast_offer(31, "RTX 4090", 0.45), vast_offer(32, "RTX 4090", 0.5)]
        served = PoolRig(tmp_path, api)
        try:
            yield served
        finally:
            served.stop()


def reported_pass(rig: PoolRig, now: float) -> dict:
    """One pool pass as box_pool runs it, its report sent to llmao-server; the report."""
    memory = load_memory(rig.memory_path, rig.fleet.settings.pools)
    done = observe(rig.fleet, {}, memory, 5.0, now=now)
    plan_pass(done, 5.0)
    admin = LlmaoAdmin.from_settings(rig.fleet.settings, 5.0)
    entries: list[dict] = []
    hands = Hands(rig.fleet, admin, LiteLLM.from_settings(rig.fleet.settings, 5.0), 2.0,
                  lambda entry: entries.append({**entry, "time": now}))
    kept = apply_pass(done, hands)
    save_memory(rig.memory_path, kept)
    report = pool_report(done, kept, entries, time.time())
    admin.report_pools(report)
    return report


def pool_samples(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(sample.name, tuple(sorted((k, v) for k, v in sample.labels.items()
                                       if k != "pool"))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name.startswith(("llmao_pool_", "llmao_budget"))}


def test_rents_returns_and_failed_rents_reach_metrics(pool_rig: PoolRig) -> None:
    start = time.time()
    first = reported_pass(pool_rig, start)
    chat = first["pools"]["chat"]
    assert [d["kind"] for d in chat["decisions"]] == ["rent"]
    assert [m["state"] for m in chat["members"]] == ["renting"]
    seen = pool_samples(pool_rig.server.url)
    assert seen[("llmao_pool_rents_total", ())] == 1
    assert seen[("llmao_pool_boxes", (("state", "renting"),))] == 1
    assert seen[("llmao_pool_spend_usd_per_hour", ())] == 0.45
    assert seen[("llmao_budget_usd_per_hour", ())] == 1.0

    (instance,) = pool_rig.api.instances
    pool_rig.api.interrupt(instance)
    pool_rig.api.throttled_creates = [120]
    third = reported_pass(pool_rig, start + 30)
    kinds = [(d["kind"], d["error"]) for d in third["pools"]["chat"]["decisions"]]
    assert kinds == [("rent_failed", "throttled"), ("return", None)], kinds
    seen = pool_samples(pool_rig.server.url)
    assert seen[("llmao_pool_failed_rents_total", (("reason", "throttled"),))] == 1
    assert seen[("llmao_pool_returns_total", ())] == 1
    assert seen[("llmao_pool_boxes", (("state", "stopped"),))] == 1  # as this pass saw it
    later = reported_pass(pool_rig, start + 200)  # the provider's wait is over: replaced
    assert [d["kind"] for d in later["pools"]["chat"]["decisions"]] == ["rent"]
    assert pool_samples(pool_rig.server.url)[("llmao_pool_rents_total", ())] == 2
    text = json.dumps([first, third, later])
    assert not any(secret in text for secret in (*SECRETS, VAST_KEY))
