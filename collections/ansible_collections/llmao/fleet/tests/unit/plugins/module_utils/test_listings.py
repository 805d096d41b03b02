"""Provider listings: strict parsing, public addresses, and fakes of the providers' APIs."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import Provider
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Listed
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
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
from rig.provider_api import serve_provider_api

# Vast's instance list (docs.vast.ai OpenAPI, GET /api/v1/instances/): one page.
VAST = {"instances": [
    {"id": 1, "public_ipaddr": "203.0.113.10\n", "actual_status": "running", "dph_total": 0.8021,
     "ports": {"8001/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41001"},
                            {"HostIp": "::", "HostPort": "41001"}],
               "8002/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41002"}],
               "22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41022"}]}},
    {"id": 2, "public_ipaddr": None, "actual_status": "loading", "ports": None},
], "next_token": None}
# RunPod REST API v2 (docs.runpod.io api-reference-v2/openapi.json, GET /v2/pods).
RUNPOD = {"pods": [
    {"id": "abcd1234pod", "name": "abcd1234pod", "status": "RUNNING", "cost": 0.44,
     "runtime": {"uptime": 60, "ports": [
         {"private": 8001, "public": 30001, "type": "tcp", "ip": "198.51.100.20"},
         {"private": 22, "public": 30022, "type": "tcp", "ip": "198.51.100.20"},
         {"private": 8888, "public": None, "type": "http", "ip": None}]}},
    {"id": "efgh5678pod", "status": "EXITED", "cost": 0.0, "runtime": None},
]}
DOCKER = [
    {"Config": {"Labels": {"llmao.box": "box-a"}},
     "NetworkSettings": {"Ports": {"8001/tcp": [{"HostIp": "127.0.0.1", "HostPort": "32768"}],
                                   "8002/tcp": None}}},
    {"Config": {"Labels": {"other": "x"}}, "NetworkSettings": {"Ports": {}}},
]


def test_vast_names_instance_id_and_address():
    running, loading = parse_vast(VAST)
    assert running.names == ("1", "203.0.113.10")
    assert dict(running.ports) == {8001: 41001, 8002: 41002, 22: 41022}
    assert running.price_per_hour == pytest.approx(0.8021)
    assert loading.names == ("2",) and dict(loading.ports) == {}
    assert loading.price_per_hour is None


def test_runpod_v2_names_pod_id_and_address():
    first, second = parse_runpod(RUNPOD)
    assert first.names == ("abcd1234pod", "198.51.100.20")
    assert dict(first.ports) == {8001: 30001, 22: 30022}  # the http mapping is RunPod's proxy
    assert first.price_per_hour == pytest.approx(0.44)
    assert second.names == ("efgh5678pod",) and dict(second.ports) == {}
    assert second.public_ip == "" and second.price_per_hour == 0.0


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
    (parse_vast, {"instances": [{"id": 3, "public_ipaddr": "1.2.3.4",
                                 "ports": {"8001/tcp": "x"}}]}),
    (parse_vast, {"instances": [{"public_ipaddr": "1.2.3.4"}]}),  # no instance id
    (parse_vast, {"instances": [{"id": "3", "public_ipaddr": "1.2.3.4"}]}),
    (parse_vast, {"instances": [{"id": 3, "dph_total": "cheap"}]}),
    (parse_runpod, []), (parse_runpod, {"pods": "x"}),
    (parse_runpod, [{"id": "a v1 bare list"}]),
    (parse_runpod, {"pods": [{"name": "no id"}]}),
    (parse_runpod, _pod(runtime="x")), (parse_runpod, _pod(runtime={"ports": {"8001": 1}})),
    (parse_runpod, _pod_ports({"private": 8001, "public": "not-a-port", "type": "tcp"})),
    (parse_runpod, _pod_ports({"private": 8001, "public": 30001})),  # no type
    (parse_runpod, _pod_ports({"private": 8001, "public": 30001, "type": "tcp", "ip": "192.0.2.1"},
                              {"private": 8002, "public": 30002, "type": "tcp",
                               "ip": "192.0.2.2"})),
    (parse_runpod, _pod(cost=-1)), (parse_runpod, _pod(cost=True)),
    (lambda d: parse_docker(d, "llmao.box"), {"not": "a list"}),
])
def test_garbage_is_an_error_not_an_empty_listing(parser, document):
    with pytest.raises(ListingError):
        parser(document)


def test_public_addresses():
    listings = index_listings(["vast", "runpod"], parse_vast(VAST) + parse_runpod(RUNPOD), {})
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
    listings = index_listings(["vast"], parse_vast(SHARED), {})
    for order in (listings, index_listings(["vast"], reversed(parse_vast(SHARED)), {})):
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
    listings = index_listings(["runpod"], parse_runpod(RUNPOD), {})
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
    named = index_listings(["vast"], parse_vast(VAST), {})
    assert named.listed("203.0.113.10") is Listed.NAMED
    assert named.listed("192.0.2.9") is Listed.NOT_NAMED
    partial = index_listings(["vast", "runpod"], parse_vast(VAST), {"runpod": "HTTP 500"})
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


def test_read_listings_against_fakes(provider_api):
    provider_api.routes = {"/vast/instances/": (200, VAST), "/runpod/pods": (200, RUNPOD)}
    listings = read_listings(providers(provider_api), timeout=5)
    assert not listings.failed
    assert listings.listed("203.0.113.10") is Listed.NAMED
    assert listings.listed("abcd1234pod") is Listed.NAMED
    assert sorted(provider_api.seen) == [("/runpod/pods", "Bearer runpod-key"),
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
def test_an_api_error_is_never_unlisted(provider_api, answer):
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
