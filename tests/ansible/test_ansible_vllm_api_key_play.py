"""``llmao.fleet.vllm_api_key`` in a real play: the bearer a box is served, never printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet

SOURCE = "inventories/example/fleet.yml"
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"


def served_keys(fleet: Fleet, box: str) -> dict[int, str]:
    """What ``GET /vllm/config`` gives the box: read from the payload's very bytes."""
    body = json.loads(fleet.assignment(box).body)
    return {server["port"]: server["api_key"] for server in body["servers"]}


@pytest.fixture(scope="module")
def played(ansible, tmp_path_factory) -> tuple[Path, str]:
    """The play run once at -vvv: the folder of the keys it kept, and everything it printed."""
    keys_dir = tmp_path_factory.mktemp("keys")
    done = ansible("ansible-playbook", "-vvv", "-i", SOURCE, str(PLAYBOOKS / "api_keys.yml"),
                   "-e", f"keys_dir={keys_dir}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return keys_dir, done.stdout + done.stderr


def test_each_key_is_the_one_the_config_server_serves(played, example_fleet: Fleet) -> None:
    keys_dir, _ = played
    for box in example_fleet.assignments:
        kept = json.loads((keys_dir / f"{box}.json").read_text())
        served = served_keys(example_fleet, box)
        assert dict(zip(kept["ports"], kept["keys"], strict=True)) == served
        assert kept["every_row"] == {str(port): key for port, key in served.items()}


def test_legacy_pair_gets_the_shared_bearer(played, example_fleet: Fleet) -> None:
    keys_dir, _ = played
    kept = json.loads((keys_dir / "198.51.100.7.json").read_text())
    assert kept["keys"] == [example_fleet.settings.fleet.selfhost_api_key]


def test_no_secret_in_verbose_output(played, assert_no_secret) -> None:
    _, output = played
    assert "TASK [Every bearer of the box at once]" in output and "censored" in output
    assert_no_secret(output)


def test_refuses_to_run_on_a_box(ansible, tmp_path: Path, assert_no_secret) -> None:
    """Without delegate_to the task fails before anything is sent: the salt stays here."""
    source = tmp_path / "fleet.yml"
    root = Path(__file__).resolve().parents[2] / "inventories" / "example"
    # The box is reached over SSH at loopback: whatever happens, nothing else is dialled.
    source.write_text(f"plugin: llmao.fleet.fleet\nconfig: {root / 'config.yaml'}\n"
                      f"models: {root / 'models.yaml'}\n"
                      "compose:\n  ansible_host: \"'127.0.0.1'\"\n"
                      "  ansible_connection: \"'ssh'\"\n")
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: '203.0.113.10'\n  gather_facts: false\n  tasks:\n"
        "    - llmao.fleet.vllm_api_key:\n        host: '{{ llmao_box }}'\n"
        "        salt: example-vllm-salt-change-me-before-use\n        port: 8001\n")
    done = ansible("ansible-playbook", "-vvv", "-i", str(source), str(play))
    assert done.returncode != 0
    assert "runs on the controller only" in done.stdout
    assert "SSH: EXEC" not in done.stdout + done.stderr
    assert_no_secret(done.stdout + done.stderr)
