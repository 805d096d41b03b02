"""Probing real stub vLLM processes on loopback: serving, rejected, down, wrong model."""

from __future__ import annotations

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Models
from ansible_collections.llmao.fleet.plugins.module_utils.listings import Endpoint
from ansible_collections.llmao.fleet.plugins.module_utils.probe import Target, probe_many
from rig.boxes import free_port, start_local_stub

KEY = "sk-vllm-probe-test-key"


@pytest.fixture(scope="module")
def stubs():
    started = {
        "serving": start_local_stub(0, served_name="m", model="org/m", api_key=KEY),
        "reject": start_local_stub(0, served_name="m", model="org/m", api_key=KEY,
                                   behaviour={"*": {"fail": "reject"}}),
        "sick": start_local_stub(0, served_name="m", model="org/m", api_key=KEY,
                                 behaviour={"*": {"fail": "health_500"}}),
    }
    yield started
    for stub in started.values():
        stub.stop()


def target(key, port, served="m", api_key=KEY):
    return Target(key, Endpoint("127.0.0.1", port, "test"), served, api_key)


def test_outcomes(stubs):
    closed = free_port()
    probes = probe_many([
        target("serving", stubs["serving"].port),
        target("wrong-key", stubs["serving"].port, api_key="sk-vllm-not-ours"),
        target("other-model", stubs["serving"].port, served="not-m"),
        target("reject", stubs["reject"].port),
        target("sick", stubs["sick"].port),
        target("closed", closed),
        Target("nowhere", None, "m", KEY),
    ], connect_timeout=2, timeout=5)
    assert (probes["serving"].health_ok, probes["serving"].models) == (True, Models.LISTS)
    assert probes["wrong-key"].models is Models.REJECTED
    assert probes["other-model"].models is Models.OTHER
    assert probes["reject"].models is Models.REJECTED
    assert probes["sick"].health_ok is False
    assert probes["closed"].models is Models.SKIPPED
    assert probes["closed"].detail == "connection refused"
    assert probes["nowhere"].detail == "no public address known"
    assert all(KEY not in p.detail for p in probes.values())


def test_empty():
    assert probe_many([], 1, 1) == {}
