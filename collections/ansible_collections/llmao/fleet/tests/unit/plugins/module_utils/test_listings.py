"""Provider listings: strict parsing, public addresses, and fakes of the providers' APIs."""

from __future__ import annotations

import json
import time
import types

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils import listings as listings_module
from ansible_collections.llmao.fleet.plugins.module_utils.config_file import Provider
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.http_json import retry_after
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Listed
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    FETCHERS,
    RUNPOD_DEFAULT_URL,
    VAST_DEFAULT_URL,
    ListingError,
    index_listings,
    parse_docker,
    parse_runpod,
    parse_vast,
    provider_of,
    read_listings,
)
from ansible_collections.llmao.fleet.tests.unit.fleets import base_config, write_pair
from rig.provider_api import runpod_pod, serve_provider_api, vast_instance

# Vast's instance list (docs.vast.ai OpenAPI, GET /api/v1/instances/): one page.
VAST = {"instances": [
    {"id": 1, "public_ipaddr": "203.0.113.10\n", "actual_status": "running", "dph_total": 0.8021,
     "num_gpus": 2,
     "ports": {"8001/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41001"},
                            {"HostIp": "::", "HostPort": "41001"}],
               "8002/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41002"}],
               "22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41022"}]}},
    {"id": 2, "public_ipaddr": None, "actual_status": "loading", "ports": None},
], "next_token": None}
# RunPod REST API v2 (docs.runpod.io api-reference-v2/openapi.json, GET /v2/pods).
RUNPOD = {"pods": [
    {"id": "abcd1234pod", "name": "abcd1234pod", "desiredStatus": "RUNNING", "cost": 0.44,
     "gpuCount": 4,
     "runtime": {"uptime": 60, "ports": [
         {"private": 8001, "public": 30001, "type": "tcp", "ip": "198.51.100.20"},
         {"private": 22, "public": 30022, "type": "tcp", "ip": "198.51.100.20"},
         {"private": 8888, "public": None, "type": "http", "ip": None}]}},
    {"id": "efgh5678pod", "desiredStatus": "EXITED", "cost": 0.0, "runtime": None},
]}
DOCKER = [
    {"Config": {"Labels": {"llmao.box": "box-a"}},
     "NetworkSettings": {"Ports": {"8001/tcp": [{"HostIp": "127.0.0.1", "HostPort": "32768"}],
                                   "8002/tcp": None}}},
    {"Config": {"Labels": {"other": "x"}}, "NetworkSettings": {"Ports": {}}},
]


def boxes_of(parsed):
    """The instances a page gave, when every entry could be read."""
    boxes, problems = parsed
    assert not problems
    return boxes


def test_vast_names_instance_id_and_address():
    running, loading = boxes_of(parse_vast(VAST))
    assert running.names == ("1", "203.0.113.10")
    assert dict(running.ports) == {8001: 41001, 8002: 41002, 22: 41022}
    assert running.price_per_hour == pytest.approx(0.8021)
    assert loading.names == ("2",) and dict(loading.ports) == {}
    assert loading.price_per_hour is None
    assert (running.gpus, loading.gpus) == (2, None)  # an entry without num_gpus: unknown


def test_runpod_v2_names_pod_id_and_address():
    first, second = boxes_of(parse_runpod(RUNPOD))
    assert first.names == ("abcd1234pod", "198.51.100.20")
    assert dict(first.ports) == {8001: 30001, 22: 30022}  # the http mapping is RunPod's proxy
    assert first.price_per_hour == pytest.approx(0.44)
    assert second.names == ("efgh5678pod",) and dict(second.ports) == {}
    assert second.public_ip == "" and second.price_per_hour is None  # exited: not its cost
    assert (first.status, second.status) == ("running", "exited")
    assert (first.gpus, second.gpus) == (4, None)


def test_docker():
    (box,) = parse_docker(DOCKER, "llmao.box")
    assert box.names == ("box-a",) and box.public_ip == "127.0.0.1"
    assert dict(box.ports) == {8001: 32768}


