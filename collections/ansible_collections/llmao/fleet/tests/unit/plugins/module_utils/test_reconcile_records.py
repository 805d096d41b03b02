"""The records reconcile's tasks hand each other: JSON only, a faithful round trip, strict."""

from __future__ import annotations

import json
from dataclasses import replace
from types import MappingProxyType

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import (
    Listed,
    Memory,
    Models,
    Probe,
    State,
)
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    ListedBox,
    index_listings,
)
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import Route
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import (
    Observations,
    RecordError,
    listings_from_record,
    listings_record,
    probe_from_record,
    probe_record,
    probes_from_record,
)
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import ServerMetrics

POD = ListedBox("runpod", ("abcd1234pod", "198.51.100.20"), "198.51.100.20",
                MappingProxyType({8001: 30001}))
VAST = ListedBox("vast", ("4242", "203.0.113.10"), "203.0.113.10", MappingProxyType({8001: 41001}),
                 price_per_hour=0.8, gpus=2)


def through_json(record):
    """What Ansible does to a record between tasks."""
    return json.loads(json.dumps(record))


def test_listings_round_trip_keeps_every_name_and_port():
    listings = index_listings(["vast", "runpod"], [VAST, POD], {})
    record = through_json(listings_record(listings))
    assert len(record["boxes"]) == 2  # the pod is indexed twice, written once
    back = listings_from_record(record)
    for name in ("abcd1234pod", "198.51.100.20", "203.0.113.10", "4242"):
        assert back.listed(name) is Listed.NAMED
    assert [box.price_per_hour for box in back.boxes] == [0.8, None]
    assert [box.gpus for box in back.boxes] == [2, None]  # the pod's listing did not say
    assert back.endpoint("abcd1234pod", 8001, None).port == 30001
    assert back.endpoint("203.0.113.10", 8001, None).base_url == "http://203.0.113.10:41001/v1"
    assert back.listed("192.0.2.1") is Listed.NOT_NAMED


def test_an_ambiguous_address_stays_ambiguous_and_both_instances_stay_listed():
    neighbour = ListedBox("vast", ("4343", "203.0.113.10"), "203.0.113.10",
                          MappingProxyType({8001: 41101}))
    back = listings_from_record(through_json(listings_record(
        index_listings(["vast"], [VAST, neighbour], {}))))
    assert back.ambiguity("203.0.113.10") and back.endpoint("203.0.113.10", 8001, None) is None
    assert back.endpoint("4343", 8001, None).port == 41101


def test_status_interruptibility_and_entry_problems_survive_the_trip():
    from ansible_collections.llmao.fleet.plugins.module_utils.listings import EntryProblem

    spot = ListedBox("runpod", ("spot1",), "", MappingProxyType({}), None, "exited", True)
    problems = [EntryProblem("runpod", "runpod: pods[2]", "runtime is not an object",
                             ("broken",)),
                EntryProblem("vast", "vast: instances[0]", "'x' is not a price per hour",
                             ("4242",), skipped=False)]
    listings = index_listings(["vast", "runpod"], [VAST, spot], {}, problems)
    back = listings_from_record(through_json(listings_record(listings)))
    assert back.listed("spot1") is Listed.PREEMPTED
    assert back.listed("broken") is Listed.UNKNOWN  # its entry could not be read
    assert back.listed("192.0.2.1") is Listed.NOT_NAMED
    assert back.warnings == listings.warnings and len(back.warnings) == 2
    assert [(box.status, box.interruptible) for box in back.boxes] == [("", False),
                                                                       ("exited", True)]


def test_a_garbage_price_is_a_record_error():
    record = through_json(listings_record(index_listings(["vast"], [VAST], {})))
    record["boxes"][0]["price_per_hour"] = "cheap"
    with pytest.raises(RecordError, match="price_per_hour"):
        listings_from_record(record)


@pytest.mark.parametrize("gpus", ["2", -1, 1.5, True])
def test_a_garbage_gpu_count_is_a_record_error(gpus):
    record = through_json(listings_record(index_listings(["vast"], [VAST], {})))
    record["boxes"][0]["gpus"] = gpus
    with pytest.raises(RecordError, match="gpus"):
        listings_from_record(record)


def test_a_failed_listing_survives_the_trip():
    listings = index_listings(["vast", "runpod"], [POD], {"vast": "HTTP 502 from https://x"})
    back = listings_from_record(through_json(listings_record(listings)))
    assert back.listed("203.0.113.10") is Listed.UNKNOWN
    assert dict(back.failed) == {"vast": "HTTP 502 from https://x"}


