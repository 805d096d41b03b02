"""Provider listings: strict parsing, public addresses, and fakes of the providers' APIs."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import Provider
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Listed
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    ListingError,
    index_listings,
    parse_docker,
    parse_runpod,
    parse_vast,
    provider_of,
    read_listings,
)

VAST = {"instances": [
    {"id": 1, "public_ipaddr": "203.0.113.10\n", "actual_status": "running",
     "ports": {"8001/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41001"},
                            {"HostIp": "::", "HostPort": "41001"}],
               "8002/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41002"}],
               "22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41022"}]}},
    {"id": 2, "public_ipaddr": None, "actual_status": "loading", "ports": None},
]}
RUNPOD = [
    {"id": "abcd1234pod", "name": "abcd1234pod", "publicIp": "198.51.100.20",
     "portMappings": {"8001": 30001, "22": 30022}, "desiredStatus": "RUNNING"},
    {"id": "efgh5678pod", "publicIp": "", "portMappings": None},
]
DOCKER = [
    {"Config": {"Labels": {"llmao.box": "box-a"}},
     "NetworkSettings": {"Ports": {"8001/tcp": [{"HostIp": "127.0.0.1", "HostPort": "32768"}],
                                   "8002/tcp": None}}},
    {"Config": {"Labels": {"other": "x"}}, "NetworkSettings": {"Ports": {}}},
]


def test_vast():
    (box,) = parse_vast(VAST)
    assert box.names == ("203.0.113.10",)
    assert dict(box.ports) == {8001: 41001, 8002: 41002, 22: 41022}


def test_runpod_names_pod_id_and_address():
    first, second = parse_runpod(RUNPOD)
    assert first.names == ("abcd1234pod", "198.51.100.20")
    assert dict(first.ports) == {8001: 30001, 22: 30022}
    assert second.names == ("efgh5678pod",) and dict(second.ports) == {}


def test_docker():
    (box,) = parse_docker(DOCKER, "llmao.box")
    assert box.names == ("box-a",) and box.public_ip == "127.0.0.1"
    assert dict(box.ports) == {8001: 32768}


@pytest.mark.parametrize(("parser", "document"), [
    (parse_vast, {}), (parse_vast, []), (parse_vast, {"instances": "x"}),
    (parse_vast, {"instances": [{"public_ipaddr": "1.2.3.4", "ports": {"8001/tcp": "x"}}]}),
    (parse_runpod, {"pods": []}), (parse_runpod, [{"name": "no id"}]),
    (parse_runpod, [{"id": "p", "portMappings": {"8001": "not-a-port"}}]),
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


class ProviderFake(BaseHTTPRequestHandler):
    """Serves the documented shapes; the test sets what each path answers."""

    routes: dict = {}
    seen_keys: list = []

    def do_GET(self):  # noqa: N802 - http.server's naming
        self.seen_keys.append(self.headers.get("Authorization"))
        status, body = self.routes.get(self.path, (404, {"error": "no such path"}))
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def provider_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ProviderFake)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def providers(url):
    return {"vast": Provider("vast", api_key="vast-key", url=f"{url}/vast"),
            "runpod": Provider("runpod", api_key="runpod-key", url=f"{url}/runpod")}


def test_read_listings_against_fakes(provider_api):
    ProviderFake.routes = {"/vast/instances/": (200, VAST), "/runpod/pods": (200, RUNPOD)}
    ProviderFake.seen_keys = []
    listings = read_listings(providers(provider_api), timeout=5)
    assert not listings.failed
    assert listings.listed("203.0.113.10") is Listed.NAMED
    assert listings.listed("abcd1234pod") is Listed.NAMED
    assert sorted(ProviderFake.seen_keys) == ["Bearer runpod-key", "Bearer vast-key"]


@pytest.mark.parametrize("answer", [(500, {"error": "down"}), (200, b"<html>oops</html>"),
                                    (200, {"unexpected": True}), (401, {"error": "bad key"}),
                                    (401, {"error": "key vast-key is not valid"})])
def test_an_api_error_is_never_unlisted(provider_api, answer):
    ProviderFake.routes = {"/vast/instances/": answer, "/runpod/pods": (200, RUNPOD)}
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