def _pod(**fields):
    return {"pods": [{"id": "p", **fields}]}


def _pod_ports(*ports):
    return _pod(runtime={"ports": list(ports)})


@pytest.mark.parametrize(("parser", "document"), [
    (parse_vast, {}), (parse_vast, []), (parse_vast, {"instances": "x"}),
    (parse_runpod, []), (parse_runpod, {"pods": "x"}),
    (parse_runpod, [{"id": "a v1 bare list"}]),
    (lambda d: parse_docker(d, "llmao.box"), {"not": "a list"}),
])
def test_an_answer_of_another_shape_is_an_error_not_an_empty_listing(parser, document):
    with pytest.raises(ListingError):
        parser(document)


GOOD_VAST = {"id": 9, "public_ipaddr": "203.0.113.9", "actual_status": "running",
             "ports": {"8001/tcp": [{"HostIp": "0.0.0.0", "HostPort": "40009"}]}}
GOOD_POD = RUNPOD["pods"][0]


@pytest.mark.parametrize(("parser", "document", "names", "reason"), [
    (parse_vast, {"instances": [{"id": 3, "public_ipaddr": "1.2.3.4",
                                 "ports": {"8001/tcp": "x"}}, GOOD_VAST]},
     ("3", "1.2.3.4"), "ports['8001/tcp'] is not a list of bindings"),
    (parse_vast, {"instances": [{"public_ipaddr": "1.2.3.4"}, GOOD_VAST]}, ("1.2.3.4",),
     "has no instance id"),
    (parse_vast, {"instances": [{"id": "3", "public_ipaddr": "1.2.3.4"}, GOOD_VAST]},
     ("3", "1.2.3.4"), "has no instance id"),
    (parse_vast, {"instances": ["x", GOOD_VAST]}, (), "is not an object"),
    (parse_runpod, {"pods": [{"name": "no id"}, GOOD_POD]}, (), "has no id"),
    (parse_runpod, {"pods": [{"id": "p", "runtime": "x"}, GOOD_POD]}, ("p",),
     "runtime is not an object"),
    (parse_runpod, {"pods": [{"id": "p", "runtime": {"ports": {"8001": 1}}}, GOOD_POD]},
     ("p",), "runtime.ports is not a list"),
    (parse_runpod, {"pods": [{"id": "p", "runtime": {"ports": [
        {"private": 8001, "public": "not-a-port", "type": "tcp"}]}}, GOOD_POD]}, ("p",),
     "'not-a-port' is not a port"),
    (parse_runpod, {"pods": [{"id": "p", "runtime": {"ports": [
        {"private": 8001, "public": 30001}]}}, GOOD_POD]}, ("p",), "is not a port mapping"),
    (parse_runpod, {"pods": [{"id": "p", "runtime": {"ports": [
        {"private": 8001, "public": 30001, "type": "tcp", "ip": "192.0.2.1"},
        {"private": 8002, "public": 30002, "type": "tcp", "ip": "192.0.2.2"}]}}, GOOD_POD]},
     ("p",), "several addresses"),
])
def test_a_malformed_entry_costs_that_entry_only(parser, document, names, reason):
    boxes, (problem,) = parser(document)
    assert len(boxes) == 1 and boxes[0].names[0] in ("9", "abcd1234pod")
    assert problem.skipped and problem.names == names
    assert reason in problem.message and problem.message.endswith("the rest of the listing stands")
    assert problem.where in problem.message