def test_no_provider_stays_local():
    back = listings_from_record(through_json(listings_record(index_listings([], [], {}))))
    assert back.listed("203.0.113.10") is Listed.NO_PROVIDERS
    assert back.endpoint("203.0.113.10", 8002, None).port == 8002


@pytest.mark.parametrize("probe", [Probe(True, Models.LISTS), Probe(False, Models.SKIPPED, "x"),
                                   Probe(True, Models.REJECTED, "HTTP 401 from /v1/models"),
                                   Probe(True, Models.LISTS, "", ServerMetrics(
                                       kv_cache_tokens=4096, requests_waiting=0,
                                       kv_cache_usage_ratio=0.5, scraped_at=1.5))])
def test_probe_round_trip(probe):
    assert probe_from_record(through_json(probe_record(probe))) == probe


@pytest.mark.parametrize("record", [None, {}, {"health_ok": "yes", "models": "lists"},
                                    {"health_ok": True, "models": "maybe"},
                                    {"health_ok": True, "models": "lists",
                                     "metrics": {"requests_waiting": "2"}}])
def test_a_bad_probe_is_refused(record):
    with pytest.raises(RecordError):
        probe_from_record(record)


def test_probes_keep_extra_fields_out():
    probes = probes_from_record({"a": {"health_ok": True, "models": "lists", "box": "b",
                                       "public": "127.0.0.1:1"}})
    assert probes == {"a": Probe(True, Models.LISTS)}


def observations():
    return Observations(
        now=1000.5, last_fetches={"203.0.113.10": 990.0, "box-b": None},
        applied={"203.0.113.10": "0123456789abcdef", "box-b": None},
        memories={"llmao:203.0.113.10:8001:gemma": Memory(State.HEALTHY, 1, 0, 900.0)},
        listings=index_listings(["vast"], [VAST], {}),
        routes=(Route("llmao:203.0.113.10:8001:gemma", "gemma", "http://203.0.113.10:41001/v1",
                      "http://203.0.113.10:41001/v1"),
                Route("hand-made", "gpt", "https://api.example/v1", None)),
        approved={"192.0.2.77": ("qwen", "gemma")},
        cards={"203.0.113.10": 2},
    )


def test_observations_round_trip():
    before = observations()
    after = Observations.from_record(through_json(before.record()))
    assert after.now == before.now
    assert dict(after.last_fetches) == dict(before.last_fetches)
    assert dict(after.applied) == dict(before.applied)
    assert dict(after.memories) == dict(before.memories)
    assert after.routes == before.routes
    assert after.listings.endpoint("203.0.113.10", 8001, None).port == 41001
    assert dict(after.approved) == {"192.0.2.77": ("qwen", "gemma")}
    assert dict(after.cards) == {"203.0.113.10": 2}


def test_observations_without_approvals_have_none():
    record = through_json(observations().record())
    del record["approved"]
    assert dict(Observations.from_record(record).approved) == {}


def test_pool_members_round_trip_and_a_record_without_them_has_none():
    member = {"chat-a1b2c3d4": "chat"}
    record = through_json(replace(observations(), pool_members=member).record())
    assert dict(Observations.from_record(record).pool_members) == member
    del record["pool_members"]  # as a fleet_observe of before pools wrote it
    assert dict(Observations.from_record(record).pool_members) == {}


@pytest.mark.parametrize("missing", ["listings", "routes", "now"])
def test_observations_missing_a_part_are_refused(missing):
    record = through_json(observations().record())
    del record[missing]
    with pytest.raises(RecordError, match=missing):
        Observations.from_record(record)


@pytest.mark.parametrize("damage", [
    {"routes": [{"model_name": "x"}]},
    {"listings": {"boxes": [{"names": ["a"], "ports": {"http": 1}}]}},
    {"listings": {"boxes": "none"}},
    {"memories": {"x": "Healthy"}},
    {"last_fetches": {"box": "yesterday"}},
    {"approved": ["192.0.2.77"]},
    {"approved": {"192.0.2.77": "qwen"}},
    {"approved": {"192.0.2.77": [1]}},
    {"pool_members": ["chat-a1b2c3d4"]},
    {"pool_members": {"chat-a1b2c3d4": None}},
])
def test_damaged_observations_are_refused(damage):
    record = {**through_json(observations().record()), **damage}
    with pytest.raises(RecordError):
        Observations.from_record(record)
