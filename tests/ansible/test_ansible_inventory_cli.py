"""``ansible-inventory`` on the example fleet: groups, hostvars, no secret, clear failures.

And with ``listings: true``, against a fake of the Vast and RunPod listing APIs: where to
SSH to each box, groups by provider, a failed listing failing the source, the cache.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from rig.provider_api import runpod_pod, serve_provider_api, vast_instance

SOURCE = "inventories/example/fleet.yml"
BOXES = {"203.0.113.10", "203.0.113.11", "198.51.100.7"}


@pytest.fixture(scope="module")
def listed(ansible) -> dict[str, Any]:
    """``--list`` once for the module (each run costs a second or two)."""
    done = ansible("ansible-inventory", "-i", SOURCE, "--list")
    assert done.returncode == 0, done.stderr
    return {"text": done.stdout + done.stderr, "data": json.loads(done.stdout)}


def test_list_is_plain_data(listed: dict[str, Any]) -> None:
    """ansible-core 2.19 wraps untrusted plugin strings; the plugin's are trusted."""
    assert "__ansible_unsafe" not in listed["text"]


def test_list_has_the_groups(listed: dict[str, Any]) -> None:
    data = listed["data"]
    assert set(data["llmao_boxes"]["hosts"]) == BOXES
    assert set(data["llmao_model_gemma4_26b"]["hosts"]) == {"203.0.113.10", "198.51.100.7"}
    assert set(data["llmao_model_qwen3_8b"]["hosts"]) == {"203.0.113.10", "203.0.113.11"}
    assert set(data["llmao_provider_local"]["hosts"]) == BOXES


def test_list_has_the_hostvars(listed: dict[str, Any], example_fleet: Fleet) -> None:
    hostvars = listed["data"]["_meta"]["hostvars"]
    assert set(hostvars) == BOXES
    for box in BOXES:
        assignment = example_fleet.assignment(box)
        facts = hostvars[box]
        assert facts["llmao_box"] == facts["ansible_host"] == box
        assert facts["llmao_revision"] == assignment.revision
        assert facts["llmao_provider"] == "local"
        assert facts["llmao_servers"] == [server.public_view() for server in assignment.servers]
        assert facts["llmao_public_ports"] == {
            str(server.listen_port): server.listen_port for server in assignment.servers}
        assert facts["llmao_config_file"] == example_fleet.config_path


def test_list_holds_no_secret(listed: dict[str, Any], assert_no_secret) -> None:
    assert_no_secret(listed["text"])


def test_graph_shows_boxes_by_group_without_secret(ansible, assert_no_secret) -> None:
    done = ansible("ansible-inventory", "-i", SOURCE, "--graph")
    assert done.returncode == 0, done.stderr
    lines = [line.strip(" |-") for line in done.stdout.splitlines()]
    for group in ("@llmao_boxes:", "@llmao_model_gemma4_26b:", "@llmao_model_qwen3_8b:",
                  "@llmao_provider_local:"):
        assert group in lines
    assert set(lines) >= BOXES
    assert_no_secret(done.stdout + done.stderr)


def test_host_shows_one_box_without_secret(ansible, example_fleet, assert_no_secret) -> None:
    done = ansible("ansible-inventory", "-i", SOURCE, "--host", "203.0.113.11")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert [server["name"] for server in facts["llmao_servers"]] == ["qwen3-8b", "qwen3-8b-b"]
    assert facts["llmao_revision"] == example_fleet.assignment("203.0.113.11").revision
    assert_no_secret(done.stdout + done.stderr)


@pytest.fixture
def broken_fleet(tmp_path: Path) -> Path:
    """A copy of the example with two problems in config.yaml; returns its source file."""
    root = Path(__file__).resolve().parents[2] / "inventories" / "example"
    for name in ("config.yaml", "models.yaml", "fleet.yml"):
        shutil.copy(root / name, tmp_path / name)
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    config["fleet"]["hosts"]["203.0.113.10"][1][1] = 8001
    config["fleet"]["hosts"]["203.0.113.11"].append(["no-such-model", 8003])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path / "fleet.yml"


def test_bad_config_fails_with_the_loaders_message(ansible, broken_fleet: Path,
                                                   assert_no_secret) -> None:
    done = ansible("ansible-inventory", "-i", str(broken_fleet), "--list")
    config = broken_fleet.parent / "config.yaml"
    assert done.returncode != 0
    assert f"{config}: fleet.hosts.203.0.113.10[1]: duplicate port 8001" in done.stderr
    assert (f"{config}: fleet.hosts.203.0.113.11[2]: model 'no-such-model' is not in "
            "models.yaml") in done.stderr
    assert "Completely failed to parse inventory source" in done.stderr
    assert_no_secret(done.stdout + done.stderr)


VAST_KEY, RUNPOD_KEY = "cli-vast-api-key-5e5e", "cli-runpod-api-key-6f6f"
VAST_PAGE = {"instances": [
    vast_instance(1001, "203.0.113.10", {22: 41022, 8001: 41001, 8002: 41002}, price=0.8),
    vast_instance(2001, "203.0.113.11", {22: 43022, 8001: 43001}),
    vast_instance(2002, "203.0.113.11", {22: 44022, 8001: 44001}),
    vast_instance(4242, "203.0.113.99", {22: 42022, 8001: 42001}),
], "next_token": None}
PODS = {"pods": [runpod_pod("podxyz1", "198.51.100.20", {22: 30022, 8001: 30001}, cost=0.44)]}
CACHE = "cache: true\ncache_plugin: ansible.builtin.jsonfile\ncache_connection: {}\n"