@pytest.mark.parametrize("price", ["cheap", -1, True, float("nan"), float("inf"), [0.4]])
def test_a_bad_price_costs_only_the_price(price):
    boxes, (problem,) = parse_runpod({"pods": [{**GOOD_POD, "cost": price}]})
    (pod,) = boxes
    assert pod.names == ("abcd1234pod", "198.51.100.20") and dict(pod.ports)[8001] == 30001
    assert pod.price_per_hour is None
    assert not problem.skipped
    assert problem.message.startswith("runpod: pods[0] (runpod abcd1234pod): ")
    assert problem.message.endswith("is not a price per hour: its price is unknown")
    boxes, (problem,) = parse_vast({"instances": [{**GOOD_VAST, "dph_total": price}]})
    assert boxes[0].names == ("9", "203.0.113.9") and boxes[0].price_per_hour is None
    assert "vast: instances[0] (vast 9)" in problem.message


@pytest.mark.parametrize("count", ["2", -1, 65, 2.0, True, None, [2], 10**30])
def test_a_gpu_count_that_is_not_a_small_whole_number_is_unknown(count):
    """It costs nothing else: the entry stands, priced, with no warning."""
    boxes, problems = parse_vast({"instances": [vast_instance(9, "203.0.113.9", {8001: 40001},
                                                              0.5, gpus=count)]})
    pods, more = parse_runpod({"pods": [runpod_pod("p", "198.51.100.9", {8001: 30001},
                                                   gpus=count)]})
    assert not problems and not more
    assert [(box.gpus, box.names[0]) for box in boxes + pods] == [(None, "9"), (None, "p")]
    assert boxes[0].price_per_hour == 0.5


@pytest.mark.parametrize("count", [0, 1, 8, 64])
def test_the_listed_gpu_count_is_kept_and_found_by_any_name(count):
    boxes = parse_vast({"instances": [vast_instance(9, "203.0.113.9", {}, gpus=count)]})[0]
    pods = parse_runpod({"pods": [runpod_pod("p", "198.51.100.9", {8001: 30001},
                                             gpus=count)]})[0]
    listings = index_listings(["vast", "runpod"], boxes + pods, {})
    assert [listings.gpus(name) for name in ("9", "203.0.113.9", "p", "198.51.100.9")] == \
        [count] * 4
    assert listings.gpus("192.0.2.1") is None


def test_a_box_whose_entry_was_skipped_is_unknown_never_unlisted():
    boxes, problems = parse_runpod({"pods": [{"id": "p", "runtime": "x"}, GOOD_POD]})
    listings = index_listings(["runpod"], boxes, {}, problems)
    assert listings.listed("p") is Listed.UNKNOWN
    assert listings.listed("abcd1234pod") is Listed.NAMED
    assert listings.listed("192.0.2.9") is Listed.NOT_NAMED
    # An entry without even an id could be any box: an unnamed one is unknown too.
    boxes, problems = parse_runpod({"pods": [{"name": "no id"}, GOOD_POD]})
    listings = index_listings(["runpod"], boxes, {}, problems)
    assert listings.listed("192.0.2.9") is Listed.UNKNOWN
    assert listings.listed("abcd1234pod") is Listed.NAMED


def test_status_and_interruptibility():
    """A stopped instance is not priced at its running rate; a stopped interruptible one is
    preempted, a stopped on-demand one is only stopped."""
    vast, problems = parse_vast({"instances": [
        {**GOOD_VAST, "dph_total": 0.5, "is_bid": True},
        {**GOOD_VAST, "id": 10, "public_ipaddr": None, "actual_status": "exited",
         "dph_total": 0.5, "is_bid": True},
        {**GOOD_VAST, "id": 11, "public_ipaddr": None, "actual_status": "stopped",
         "dph_total": 0.5}]})
    pods, more = parse_runpod({"pods": [
        {**GOOD_POD, "interruptible": True},
        {"id": "spot", "desiredStatus": "EXITED", "interruptible": True, "cost": 0.3,
         "runtime": None},
        {"id": "ondemand", "desiredStatus": "TERMINATED", "cost": 0.3, "runtime": None}]})
    assert not problems and not more
    assert [box.price_per_hour for box in vast] == [0.5, None, None]
    assert [box.price_per_hour for box in pods] == [0.44, None, None]
    assert [(box.status, box.interruptible) for box in vast + pods] == [
        ("running", True), ("exited", True), ("stopped", False),
        ("running", True), ("exited", True), ("terminated", False)]
    listings = index_listings(["vast", "runpod"], vast + pods, {})
    assert [listings.listed(name) for name in ("9", "10", "11", "abcd1234pod", "spot",
                                               "ondemand")] == [
        Listed.NAMED, Listed.PREEMPTED, Listed.NAMED, Listed.NAMED, Listed.PREEMPTED,
        Listed.NAMED]


