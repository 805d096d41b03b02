"""The pull path end to end, and its parity with the push path.

Boxes boot as a Vast template boots them: the template's environment (FLEET_KEY,
LLMAO_URL, PUBLIC_IPADDR) and Vast's provision.sh, which runs the box program. The
box program fetches from the real llmao-server over HTTPS with certificate
verification: the server binds the host's address on the container bridge with a
certificate for that address, signed by a CA of the test's own that the boxes get in
SSL_CERT_FILE. The boxes must reach the push scenario's state, and the server must
know the revision each box applied. Then the push path (the role) applies the same
assignment to a fresh box of the same name: the Supervisor programs must be the same
bytes.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmao_server.store import open_store
from rig.boxes import Box, host_gateway_address, start_box
from rig.tls import make_server_tls
from tests.box.fleet_files import FLEET_KEY, FleetFiles, write_fleet_files
from tests.box.probes import (
    COMMAND_LINES,
    assert_no_bearer_on_command_lines,
    assert_serves,
    wait_for,
)
from tests.box.template_boot import BOX_DIR, boot, template_env
from tests.llmao_process import LlmaoServer, start_llmao_server

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROWS = {
    "pull-box-a": [["tiny-chat", 8001], ["tiny-code", 8002]],
    "pull-box-b": [["tiny-chat", 8001, "tiny-chat-b"]],
}
PROGRAMS = [(box, row[2] if len(row) > 2 else row[0]) for box, rows in ROWS.items()
            for row in rows]
CONF_DIR = "/etc/supervisor/conf.d"
RECORD = "/data/llmao/applied.json"
TOKEN_FILE = "/data/llmao/box-token"

by_program = pytest.mark.parametrize(("box", "name"), PROGRAMS,
                                     ids=[f"{box}:{name}" for box, name in PROGRAMS])
by_box = pytest.mark.parametrize("box", list(ROWS))


@dataclass
class Pulled:
    """The fleet, its server, the booted boxes and what provision.sh said on each."""

    fleet: FleetFiles
    server: LlmaoServer
    boxes: dict[str, Box]
    boots: dict[str, subprocess.CompletedProcess[bytes]]
    server_ca: Path

    def server_of(self, box: str, name: str):
        return next(s for s in self.fleet.fleet.assignment(box).servers if s.name == name)


@pytest.fixture(scope="module")
def pulled(box_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pulled]:
    folder = tmp_path_factory.mktemp("pull")
    gateway = host_gateway_address()
    tls = make_server_tls(folder / "tls", [gateway])
    fleet = write_fleet_files(folder / "fleet", ROWS,
                              {"server": {"state": str(folder / "state.sqlite3")}})
    server = start_llmao_server(fleet.config, fleet.models, folder, host=gateway,
                                tls=(tls.ca_file, tls.certfile, tls.keyfile))
    boxes: dict[str, Box] = {}
    try:
        for name in ROWS:
            boxes[name] = start_box(name, image=box_image,
                                    env=template_env(FLEET_KEY, server.url, name))
        boots = {name: boot(box, tls.ca_file) for name, box in boxes.items()}
        yield Pulled(fleet, server, boxes, boots, tls.ca_file)
    finally:
        for box in boxes.values():
            box.remove()
        server.stop()


def program_state(box: Box, name: str) -> str:
    words = box.supervisorctl("status", name).stdout.decode().split()
    return words[1] if len(words) > 1 else ""


def programs_on(box: Box, secrets: list[str]) -> dict[str, tuple[str, str, str]]:
    """Each llmao program file of a box: name -> (mode and owner, sha256 of its bytes, its text
    with the secrets masked). A failed comparison then shows a readable diff, never a bearer."""
    listing = box.exec(["sh", "-c", f"stat -c '%a %U %n' {CONF_DIR}/llmao-*.conf"])
    files = {}
    for line in listing.stdout.decode().splitlines():
        mode, owner, path = line.split(" ", 2)
        raw = box.read_file(path)
        text = raw.decode()
        for secret in secrets:
            text = text.replace(secret, "***")
        files[Path(path).name] = (f"{mode} {owner}", hashlib.sha256(raw).hexdigest(), text)
    return files


def applied_record(box: Box) -> dict:
    record = json.loads(box.read_file(RECORD))
    del record["applied_at"]
    return record


@by_box
def test_each_box_boots_with_provision_sh_and_reports_its_revision(pulled, box):
    booted = pulled.boots[box]
    said = (booted.stdout + booted.stderr).decode()
    assert booted.returncode == 0, said
    revision = pulled.fleet.fleet.assignment(box).revision
    assert f"reported revision {revision} to llmao" in said


@by_program
def test_every_pulled_program_runs_and_serves(pulled, box, name):
    server, target = pulled.server_of(box, name), pulled.boxes[box]
    wait_for(f"{box}:{name} RUNNING", lambda: program_state(target, name) == "RUNNING")
    assert_serves(target.url(server.listen_port), server.api_key, server.served_model_name)


@by_box
def test_without_rollout_no_box_follows(pulled, box):
    """config.yaml sets no rollout.follow_s: no follow program, as the protocol was before."""
    target = pulled.boxes[box]
    listing = target.exec(["sh", "-c", f"ls {CONF_DIR}"]).stdout.decode().split()
    assert "llmao-follow.conf" not in listing and listing
    assert "llmao-follow" not in target.supervisorctl("status").stdout.decode()
    assert "rollout" not in json.loads(target.read_file(RECORD))


@by_box
def test_no_bearer_on_any_command_line_of_a_pulled_box(pulled, box):
    listing = pulled.boxes[box].exec(["sh", "-c", COMMAND_LINES]).stdout.decode()
    assert_no_bearer_on_command_lines(listing, pulled.fleet.fleet.assignment(box).servers)


def test_the_server_knows_each_boxs_applied_revision(pulled):
    store = open_store(pulled.fleet.fleet.settings.server.state)
    try:
        reports = store.applied_reports()
    finally:
        store.close()
    assert {box: report.revision for box, report in reports.items()} == {
        box: pulled.fleet.fleet.assignment(box).revision for box in ROWS}


@by_box
def test_booting_again_changes_nothing(pulled, box):
    target = pulled.boxes[box]
    before = programs_on(target, pulled.fleet.secrets())
    again = target.exec(["bash", f"{BOX_DIR}/provision.sh"], check=False)
    assert again.returncode == 0
    assert "unchanged: revision" in again.stdout.decode()
    assert programs_on(target, pulled.fleet.secrets()) == before


@by_box
def test_each_box_keeps_its_box_token_and_is_bound_to_it(pulled, box):
    """fleet.binding is first_fetch by default: the boot's report confirmed the binding, and a
    box program run again (the reboot above) presented the kept token (docs/box-identity.md)."""
    target = pulled.boxes[box]
    mode = target.exec(["stat", "-c", "%a", TOKEN_FILE]).stdout.decode().strip()
    assert mode == "600"
    token = target.read_file(TOKEN_FILE).decode().strip()
    store = open_store(pulled.fleet.fleet.settings.server.state)
    try:
        bindings = {binding.box: binding for binding in store.bindings_since(0)}
    finally:
        store.close()
    assert bindings[box].confirmed
    assert bindings[box].token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in pulled.server.log()


def test_a_second_box_with_a_bound_name_is_refused_and_writes_nothing(pulled, box_image):
    """A copy of the template with the fleet key claims pull-box-a from its own container (its
    own data dir): one clear line, exit 2, no program, no token kept."""
    impostor = start_box("pull-box-impostor", image=box_image,
                         env=template_env(FLEET_KEY, pulled.server.url, "pull-box-a"))
    try:
        booted = boot(impostor, pulled.server_ca)
        said = booted.stderr.decode().strip()
        assert booted.returncode == 2, said
        refusal = [line for line in said.splitlines() if "bound to another box" in line]
        assert len(refusal) == 1 and "'pull-box-a'" in refusal[0], said
        listing = impostor.exec(["sh", "-c", f"ls {CONF_DIR}; ls /data/llmao || true"])
        assert "llmao-" not in listing.stdout.decode()
        assert "box-token" not in listing.stdout.decode()
    finally:
        impostor.remove()
    assert "box_claim outcome=refused" in pulled.server.log()


def test_no_secret_in_the_server_log_or_what_the_boxes_said(pulled):
    said = pulled.server.log() + "".join(
        (run.stdout + run.stderr).decode() for run in pulled.boots.values())
    assert "GET /vllm/config" in said or "/vllm/config" in said
    for secret in pulled.fleet.secrets():
        assert secret not in said


def test_push_and_pull_leave_byte_identical_programs(pulled, box_factory, provision):
    name = "pull-box-a"
    pushed = box_factory(name)
    run = provision(pulled.fleet, {name: pushed}, "-vvv", "-e", "llmao_rolling=false")
    said = run.stdout + run.stderr
    for secret in pulled.fleet.secrets():
        assert secret not in said, "a secret reached ansible-playbook -vvv's output"
    assert run.returncode == 0, said[-4000:]
    secrets = pulled.fleet.secrets()
    pulled_programs = programs_on(pulled.boxes[name], secrets)
    assert sorted(pulled_programs) == ["llmao-tiny-chat.conf", "llmao-tiny-code.conf"]
    assert programs_on(pushed, secrets) == pulled_programs
    assert applied_record(pushed) == applied_record(pulled.boxes[name])