@pytest.fixture
def provider_api() -> Any:
    with serve_provider_api() as api:
        api.answer("/vast/instances/", VAST_PAGE)
        api.answer("/runpod/pods", PODS)
        yield api


def listed_fleet(folder: Path, api: Any, options: str = "") -> Path:
    """The example fleet with Vast and RunPod configured on the fake, one box keyed by a Vast
    instance id and one by a pod id; returns its source file (``listings: true``)."""
    root = Path(__file__).resolve().parents[2] / "inventories" / "example"
    shutil.copy(root / "models.yaml", folder / "models.yaml")
    config = yaml.safe_load((root / "config.yaml").read_text())
    config["providers"] = {"vast": {"api_key": VAST_KEY, "url": f"{api.url}/vast"},
                           "runpod": {"api_key": RUNPOD_KEY, "url": f"{api.url}/runpod"}}
    config["fleet"]["hosts"]["4242"] = [["qwen3-8b", 8001]]
    config["fleet"]["hosts"]["podxyz1"] = [["gemma4-26b", 8001]]
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    source = folder / "fleet.yml"
    source.write_text("plugin: llmao.fleet.fleet\nconfig: config.yaml\nmodels: models.yaml\n"
                      f"listings: true\n{options}")
    return source


def hostvars_of(done: Any) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["_meta"]["hostvars"]


def test_listings_say_where_to_ssh_to_each_box(ansible, provider_api, tmp_path: Path,
                                               assert_no_secret) -> None:
    done = ansible("ansible-inventory", "-i", str(listed_fleet(tmp_path, provider_api)),
                   "--list")
    hostvars = hostvars_of(done)
    reach = {box: (facts.get("ansible_host"), facts.get("ansible_port"), facts["llmao_provider"])
             for box, facts in hostvars.items()}
    assert reach == {
        "203.0.113.10": ("203.0.113.10", 41022, "vast"),
        "4242": ("203.0.113.99", 42022, "vast"),
        "podxyz1": ("198.51.100.20", 30022, "runpod"),
        "203.0.113.11": ("203.0.113.11", None, "vast"),  # ambiguous: no port guessed
        "198.51.100.7": ("198.51.100.7", None, "unlisted"),
    }
    assert hostvars["203.0.113.10"]["llmao_public_ports"] == {"8001": 41001, "8002": 41002}
    assert hostvars["203.0.113.10"]["llmao_price_per_hour"] == 0.8
    assert "vast 2001, vast 2002 share this address" in hostvars["203.0.113.11"][
        "llmao_ambiguous"]
    assert "203.0.113.11 is ambiguous" in done.stderr
    groups = json.loads(done.stdout)
    assert set(groups["llmao_provider_vast"]["hosts"]) == {"203.0.113.10", "4242",
                                                           "203.0.113.11"}
    assert groups["llmao_provider_runpod"]["hosts"] == ["podxyz1"]
    assert "__ansible_unsafe" not in done.stdout
    assert (hostvars["podxyz1"]["llmao_provider_status"],
            hostvars["podxyz1"]["llmao_interruptible"]) == ("running", False)
    assert sorted(provider_api.seen) == [("/runpod/pods?includeClusterPods=true",
                                          f"Bearer {RUNPOD_KEY}"),
                                         ("/vast/instances/", f"Bearer {VAST_KEY}")]
    assert VAST_KEY not in done.stdout + done.stderr and RUNPOD_KEY not in done.stdout
    assert_no_secret(done.stdout + done.stderr)


def test_a_listing_that_fails_fails_the_inventory(ansible, provider_api,
                                                  tmp_path: Path) -> None:
    provider_api.answer("/vast/instances/", {"title": "Bad Gateway"}, status=502)
    done = ansible("ansible-inventory", "-i", str(listed_fleet(tmp_path, provider_api)),
                   "--list")
    assert done.returncode != 0
    assert "the vast listing could not be read" in done.stderr
    assert "HTTP 502" in done.stderr
    assert "Completely failed to parse inventory source" in done.stderr
    assert VAST_KEY not in done.stdout + done.stderr


def test_listings_are_cached_with_the_plugins_cache_settings(ansible, provider_api,
                                                             tmp_path: Path) -> None:
    source = listed_fleet(tmp_path, provider_api, CACHE.format(tmp_path / "cache"))
    first = hostvars_of(ansible("ansible-inventory", "-i", str(source), "--list"))
    provider_api.answer("/vast/instances/", {"title": "Bad Gateway"}, status=502)
    second = hostvars_of(ansible("ansible-inventory", "-i", str(source), "--list"))
    assert second == first and second["4242"]["ansible_port"] == 42022
    assert provider_api.requests_to("/vast/instances/") == 1
    written = "".join(path.read_text() for path in (tmp_path / "cache").iterdir())
    assert "42022" in written and VAST_KEY not in written and RUNPOD_KEY not in written
