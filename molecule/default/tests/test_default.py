"""What the push path must leave on the default scenario's boxes, checked from outside.

The expectations come from the scenario's own fleet files through llmao's core, so a
server, its listen port and its bearer here are exactly what the role was given.
Every HTTP check goes through the port the engine published on 127.0.0.1, the way
LiteLLM and reconcile reach a box through its provider's mapping.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import testinfra

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import IntendedServer
from tests.box.probes import (
    COMMAND_LINES,
    answers_health,
    assert_no_bearer_on_command_lines,
    assert_serves,
    wait_for,
)

FLEET_DIR = Path(__file__).resolve().parents[2] / "shared" / "fleet"
FLEET = load_fleet(str(FLEET_DIR / "config.yaml"), str(FLEET_DIR / "models.yaml"))
BOXES = ("llmao-molecule-a", "llmao-molecule-b")
SERVERS = [server for box in BOXES for server in FLEET.assignment(box).servers]
CONF_DIR = "/etc/supervisor/conf.d"
RECORD = "/data/llmao/applied.json"

by_server = pytest.mark.parametrize("server", SERVERS, ids=lambda s: f"{s.box}:{s.name}")
by_box = pytest.mark.parametrize("box", BOXES)


@pytest.fixture(scope="module")
def hosts() -> dict[str, testinfra.host.Host]:
    """The boxes as testinfra hosts, reached through Molecule's inventory."""
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    return {box: testinfra.get_host(f"ansible://{box}?ansible_inventory={inventory}")
            for box in BOXES}


def published(box: str, listen_port: int) -> tuple[str, int]:
    """The (address, port) the engine published a box's listen port on."""
    out = subprocess.run(["docker", "port", box, f"{listen_port}/tcp"], capture_output=True,
                         text=True, check=True).stdout.split()
    address, _, port = out[0].rpartition(":")
    return address, int(port)


def base_url(server: IntendedServer) -> str:
    address, port = published(server.box, server.listen_port)
    return f"http://{address}:{port}"


def program_state(host: testinfra.host.Host, name: str) -> str:
    words = host.run(f"supervisorctl status {name}").stdout.split()
    return words[1] if len(words) > 1 else ""


@by_server
def test_every_program_runs(hosts, server):
    host = hosts[server.box]
    wait_for(f"{server.name} RUNNING",
             lambda: program_state(host, server.name) == "RUNNING")


@by_server
def test_listen_port_is_published_on_loopback_only(server):
    assert published(server.box, server.listen_port)[0] == "127.0.0.1"


@by_server
def test_health_answers_and_models_need_the_bearer(server):
    assert_serves(base_url(server), server.api_key, server.served_model_name)


@by_server
def test_program_files_are_private(hosts, server):
    program = hosts[server.box].file(f"{CONF_DIR}/llmao-{server.name}.conf")
    assert program.is_file
    assert program.mode == 0o600
    assert program.user == "root"


@by_box
def test_no_bearer_on_any_command_line(hosts, box):
    assert_no_bearer_on_command_lines(hosts[box].check_output(COMMAND_LINES),
                                      FLEET.assignment(box).servers)


@by_box
def test_applied_record_holds_the_intended_revision(hosts, box):
    record = json.loads(hosts[box].file(RECORD).content_string)
    assignment = FLEET.assignment(box)
    assert record["revision"] == assignment.revision
    assert [entry["name"] for entry in record["servers"]] == [s.name for s in assignment.servers]
    assert not any(s.api_key in json.dumps(record) for s in assignment.servers)


@by_server
def test_supervisor_restarts_a_killed_vllm(hosts, server):
    host = hosts[server.box]
    before = host.check_output(f"supervisorctl pid {server.name}")
    assert before.isdigit()
    host.run_expect([0], f"kill -9 {before}")
    wait_for(f"{server.name} restarted", lambda: host.run(
        f"supervisorctl pid {server.name}").stdout.strip() not in ("", "0", before))
    wait_for(f"{server.name} /health after the restart",
             lambda: answers_health(base_url(server)))
