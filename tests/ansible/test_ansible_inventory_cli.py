"""``ansible-inventory`` on the example fleet: groups, hostvars, no secret, clear failures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet

SOURCE = "inventories/example/fleet.yml"
BOXES = {"203.0.113.10", "203.0.113.11", "198.51.100.7"}


def unwrap(value: Any) -> Any:
    """Drop the ``__ansible_unsafe`` envelopes ansible-inventory puts around plugin strings."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {key: unwrap(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unwrap(item) for item in value]
    return value


@pytest.fixture(scope="module")
def listed(ansible) -> dict[str, Any]:
    """``--list`` once for the module (each run costs a second or two)."""
    done = ansible("ansible-inventory", "-i", SOURCE, "--list")
    assert done.returncode == 0, done.stderr
    return {"text": done.stdout + done.stderr, "data": unwrap(json.loads(done.stdout))}


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
    facts = unwrap(json.loads(done.stdout))
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
