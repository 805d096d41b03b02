"""The fleet_plan module's logic: records from the other tasks in, a plan to print and apply."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Memory, State
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    index_listings,
    parse_vast,
)
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import Route
from ansible_collections.llmao.fleet.plugins.module_utils.pool_config import (
    box_name,
    instance_label,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import (
    Observations,
    listings_from_record,
    listings_record,
    probes_from_record,
)
from ansible_collections.llmao.fleet.plugins.modules.fleet_plan import (
    PlanError,
    make_plan,
    plan_result,
)
from ansible_collections.llmao.fleet.tests.unit.fleets import (
    base_config,
    base_models,
    pooled,
    write_pair,
)
from rig.provider_api import vast_instance

NOW = 10_000.0
GEMMA, QWEN, LEGACY = ("llmao:203.0.113.10:8001:gemma", "llmao:203.0.113.10:8002:qwen",
                       "llmao:198.51.100.7:8000:gemma")
SERVING = {"health_ok": True, "models": "lists", "detail": ""}
DOWN = {"health_ok": False, "models": "skipped", "detail": "connection refused"}


@pytest.fixture
def fleet(tmp_path):
    return load_fleet(*write_pair(tmp_path))


def observations(**parts):
    base = dict(now=NOW, last_fetches={"203.0.113.10": NOW - 60}, applied={},
                memories={}, listings=index_listings([], [], {}), routes=())
    return Observations(**{**base, **parts})


def result_of(fleet, seen, probes):
    result = plan_result(make_plan(fleet, seen, probes_from_record(probes)), seen)
    json.dumps(result)  # Ansible must be able to carry it
    return result


def test_first_pass_registers_the_healthy_and_says_so(fleet):
    seen = observations()
    result = result_of(fleet, seen, {GEMMA: SERVING, QWEN: DOWN, LEGACY: DOWN})
    (change,) = result["changes"]
    assert change == {"state": "present", "id": GEMMA, "box": "203.0.113.10",
                      "listen_port": 8001, "name": "gemma", "model_name": "gemma",
                      "public_host": "203.0.113.10", "public_port": 8001, "public_scheme": "http",
                      "change": "register", "why": "Healthy, not in LiteLLM"}
    assert result["deployments"] == [{"state": "present", "box": "203.0.113.10",
                                      "listen_port": 8001, "name": "gemma",
                                      "public_host": "203.0.113.10", "public_port": 8001,
                                      "public_scheme": "http",
                                      "reason": "Healthy, not in LiteLLM"}]
    assert result["counts"] == {"Healthy": 1, "Loading": 1, "Awaiting": 1, "changes": 1}
    gemma_line, qwen_line, legacy_line = result["lines"]
    assert gemma_line.startswith("203.0.113.10 gemma (gemma, 8001 -> 203.0.113.10:8001): "
                                 "Healthy: ")
    assert gemma_line.endswith("=> register: Healthy, not in LiteLLM")
    assert "Loading" in qwen_line and qwen_line.endswith("=> unchanged, not in LiteLLM")
    assert "Awaiting" in legacy_line
    assert result["memories"][GEMMA]["state"] == "Healthy"
    assert {server["provider"] for server in result["servers"]} == {"local"}
    assert result["now"] == NOW


def test_a_box_short_of_cards_is_a_drift_line_and_registers_nothing(tmp_path):
    models = base_models()
    models["models"][0]["model_info"]["vllm"]["gpus"] = 2
    fleet = load_fleet(*write_pair(tmp_path, models=models))
    seen = observations(cards={"203.0.113.10": 1})
    result = result_of(fleet, seen, {GEMMA: SERVING, QWEN: SERVING, LEGACY: DOWN})
    assert result["changes"] == [] and result["deployments"] == []
    assert result["drift_lines"] == [
        "203.0.113.10: too few cards: gemma needs 2 cards (vllm.gpus of gemma), the box "
        "reported 1"]
    assert result["lines"][0].endswith(
        "=> unchanged, not in LiteLLM: too few cards: gemma needs 2 cards (vllm.gpus of gemma), "
        "the box reported 1")


def test_a_box_listed_short_of_gpus_is_a_drift_line_before_it_reports(tmp_path):
    """The listing's GPU count crosses from fleet_observe's record to the plan."""
    models = base_models()
    models["models"][0]["model_info"]["vllm"]["gpus"] = 2
    fleet = load_fleet(*write_pair(tmp_path, models=models))
    boxes, _problems = parse_vast({"instances": [
        vast_instance(4242, "203.0.113.10", {8001: 41001, 8002: 41002}, gpus=1)]})
    record = json.loads(json.dumps(listings_record(index_listings(["vast"], boxes, {}))))
    seen = observations(listings=listings_from_record(record))
    result = result_of(fleet, seen, {GEMMA: SERVING, QWEN: SERVING, LEGACY: DOWN})
    assert result["changes"] == [] and result["deployments"] == []
    assert result["drift_lines"] == [
        "203.0.113.10: too few cards: gemma needs 2 cards (vllm.gpus of gemma), the provider "
        "lists 1 GPU"]


def test_transitions_show_in_the_lines(fleet):
    seen = observations(memories={GEMMA: Memory(State.LOADING)})
    result = result_of(fleet, seen, {GEMMA: SERVING, QWEN: DOWN, LEGACY: DOWN})
    assert result["servers"][0]["previous_state"] == "Loading"
    assert "Loading -> Healthy" in result["lines"][0]


def test_orphans_and_drift_are_printed(fleet):
    orphan = Route("llmao:192.0.2.50:8001:gemma", "gemma", "http://192.0.2.50:8001/v1",
                   "http://192.0.2.50:8001/v1")
    foreign = Route("hand-made", "gemma", "http://192.0.2.60:8001/v1", None)
    seen = observations(routes=(orphan, foreign), applied={"203.0.113.10": "0" * 16})
    result = result_of(fleet, seen, {GEMMA: DOWN, QWEN: DOWN, LEGACY: DOWN})
    assert result["changes"] == [{"state": "absent", "id": orphan.id, "model_name": "gemma",
                                  "change": "delete",
                                  "why": "llmao route matches no intended server"}]
    assert result["deployments"] == [{"state": "absent", "id": orphan.id,
                                      "reason": "llmao route matches no intended server"}]
    assert result["lines"][-1] == (f"{orphan.id} (gemma): delete: llmao route matches no "
                                   "intended server")
    revision = load_fleet(fleet.config_path, fleet.models_path).assignment(
        "203.0.113.10").revision
    assert f"203.0.113.10: applied rev {'0' * 16}, intended rev {revision}" in \
        result["drift_lines"]
    assert any(line.startswith("hand-made (gemma at http://192.0.2.60:8001/v1)")
               for line in result["drift_lines"])


def test_unhealthy_is_deleted_with_its_reason(fleet):
    healthy = Memory(State.HEALTHY, 2, 0, NOW - 100)
    route = Route(GEMMA, "gemma", "http://203.0.113.10:8001/v1", "http://203.0.113.10:8001/v1")
    seen = observations(memories={GEMMA: healthy}, routes=(route,), last_fetches={})
    result = result_of(fleet, seen, {GEMMA: DOWN, QWEN: DOWN, LEGACY: DOWN})
    (change,) = result["changes"]
    assert (change["state"], change["change"]) == ("absent", "delete")
    assert change["why"].startswith("Unhealthy: ")


def test_every_server_must_be_probed(fleet):
    with pytest.raises(PlanError, match="2 intended server"):
        make_plan(fleet, observations(), probes_from_record({GEMMA: SERVING}))


def test_no_secret_in_the_result(fleet):
    result = result_of(fleet, observations(), {GEMMA: SERVING, QWEN: SERVING, LEGACY: SERVING})
    text = json.dumps(result)
    for server in fleet.servers():
        assert server.api_key not in text
    assert fleet.settings.fleet.vllm_api_salt not in text


def scraped(**figures):
    return {**SERVING, "metrics": {"scraped_at": NOW, **figures}}


def test_load_verdicts_lines_and_memory(tmp_path):
    config = base_config()
    config["fleet"].update(cost_per_hour={"203.0.113.10": 0.6}, saturated_passes=3)
    fleet = load_fleet(*write_pair(tmp_path, config))
    seen = observations(memories={QWEN: Memory(State.HEALTHY, waiting_passes=2,
                                               generation_tokens_total=1000,
                                               generation_counted_at=NOW - 100)})
    result = result_of(fleet, seen, {
        GEMMA: scraped(kv_cache_tokens=16384, requests_waiting=0, kv_cache_usage_ratio=0.1),
        QWEN: scraped(kv_cache_tokens=65536, max_model_len=4096, requests_waiting=3,
                      requests_running=8, kv_cache_usage_ratio=0.5,
                      generation_tokens_total=3000),
        LEGACY: DOWN})
    gemma, qwen, legacy = result["servers"]
    assert (gemma["context_len"], gemma["oversized"], gemma["saturated"]) == (32768, True, False)
    assert (qwen["oversized"], qwen["saturated"], qwen["waiting_passes"]) == (False, True, 3)
    assert qwen["generation_tokens_per_s"] == 20.0 and qwen["cost_per_hour"] == 0.3
    assert legacy["metrics"] is None and legacy["oversized"] is None
    assert result["memories"][QWEN] | {"state": None} == {
        "state": None, "consecutive_failures": 0, "rejected_passes": 0,
        "last_healthy_at": NOW, "waiting_passes": 3, "generation_tokens_total": 3000,
        "generation_counted_at": NOW, "latency_seen": None, "tls_seen": False}
    assert result["models"]["qwen"]["capacity"] == 16
    assert result["models"]["qwen"]["cost_per_million_tokens"] == pytest.approx(
        0.3 / (20 * 3600 / 1e6))
    assert result["models"]["gemma"]["cost_per_hour"] is None   # one box has no price
    assert result["models"]["gemma"]["capacity"] == 0
    assert result["boxes"] == {
        "203.0.113.10": {"provider": "local", "cost_per_hour": 0.6, "source": "config"},
        "198.51.100.7": {"provider": "local", "cost_per_hour": None, "source": None}}
    oversized, gemma_line, qwen_line = result["load_lines"]
    assert oversized.startswith("203.0.113.10 gemma (gemma): OVERSIZED: serves max_model_len "
                                "32768 but its KV cache holds 16384 tokens")
    assert "hangs" in oversized and "max_model_len to at most 16384" in oversized
    assert "vram_gb" in oversized
    assert gemma_line.startswith("gemma: 1 of 2 server(s) Healthy, capacity 0 full-context")
    assert "1 server(s) oversized" in gemma_line and "SATURATED" not in gemma_line
    assert "SATURATED" in qwen_line and "needs another box" in qwen_line
    assert "generation 20.0 tokens/s" in qwen_line and "cost 0.300 $/h" in qwen_line


def test_a_pass_without_scrapes_knows_no_load(fleet):
    result = result_of(fleet, observations(), {GEMMA: SERVING, QWEN: DOWN, LEGACY: DOWN})
    assert result["models"]["gemma"]["capacity"] is None
    assert result["models"]["gemma"]["saturated"] is None
    assert [line for line in result["load_lines"] if "OVERSIZED" in line] == []
    assert "capacity unknown" in result["load_lines"][0]


def test_an_ambiguous_address_is_flagged_never_dialled_nor_unlisted(fleet):
    from types import MappingProxyType

    from ansible_collections.llmao.fleet.plugins.module_utils.listings import ListedBox
    from ansible_collections.llmao.fleet.plugins.modules.fleet_observe import observe_result

    sharing = [ListedBox("vast", (str(instance), "203.0.113.10"), "203.0.113.10",
                         MappingProxyType({8001: port})) for instance, port in
               ((4242, 41001), (4343, 42001))]
    seen = observations(listings=index_listings(["vast"], sharing, {}))
    no_answer = {"health_ok": False, "models": "skipped", "detail": "no public address known"}
    result = result_of(fleet, seen, {GEMMA: no_answer, QWEN: no_answer, LEGACY: DOWN})
    gemma, qwen, _legacy = result["servers"]
    for server, line in zip((gemma, qwen), result["lines"], strict=False):
        assert server["state"] not in ("Unlisted", "Foreign") and server["public"] is None
        assert server["provider"] == "vast"
        assert "vast 4242, vast 4343 share this address" in server["ambiguous"]
        assert line.endswith("key the fleet.hosts row by the instance id]")
    assert result["changes"] == []
    assert observe_result(seen)["ambiguous_addresses"] == {
        "203.0.113.10": ["vast 4242", "vast 4343"]}


def test_a_listing_price_wins_over_the_configured_one(tmp_path):
    from types import MappingProxyType

    from ansible_collections.llmao.fleet.plugins.module_utils.listings import ListedBox

    config = base_config()
    config["fleet"]["cost_per_hour"] = {"203.0.113.10": 0.6, "198.51.100.7": 0.2}
    fleet = load_fleet(*write_pair(tmp_path, config))
    listed = ListedBox("vast", ("4242", "203.0.113.10"), "203.0.113.10",
                       MappingProxyType({8001: 41001, 8002: 41002}), price_per_hour=0.9)
    seen = observations(listings=index_listings(["vast"], [listed], {}))
    result = result_of(fleet, seen, {GEMMA: SERVING, QWEN: SERVING, LEGACY: DOWN})
    assert result["boxes"]["203.0.113.10"] == {"provider": "vast", "cost_per_hour": 0.9,
                                               "source": "listing"}
    assert result["boxes"]["198.51.100.7"] == {"provider": "unlisted", "cost_per_hour": 0.2,
                                               "source": "config"}
    assert result["servers"][1]["cost_per_hour"] == pytest.approx(0.45)
    assert result["models"]["gemma"]["cost_per_hour"] == pytest.approx(0.45 + 0.2)


def test_a_pool_member_is_planned_as_any_box_at_its_instances_listed_address(tmp_path):
    fleet = load_fleet(*write_pair(tmp_path, pooled()))
    member = box_name("chat", "a1b2c3d4")
    listed = parse_vast({"instances": [
        {**vast_instance(4242, "198.51.100.20", {8001: 41001, 8002: 41002}, 0.4),
         "label": instance_label("chat", member)}]})[0]
    record = observations(listings=index_listings(["vast"], listed, {}),
                          last_fetches={member: NOW - 30},
                          pool_members={member: "chat"}).record()
    seen = Observations.from_record(json.loads(json.dumps(record)))  # as Ansible carries it
    joined = fleet.with_pool_members(seen.pool_members)  # what load_reconcile_fleet adds
    gemma, qwen = (f"llmao:{member}:8001:gemma", f"llmao:{member}:8002:qwen")
    probes = {server.id: DOWN for server in joined.servers()}
    result = result_of(joined, seen, {**probes, gemma: SERVING})
    (change,) = result["changes"]
    assert (change["id"], change["change"], change["public_host"], change["public_port"]) == (
        gemma, "register", "198.51.100.20", 41001)
    entries = {entry["id"]: entry for entry in result["servers"]}
    assert entries[gemma]["provider"] == entries[qwen]["provider"] == "vast"
    assert (entries[gemma]["state"], entries[qwen]["state"]) == ("Healthy", "Loading")
    assert entries[gemma]["public"] == "198.51.100.20:41001"
    priced = {"provider": "vast", "cost_per_hour": 0.4, "source": "listing"}
    assert result["boxes"][member] == priced
    # The same pass without the member knows nothing of it: its servers are no one's.
    alone = result_of(fleet, seen, {server.id: DOWN for server in fleet.servers()})
    assert gemma not in {entry["id"] for entry in alone["servers"]}