def test_public_addresses():
    listings = index_listings(["vast", "runpod"],
                              boxes_of(parse_vast(VAST)) + boxes_of(parse_runpod(RUNPOD)), {})
    assert listings.endpoint("203.0.113.10", 8001, None).base_url == "http://203.0.113.10:41001/v1"
    # A listing replaces the deprecated hand-written public port.
    assert listings.endpoint("203.0.113.10", 8002, 49999).port == 41002
    assert listings.endpoint("203.0.113.10", 8003, None) is None  # not published
    pod = listings.endpoint("abcd1234pod", 8001, None)
    assert (pod.host, pod.port) == ("198.51.100.20", 30001)
    assert listings.endpoint("efgh5678pod", 8001, None) is None  # no public IP yet
    assert listings.endpoint("192.0.2.9", 8001, 40001).port == 40001
    assert listings.endpoint("2001:db8::1", 8001, None).base_url == "http://[2001:db8::1]:8001/v1"
    assert provider_of(listings.configured, listings.named_by("abcd1234pod")) == "runpod"
    assert provider_of(listings.configured, listings.named_by("192.0.2.9")) == "unlisted"
    vast = listings.endpoint("1", 8001, None)  # a fleet.hosts key may be the instance id
    assert (vast.host, vast.port, vast.source) == ("203.0.113.10", 41001, "listing:vast")
    assert listings.listed("2") is Listed.NAMED  # loading: listed, nothing to dial yet
    assert listings.endpoint("2", 8001, None) is None


