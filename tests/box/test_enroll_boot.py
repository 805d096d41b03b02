"""A box that boots as a Vast template boots it, under ``fleet.binding: enrolled``: the real
llmao-server over HTTPS, Vast's provision.sh, real supervisord in a container box.

The instance's environment carries LLMAO_BOOTSTRAP_TOKEN as a rented instance's would, so the
container's supervisord (PID 1, as a Vast image's own) holds it and hands it to the follow
program. The boot spends it once and keeps the box token it buys; the follow program's checks
keep going on that box token without ever presenting the spent one; the token is in no file
the box program writes and in nothing it or the server says; a second instance with the same
token gets nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmao_server.boxes import bindings
from llmao_server.store import open_store
from rig import web
from rig.boxes import Box, host_gateway_address, start_box
from rig.fleet_files import fleet_section
from rig.tls import make_server_tls
from tests.box.fleet_files import FLEET_KEY, KEYS, write_fleet_files
from tests.box.probes import wait_for
from tests.box.template_boot import boot, template_env
from tests.llmao_process import LlmaoServer, start_llmao_server

# Until the server's side of enrollment lands (issue 33) there is nothing to enroll with.
SERVER_ENROLLS = pytest.mark.skipif(not hasattr(bindings, "BOOTSTRAP_HEADER"),
                                    reason="llmao-server has no enrollment yet (issue 33)")

pytestmark = [pytest.mark.docker, pytest.mark.slow, SERVER_ENROLLS]

BOX = "enroll-box"
ROWS = {BOX: [["tiny-chat", 8001]]}
TOKEN_FILE = "/data/llmao/box-token"
FOLLOW_LOG = "/data/llmao/follow.log"


@dataclass
class Enrolled:
    server: LlmaoServer
    box: Box
    bootstrap: str
    booted: str
    ca_file: Path
    state: str

    def binding(self):
        store = open_store(self.state)
        try:
            return {binding.box: binding for binding in store.bindings_since(0)}.get(BOX)
        finally:
            store.close()


def enroll(server: LlmaoServer) -> str:
    """The admin's one-time token for BOX (``POST /admin/api/boxes/<name>/enroll``)."""
    status, body = web.call(f"{server.url}/admin/api/boxes/{BOX}/enroll",
                            context=server.context, headers=web.authorization(KEYS.admin_token),
                            body={"ttl_s": 3600})
    assert status == 200, body
    return json.loads(body)["bootstrap_token"]


@pytest.fixture(scope="module")
def enrolled(box_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Enrolled]:
    folder = tmp_path_factory.mktemp("enroll")
    gateway = host_gateway_address()
    tls = make_server_tls(folder / "tls", [gateway])
    state = str(folder / "state.sqlite3")
    fleet = write_fleet_files(folder / "fleet", ROWS, {
        "fleet": {**fleet_section(KEYS, ROWS), "binding": "enrolled"},
        "rollout": {"follow_s": 1, "drain_s": 1}, "admin": {"token": KEYS.admin_token},
        "server": {"state": state}})
    server = start_llmao_server(fleet.config, fleet.models, folder, host=gateway,
                                tls=(tls.ca_file, tls.certfile, tls.keyfile))
    box = None
    try:
        bootstrap = enroll(server)
        box = start_box(BOX, image=box_image, env={
            **template_env(FLEET_KEY, server.url, BOX), "LLMAO_BOOTSTRAP_TOKEN": bootstrap})
        booted = boot(box, tls.ca_file)
        said = (booted.stdout + booted.stderr).decode()
        assert booted.returncode == 0, said[-3000:]
        yield Enrolled(server, box, bootstrap, said, tls.ca_file, state)
    finally:
        if box is not None:
            box.remove()
        server.stop()


def test_the_boot_spends_the_bootstrap_token_and_keeps_the_box_token(enrolled):
    assert f"enrolled: llmao bound {BOX} to this box" in enrolled.booted
    token = enrolled.box.read_file(TOKEN_FILE).decode().strip()
    binding = enrolled.binding()
    assert binding.confirmed
    assert binding.token_hash == hashlib.sha256(token.encode()).hexdigest()


def test_the_follow_program_checks_on_the_box_token_with_the_spent_one_in_its_environment(
        enrolled):
    """supervisord got LLMAO_BOOTSTRAP_TOKEN from the instance, and the follow program gets it
    from supervisord: its checks still go on the box token alone, without an error."""
    wait_for("two follow checks", lambda: enrolled.box.exec(
        ["sh", "-c", f"cat {FOLLOW_LOG} 2>&1"], check=False).stdout.decode()
        .count("is current") >= 2)
    log = enrolled.box.exec(["cat", FOLLOW_LOG]).stdout.decode()
    assert "error" not in log and "bootstrap" not in log.lower()
    held = enrolled.box.exec(["sh", "-c", "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' "
                                          "| grep -c '^LLMAO_BOOTSTRAP_TOKEN=' || true"])
    assert int(held.stdout.decode().split()[-1]) >= 1, "the instance's supervisord holds it"


def test_the_bootstrap_token_is_in_no_file_and_nothing_said(enrolled):
    found = enrolled.box.exec(["grep", "-rl", "--", enrolled.bootstrap, "/etc/supervisor",
                               "/data", "/opt/llmao"], check=False)
    assert found.stdout.decode() == ""
    assert enrolled.bootstrap not in enrolled.booted + enrolled.server.log()


def test_a_second_instance_with_the_spent_token_gets_nothing(enrolled, box_image):
    other = start_box("enroll-box-copy", image=box_image, env={
        **template_env(FLEET_KEY, enrolled.server.url, BOX),
        "LLMAO_BOOTSTRAP_TOKEN": enrolled.bootstrap})
    try:
        booted = boot(other, enrolled.ca_file)
        said = booted.stderr.decode()
        assert booted.returncode == 2, said
        assert "(403 bootstrap_token_invalid)" in said
        listing = other.exec(["sh", "-c", "ls /etc/supervisor/conf.d /data/llmao 2>&1 || true"])
        assert "llmao-" not in listing.stdout.decode()
        assert "box-token" not in listing.stdout.decode()
    finally:
        other.remove()
