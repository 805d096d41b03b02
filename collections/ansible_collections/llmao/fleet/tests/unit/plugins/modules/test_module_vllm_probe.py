"""The vllm_probe module's logic against real stub vLLM processes on loopback addresses."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import FILES_CHANGED
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    index_listings,
    parse_vast,
)
from ansible_collections.llmao.fleet.plugins.module_utils.pool_config import (
    box_name,
    instance_label,
)
from ansible_collections.llmao.fleet.plugins.modules import vllm_probe
from ansible_collections.llmao.fleet.plugins.modules.vllm_probe import (
    probe_counts,
    probe_fleet,
    unknown_boxes,
)
from ansible_collections.llmao.fleet.tests.unit.compat import patch_module_args
from ansible_collections.llmao.fleet.tests.unit.fleets import pooled, write_pair
from rig.boxes import start_local_stub
from rig.local_fleet import LocalFleet, loopback_boxes, one_model_hosts, start_stubs, stop_stubs
from rig.provider_api import vast_instance

LOCAL = index_listings([], [], {})


@pytest.fixture(scope="module")
def probed_fleet(tmp_path_factory):
    """Four boxes: serving (two servers), rejecting our bearer, /health failing, and nothing."""
    serving, rejecting, sick, silent = loopback_boxes(4)
    hosts = {**one_model_hosts([serving], 2), **one_model_hosts([rejecting, sick, silent])}
    local = LocalFleet(tmp_path_factory.mktemp("probe"), hosts)
    fleet = local.write()
    running = (serving, rejecting, sick)
    only_running = LocalFleet(local.folder / "running", {box: hosts[box] for box in running},
                              salt=local.salt)
    stubs = start_stubs(only_running.write(), {sick: {"*": {"fail": "health_500"}}},
                        keys={rejecting: "sk-vllm-someone-else"})
    yield fleet, (serving, rejecting, sick, silent)
    stop_stubs(stubs)


def by_box(probes):
    return {(p["box"], p["listen_port"]): p for p in probes.values()}


def test_every_outcome_in_one_call(probed_fleet):
    fleet, (serving, rejecting, sick, silent) = probed_fleet
    probes = probe_fleet(fleet, LOCAL, None, connect_timeout=2, timeout=5)
    seen = by_box(probes)
    assert len(probes) == 5
    assert seen[(serving, 8001)]["models"] == seen[(serving, 8002)]["models"] == "lists"
    assert seen[(serving, 8001)]["health_ok"] is True
    assert seen[(serving, 8001)]["public"] == f"{serving}:8001"
    assert seen[(rejecting, 8001)]["models"] == "rejected"
    assert (seen[(sick, 8001)]["health_ok"], seen[(sick, 8001)]["models"]) == (False, "lists")
    assert seen[(silent, 8001)] | {"public": None} == {
        "box": silent, "name": "stub-model-8001", "listen_port": 8001, "public": None,
        "health_ok": False, "models": "skipped", "detail": "connection refused",
        "metrics": None, "latency": None}
    assert seen[(serving, 8001)]["metrics"]["kv_cache_tokens"] == 65536
    # The stub exports vLLM's latency histograms: read, for the next pass's deltas.
    assert set(seen[(serving, 8001)]["latency"]["histograms"]) == {"ttft", "e2e", "itl"}
    assert seen[(rejecting, 8001)]["metrics"] is None
    assert probe_counts(probes) == {"servers": 5, "lists": 3, "rejected": 1, "skipped": 1}
    text = json.dumps(probes)
    assert all(server.api_key not in text for server in fleet.servers())


def test_a_box_filter_probes_only_those(probed_fleet):
    fleet, (serving, _rejecting, _sick, silent) = probed_fleet
    probes = probe_fleet(fleet, LOCAL, [silent, f" {serving}"], connect_timeout=2, timeout=5)
    assert {p["box"] for p in probes.values()} == {serving, silent}
    assert unknown_boxes(fleet, [serving, "192.0.2.99"]) == ["192.0.2.99"]


def run_module(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit):
        vllm_probe.main()
    return json.loads(capsys.readouterr().out)


def test_files_saved_since_the_pass_observed_are_not_probed_from(probed_fleet, capsys):
    fleet, (serving, *_others) = probed_fleet
    files = {"config": fleet.config_path, "models": fleet.models_path, "timeout": 2.0}
    saved = run_module(capsys, **files, files_digest="0" * 16)
    assert (saved["files_changed"], saved["probes"]) == (True, {})
    assert saved["msg"] == FILES_CHANGED
    same = run_module(capsys, **files, files_digest=fleet.files_digest, boxes=[serving])
    assert same["files_changed"] is False and same["counts"]["lists"] == 2


def test_an_ipv6_box_is_reported_with_its_brackets(tmp_path):
    """The address a probe reports is ``Endpoint.address``'s: ``[v6]:port``, never a bare
    ``::1:8001`` that no URL or Prometheus target could read back."""
    fleet = LocalFleet(tmp_path, one_model_hosts(["::1"])).write()
    probes = probe_fleet(fleet, LOCAL, None, connect_timeout=1, timeout=1)
    assert [probe["public"] for probe in probes.values()] == ["[::1]:8001"]


def test_a_pool_member_is_probed_at_the_address_its_instances_listing_gives(tmp_path):
    """The member's name is no address: only the listing (by llmao's label) says where it
    answers, and its bearer is derived for its name as any box's."""
    (address,) = loopback_boxes(1)
    fleet = load_fleet(*write_pair(tmp_path, pooled(serve=[["gemma", 8001]])))
    member = box_name("chat", "a1b2c3d4")
    joined = fleet.with_pool_members({member: "chat"})
    (server,) = joined.assignment(member).servers
    stub = start_local_stub(0, served_name=server.served_model_name, model="google/gemma",
                            api_key=server.api_key, box_name=member, host=address)
    try:
        listed = parse_vast({"instances": [
            {**vast_instance(4242, address, {8001: stub.port}, 0.4),
             "label": instance_label("chat", member)}]})[0]
        probes = probe_fleet(joined, index_listings(["vast"], listed, {}), [member],
                             connect_timeout=2, timeout=5)
    finally:
        stub.stop()
    assert probes[server.id] | {"metrics": None, "latency": None} == {
        "box": member, "name": "gemma", "listen_port": 8001, "public": f"{address}:{stub.port}",
        "health_ok": True, "models": "lists", "detail": "", "metrics": None, "latency": None}