def _vast_instance(instance_id, address, port):
    return {"id": instance_id, "public_ipaddr": address,
            "ports": {"8001/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(port)}]}}


SHARED = {"instances": [_vast_instance(11, "203.0.113.50", 40011),
                        _vast_instance(12, "203.0.113.50", 40012),
                        _vast_instance(13, "203.0.113.60", 40013)]}


def test_an_address_two_instances_share_is_ambiguous_never_resolved_by_order():
    listings = index_listings(["vast"], boxes_of(parse_vast(SHARED)), {})
    for order in (listings, index_listings(["vast"], reversed(boxes_of(parse_vast(SHARED))), {})):
        assert order.endpoint("203.0.113.50", 8001, None) is None
        assert order.listed("203.0.113.50") is Listed.UNKNOWN  # never Unlisted, never Foreign
    assert "vast 11, vast 12 share this address" in listings.ambiguity("203.0.113.50")
    assert listings.ambiguity("203.0.113.60") is None and listings.ambiguity("11") is None
    assert listings.named_by("203.0.113.50") == "vast"  # ambiguous, but not unlisted
    # Neither instance is dropped: each is named by its id.
    assert listings.endpoint("11", 8001, None).port == 40011
    assert listings.endpoint("12", 8001, None).port == 40012
    assert [box.names[0] for box in listings.boxes] == ["11", "12", "13"]


def test_runpod_only_is_not_local():
    """A fleet whose only provider is RunPod reads RunPod's listing (the seed's wart, fixed)."""
    listings = index_listings(["runpod"], boxes_of(parse_runpod(RUNPOD)), {})
    assert listings.listed("abcd1234pod") is Listed.NAMED
    assert listings.listed("192.0.2.9") is Listed.NOT_NAMED
    assert provider_of(listings.configured, listings.named_by("192.0.2.9")) == "unlisted"
    assert listings.endpoint("192.0.2.9", 8001, None).source == "not listed: listen port"


def test_local_fleet_dials_listen_ports():
    listings = index_listings([], [], {})
    endpoint = listings.endpoint("127.0.0.1", 8002, None)
    assert (endpoint.host, endpoint.port) == ("127.0.0.1", 8002)
    assert listings.listed("127.0.0.1") is Listed.NO_PROVIDERS
    assert provider_of(listings.configured, listings.named_by("127.0.0.1")) == "local"


def test_listed_states():
    named = index_listings(["vast"], boxes_of(parse_vast(VAST)), {})
    assert named.listed("203.0.113.10") is Listed.NAMED
    assert named.listed("192.0.2.9") is Listed.NOT_NAMED
    partial = index_listings(["vast", "runpod"], boxes_of(parse_vast(VAST)), {"runpod": "HTTP 500"})
    assert partial.listed("203.0.113.10") is Listed.NAMED
    assert partial.listed("192.0.2.9") is Listed.UNKNOWN


@pytest.fixture
def provider_api():
    with serve_provider_api() as api:
        yield api


def providers(api):
    """Both providers, each with a base URL on the fake (what ``url`` in config.yaml sets)."""
    return {"vast": Provider("vast", api_key="vast-key", url=f"{api.url}/vast"),
            "runpod": Provider("runpod", api_key="runpod-key", url=f"{api.url}/runpod")}


def test_every_provider_config_yaml_can_name_has_its_reader(tmp_path):
    config = base_config()
    config["providers"] = {"vast": {"api_key": "Vk3-9qzL-r7Tw"}, "runpod": {"api_key": "Rp8x2Mv5"},
                           "docker": {"label": "llmao.test"}}
    fleet = load_fleet(*write_pair(tmp_path, config=config))
    assert set(fleet.settings.providers) == set(FETCHERS)


def test_read_listings_against_fakes(provider_api):
    provider_api.routes = {"/vast/instances/": (200, VAST), "/runpod/pods": (200, RUNPOD)}
    listings = read_listings(providers(provider_api), timeout=5)
    assert not listings.failed
    assert listings.listed("203.0.113.10") is Listed.NAMED
    assert listings.listed("abcd1234pod") is Listed.NAMED
    assert (listings.gpus("203.0.113.10"), listings.gpus("abcd1234pod")) == (2, 4)
    assert sorted(provider_api.seen) == [("/runpod/pods?includeClusterPods=true",
                                          "Bearer runpod-key"),
                                         ("/vast/instances/", "Bearer vast-key")]


def test_the_default_urls_are_the_documented_apis():
    assert RUNPOD_DEFAULT_URL == "https://api.runpod.io/v2"  # REST v1 was retired 2026-11-15
    assert VAST_DEFAULT_URL == "https://console.vast.ai/api/v1"


def test_vast_pages_are_followed_by_next_token(provider_api):
    first = {"instances": SHARED["instances"][:2], "next_token": "page/2=="}
    second = {"instances": SHARED["instances"][2:], "next_token": None}
    provider_api.routes = {"/vast/instances/": (200, first),
                           "/vast/instances/?after_token=page%2F2%3D%3D": (200, second)}
    listings = read_listings({"vast": providers(provider_api)["vast"]}, timeout=5)
    assert not listings.failed
    assert [box.names[0] for box in listings.boxes] == ["11", "12", "13"]


def test_a_vast_page_loop_is_an_error(provider_api):
    looping = {"instances": [], "next_token": "again"}
    provider_api.routes = {"/vast/instances/": (200, looping),
                           "/vast/instances/?after_token=again": (200, looping)}
    listings = read_listings({"vast": providers(provider_api)["vast"]}, timeout=5)
    assert "repeats a page" in listings.failed["vast"]


@pytest.mark.parametrize("answer", [(500, {"error": "down"}), (200, b"<html>oops</html>"),
                                    (200, {"unexpected": True}), (401, {"error": "bad key"}),
                                    (401, {"error": "key vast-key is not valid"})])
def test_an_api_error_is_never_unlisted(provider_api, answer, monkeypatch):
    monkeypatch.setattr(listings_module, "LISTING_BACKOFF_S", 0.01)
    provider_api.routes = {"/vast/instances/": answer, "/runpod/pods": (200, RUNPOD)}
    listings = read_listings(providers(provider_api), timeout=5)
    assert "vast" in listings.failed
    assert "vast-key" not in listings.failed["vast"], "not even when the provider echoes it"
    assert listings.listed("203.0.113.10") is Listed.UNKNOWN
    assert listings.listed("abcd1234pod") is Listed.NAMED


def test_unreachable_provider_is_a_failure():
    unreachable = {"vast": Provider("vast", api_key="k", url="http://127.0.0.1:9")}
    listings = read_listings(unreachable, timeout=2)
    assert listings.listed("203.0.113.10") is Listed.UNKNOWN


def _inspect_answer(returncode, stdout, stderr):
    import subprocess
    return subprocess.CompletedProcess(["docker", "inspect"], returncode, stdout, stderr)


def test_a_container_gone_between_ps_and_inspect_is_skipped():
    from ansible_collections.llmao.fleet.plugins.module_utils.listings import _inspected_containers

    answer = _inspect_answer(1, json.dumps(DOCKER), "Error: No such object: 0123abcd\n")
    (box,) = parse_docker(_inspected_containers(answer), "llmao.box")
    assert box.names == ("box-a",)


def test_another_inspect_failure_is_an_error():
    from ansible_collections.llmao.fleet.plugins.module_utils.listings import _inspected_containers

    with pytest.raises(ListingError, match="inspect failed"):
        _inspected_containers(_inspect_answer(1, "", "Cannot connect to the Docker daemon\n"))


def test_throttling_is_retried_as_the_provider_asks(provider_api):
    """429 with Retry-After, then with RunPod's RateLimit fields, then a 503: one read."""
    provider_api.routes = {"/runpod/pods": (200, RUNPOD)}
    provider_api.throttle("/runpod/pods", 1, headers={"Retry-After": "0"})
    provider_api.throttle("/runpod/pods", 1, headers={
        "RateLimit-Policy": '"minute";q=100;w=60, "hour";q=1000;w=3600',
        "RateLimit": '"minute";r=0;t=1, "hour";r=900;t=1800'})
    provider_api.throttle("/runpod/pods", 1, status=503, headers={"Retry-After": "0"})
    listings = read_listings({"runpod": providers(provider_api)["runpod"]}, timeout=5)
    assert not listings.failed
    assert listings.listed("abcd1234pod") is Listed.NAMED
    assert provider_api.requests_to("/runpod/pods?includeClusterPods=true") == 4


def test_throttling_past_the_attempts_fails_the_listing_naming_them(provider_api):
    provider_api.routes = {"/vast/instances/": (200, VAST)}
    provider_api.throttle("/vast/instances/", listings_module.LISTING_ATTEMPTS,
                          headers={"Retry-After": "0"})
    listings = read_listings({"vast": providers(provider_api)["vast"]}, timeout=5)
    assert "HTTP 429" in listings.failed["vast"]
    assert f"after {listings_module.LISTING_ATTEMPTS} attempts" in listings.failed["vast"]
    assert listings.listed("203.0.113.10") is Listed.UNKNOWN


def test_a_wait_past_the_budget_is_not_waited(provider_api):
    """A provider asking for an hour gets the error at once: a pass never hangs on it."""
    provider_api.routes = {"/runpod/pods": (200, RUNPOD)}
    provider_api.throttle("/runpod/pods", 1, headers={"RateLimit": '"day";r=0;t=3600'})
    listings = read_listings({"runpod": providers(provider_api)["runpod"]}, timeout=5)
    assert "asked to wait 3600 s more" in listings.failed["runpod"]
    assert provider_api.requests_to("/runpod/pods?includeClusterPods=true") == 1


def test_a_listing_read_stops_at_its_deadline(provider_api, monkeypatch):
    """Every page of Vast answers, but slowly: the read stops past its one deadline (the
    retry budget plus four calls' timeouts), its boxes unknown, never unlisted."""
    ticks = iter(range(0, 10_000, 11))  # each look at the clock: 11 s later
    monkeypatch.setattr(listings_module, "time", types.SimpleNamespace(
        monotonic=lambda: float(next(ticks)), sleep=time.sleep))
    pages = {f"/vast/instances/?after_token=p{page}": (
        200, {"instances": [], "next_token": f"p{page + 1}"}) for page in range(1, 20)}
    provider_api.routes = {**pages, "/vast/instances/": (
        200, {"instances": [], "next_token": "p1"})}
    listings = read_listings({"vast": providers(provider_api)["vast"]}, timeout=5)
    allowed = listings_module.LISTING_RETRY_BUDGET_S + listings_module.LISTING_ATTEMPTS * 5
    assert listings.failed["vast"] == f"the listing read took more than {allowed:.0f} s"
    assert len(provider_api.seen) == allowed // 11
    assert listings.listed("203.0.113.10") is Listed.UNKNOWN


def test_a_client_error_is_not_retried(provider_api):
    provider_api.routes = {"/runpod/pods": (403, {"title": "Forbidden", "status": 403})}
    listings = read_listings({"runpod": providers(provider_api)["runpod"]}, timeout=5)
    assert "HTTP 403" in listings.failed["runpod"]
    assert provider_api.requests_to("/runpod/pods?includeClusterPods=true") == 1


def test_pods_of_instant_clusters_are_listed(provider_api):
    pods = {"pods": [runpod_pod("single", "198.51.100.20", {8001: 30001}),
                     runpod_pod("clustered", "198.51.100.21", {8001: 30002}, cluster="c1")]}
    provider_api.answer("/runpod/pods", pods)
    listings = read_listings({"runpod": providers(provider_api)["runpod"]}, timeout=5)
    assert listings.listed("clustered") is Listed.NAMED
    assert listings.endpoint("clustered", 8001, None).port == 30002


@pytest.mark.parametrize(("headers", "seconds"), [
    ({}, None), ({"Retry-After": "7"}, 7.0), ({"Retry-After": "soon"}, None),
    ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date past: at once
    ({"RateLimit": '"minute";r=0;t=30, "hour";r=0;t=90, "day";r=5;t=9000'}, 90.0),
    ({"RateLimit": '"minute";r=3;t=30'}, None),
    ({"RateLimit-Reset": "12"}, 12.0),
    ({"Retry-After": "2", "RateLimit": '"minute";r=0;t=30'}, 2.0),
    ({"Retry-After": "9" * 40}, None),
    # Not ASCII digits, negative, a date past any calendar, garbage: unknown, never an error
    # (one odd answer must not fail the provider's listing).
    ({"Retry-After": "²"}, None), ({"Retry-After": "١٢"}, None), ({"Retry-After": "-5"}, None),
    ({"Retry-After": "Mon, 01 Jan 99999999 00:00:00 GMT"}, None),
    ({"Retry-After": "1 2 3 4 5"}, None), ({"Retry-After": "\x00\uffff"}, None),
    ({"RateLimit": '"minute";r=0;t=١٢'}, None), ({"RateLimit": '"minute";r=0;t=-3'}, None),
    ({"RateLimit": '"minute";r=0;t=' + "9" * 40}, None),
    ({"RateLimit-Reset": "²"}, None), ({"RateLimit-Reset": "١٢"}, None),
    ({"RateLimit-Reset": "-1"}, None), ({"RateLimit-Reset": "1e999"}, None),
])
def test_retry_after(headers, seconds):
    assert retry_after(headers) == seconds
