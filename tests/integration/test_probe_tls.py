"""Probes and scrapes under box TLS, against stub vLLMs serving HTTPS: the chain and the
address are verified, a certificate from another CA or for another address is rejected (not
ours), and only a box allowed to (not on TLS yet) is taken at its plain HTTP word."""

from __future__ import annotations

import time

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.box_tls import box_context
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Models
from ansible_collections.llmao.fleet.plugins.module_utils.listings import Endpoint
from ansible_collections.llmao.fleet.plugins.module_utils.probe import Target, probe_one
from tests.tls_files import make_test_ca

KEY = "sk-vllm-test-bearer-0123456789"


@pytest.fixture
def fleet_ca(tmp_path):
    return make_test_ca(tmp_path / "ca")


def tls_stub(local_stub_factory, ca, folder, *names):
    key, cert = ca.leaf(folder, *names)
    return local_stub_factory(served_name="m", model="org/weights", api_key=KEY,
                              args=["--ssl-keyfile", str(key), "--ssl-certfile", str(cert)])


def probe(host, port, ca, plain_allowed=False, previous=None):
    more = [str(previous.cert)] if previous else []
    target = Target("k", Endpoint(host, port, "given", "https"), "m", KEY,
                    box_context(str(ca.cert), *more), plain_allowed)
    return probe_one(target, 3.0, 10.0)


def test_a_box_with_the_fleet_cas_certificate_for_its_address_is_probed_and_scraped(
        local_stub_factory, fleet_ca, tmp_path):
    stub = tls_stub(local_stub_factory, fleet_ca, tmp_path / "box", "127.0.0.1")
    seen = probe("127.0.0.1", stub.port, fleet_ca)
    assert (seen.health_ok, seen.models, seen.plain_http) == (True, Models.LISTS, False)
    assert seen.metrics is not None and seen.metrics.kv_cache_tokens
    # the leaf lives 7 days: its expiry as served is kept for the dashboard and /metrics
    assert abs(seen.cert_not_after - (time.time() + 7 * 86400)) < 120


def test_the_second_connection_resumes_the_first_ones_session(local_stub_factory, fleet_ca,
                                                               tmp_path):
    # /health's connection verifies the box; /v1/models' resumes its session (no second
    # verification of the chain, no second signature by the box).
    stub = tls_stub(local_stub_factory, fleet_ca, tmp_path / "box", "127.0.0.1")
    seen = probe("127.0.0.1", stub.port, fleet_ca)
    assert seen.models is Models.LISTS and seen.metrics is not None
    assert stub.log().count("TLS session resumed") == 1, stub.log()


def test_another_ca_or_another_address_is_rejected(local_stub_factory, fleet_ca, tmp_path):
    other = make_test_ca(tmp_path / "other")
    foreign = tls_stub(local_stub_factory, other, tmp_path / "foreign", "127.0.0.1")
    seen = probe("127.0.0.1", foreign.port, fleet_ca)
    assert seen.models is Models.REJECTED and not seen.health_ok
    assert "fleet CA did not sign" in seen.detail
    elsewhere = tls_stub(local_stub_factory, fleet_ca, tmp_path / "elsewhere", "127.0.0.2")
    seen = probe("127.0.0.1", elsewhere.port, fleet_ca)
    assert seen.models is Models.REJECTED and "mismatch" in seen.detail


def test_plain_http_is_taken_only_from_a_box_not_on_tls_yet(local_stub_factory, fleet_ca):
    plain = local_stub_factory(served_name="m", model="org/weights", api_key=KEY)
    refused = probe("127.0.0.1", plain.port, fleet_ca)
    assert refused.models is Models.SKIPPED and not refused.plain_http
    allowed = probe("127.0.0.1", plain.port, fleet_ca, plain_allowed=True)
    assert (allowed.models, allowed.plain_http) == (Models.LISTS, True)


def test_while_the_ca_is_rotated_a_box_of_the_previous_ca_is_ours(local_stub_factory,
                                                                  fleet_ca, tmp_path):
    """box_tls.previous_ca_cert: a box not yet renewed from the new CA stays Healthy."""
    previous = make_test_ca(tmp_path / "previous")
    stub = tls_stub(local_stub_factory, previous, tmp_path / "old-box", "127.0.0.1")
    assert probe("127.0.0.1", stub.port, fleet_ca).models is Models.REJECTED
    seen = probe("127.0.0.1", stub.port, fleet_ca, previous=previous)
    assert (seen.health_ok, seen.models) == (True, Models.LISTS)
    renewed = tls_stub(local_stub_factory, fleet_ca, tmp_path / "new-box", "127.0.0.1")
    assert probe("127.0.0.1", renewed.port, fleet_ca, previous=previous).models is Models.LISTS
    stranger = tls_stub(local_stub_factory, make_test_ca(tmp_path / "stranger"),
                        tmp_path / "stranger-box", "127.0.0.1")
    assert probe("127.0.0.1", stranger.port, fleet_ca,
                 previous=previous).models is Models.REJECTED
