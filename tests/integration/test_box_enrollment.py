"""Enrollment through the real ``llmao-server`` (2 workers, ``fleet.binding: enrolled``) and the
real box program (docs/box-identity.md): the fleet key alone binds nothing; an admin's bootstrap
token, presented once by the box program from LLMAO_BOOTSTRAP_TOKEN, binds the name to that
box, confirmed at once, and buys the box token it keeps; the token is spent after that."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmao_server.boxes import bindings
from llmao_server.store import open_store
from tests.llmao_process import LlmaoServer, start_llmao_server
from tests.reliability.box_runs import Ending, run_box
from tests.server.fleet_pair import ADMIN_TOKEN, FLEET_KEY, SECRETS, config, write_pair
from tests.unit.box_program.helpers import Box

# Until the server's side of enrollment lands (issue 33) there is nothing to enroll with.
SERVER_ENROLLS = pytest.mark.skipif(not hasattr(bindings, "BOOTSTRAP_HEADER"),
                                    reason="llmao-server has no enrollment yet (issue 33)")

pytestmark = [pytest.mark.slow, SERVER_ENROLLS]

NAME = "gpu-enrolled"


class EnrolledFleet:
    """llmao-server on loopback whose one box name binds only through enrollment."""

    def __init__(self, folder: Path):
        document = config(hosts={NAME: [["gemma", 8001]]}, legacy_servers=None,
                          binding="enrolled")
        document["server"] = {"state": str(folder / "state.sqlite3")}
        self.state = folder / "state.sqlite3"
        paths = write_pair(folder / "fleet", document)
        self.server: LlmaoServer = start_llmao_server(Path(paths[0]), Path(paths[1]), folder,
                                                      workers=2)
        self.outputs: list[str] = []

    def enroll(self) -> str:
        """What ``POST /admin/api/boxes/<name>/enroll`` hands the admin."""
        request = urllib.request.Request(
            f"{self.server.url}/admin/api/boxes/{NAME}/enroll", method="POST",
            data=json.dumps({"ttl_s": 3600}).encode(),
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}",
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())["bootstrap_token"]

    def run(self, box: Box, bootstrap: str | None = None) -> Ending:
        env = {"LLMAO_URL": self.server.url, "FLEET_KEY": FLEET_KEY, "LLMAO_HOST": NAME}
        if bootstrap is not None:
            env["LLMAO_BOOTSTRAP_TOKEN"] = bootstrap
        ending = run_box(box, "--no-handover", env=env)
        self.outputs.append(ending.out + ending.err)
        return ending

    def binding(self):
        store = open_store(str(self.state))
        try:
            return {binding.box: binding for binding in store.bindings_since(0)}.get(NAME)
        finally:
            store.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[EnrolledFleet]:
    served = EnrolledFleet(tmp_path)
    yield served  # pytest runs what follows whether the test passed or not
    served.server.stop()


def a_box(folder: Path, name: str) -> Box:
    (folder / name).mkdir()
    return Box(folder / name)


def test_a_box_with_its_bootstrap_token_binds_and_the_fleet_key_alone_binds_nothing(fleet,
                                                                                   tmp_path):
    box, thief = a_box(tmp_path, "box"), a_box(tmp_path, "thief")
    alone = fleet.run(thief)
    assert alone.rc == 2 and "(403 box_not_enrolled)" in alone.err, alone.err
    assert "llmao-server enroll gpu-enrolled --ttl 1h" in alone.err
    assert thief.snapshot() == {} and fleet.binding() is None

    bootstrap = fleet.enroll()
    first = fleet.run(box, bootstrap)
    assert first.rc == 0, first.err
    assert "enrolled: llmao bound gpu-enrolled to this box" in first.out
    assert "reported revision" in first.out and box.program("gemma").exists()
    token = (box.data / "llmao" / "box-token").read_text().strip()
    binding = fleet.binding()
    assert binding.confirmed and binding.token_hash == hashlib.sha256(token.encode()).hexdigest()

    spent = fleet.run(thief, bootstrap)
    assert spent.rc == 2 and "(403 bootstrap_token_invalid)" in spent.err, spent.err
    assert thief.snapshot() == {}
    again = fleet.run(box, bootstrap)  # the box keeps its token: it spends no bootstrap token
    assert again.rc == 0 and "unchanged: revision" in again.out, again.err
    said = "\n".join([*fleet.outputs, fleet.server.log(), *(
        path.read_text(errors="replace") for path in box.root.rglob("*") if path.is_file())])
    assert bootstrap not in said
    assert not [secret for secret in (*SECRETS, token) if secret in "\n".join(fleet.outputs)]
