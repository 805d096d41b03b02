"""A following box end to end: real supervisord in a container box, the real llmao-server.

The box boots from the template (tests/box/template_boot.py) against a fleet whose config sets
``rollout.follow_s``: the box program installs the follow program, which supervisord runs.
Then models.yaml changes one of the box's two servers and llmao reloads: the follower sees the
new revision in its check, asks for a turn (granted: nothing else runs), and once the turn is
drained it fetches, applies and reports. Reconcile is not part of this test: its one step in
a turn (draining -> drained, once the routes are gone) is played through the admin API it
uses, ``POST /admin/api/turns``. Only the changed server's program may restart, the follower
must not, and llmao must know the revision the box applied.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from llmao_server.store import open_store
from rig import web
from rig.boxes import Box, host_gateway_address, start_box
from rig.tls import make_server_tls
from tests.box.fleet_files import FLEET_KEY, KEYS, FleetFiles, write_fleet_files
from tests.box.probes import wait_for
from tests.box.template_boot import boot, template_env
from tests.llmao_process import LlmaoServer, start_llmao_server

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BOX = "follow-box"
ROWS = {BOX: [["tiny-chat", 8001], ["tiny-code", 8002]]}
ROLLOUT = {"follow_s": 1, "drain_s": 1}
FOLLOW_CONF = "/etc/supervisor/conf.d/llmao-follow.conf"
FOLLOW_LOG = "/data/llmao/follow.log"
FOLLOW_WAIT_S = 90.0
NEW_ARGS = "--tool-call-parser pythonic --enable-auto-tool-choice"


@dataclass
class Following:
    fleet: FleetFiles
    server: LlmaoServer
    box: Box
    booted: str

    def log(self) -> str:
        return self.box.exec(["sh", "-c", f"cat {FOLLOW_LOG} 2>&1"], check=False) \
            .stdout.decode()

    def applied(self) -> str | None:
        store = open_store(self.fleet.fleet.settings.server.state)
        try:
            report = store.applied_reports().get(BOX)
        finally:
            store.close()
        return report.revision if report else None


@pytest.fixture(scope="module")
def following(box_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Following]:
    folder = tmp_path_factory.mktemp("follow")
    gateway = host_gateway_address()
    tls = make_server_tls(folder / "tls", [gateway])
    fleet = write_fleet_files(folder / "fleet", ROWS, {
        "rollout": ROLLOUT, "admin": {"token": KEYS.admin_token},
        "server": {"state": str(folder / "state.sqlite3")}})
    server = start_llmao_server(fleet.config, fleet.models, folder, host=gateway,
                                tls=(tls.ca_file, tls.certfile, tls.keyfile))
    box = None
    try:
        box = start_box(BOX, image=box_image, env=template_env(FLEET_KEY, server.url, BOX))
        booted = boot(box, tls.ca_file)
        said = (booted.stdout + booted.stderr).decode()
        assert booted.returncode == 0, said[-3000:]
        yield Following(fleet, server, box, said)
    finally:
        if box is not None:
            box.remove()
        server.stop()


def program_pid(box: Box, name: str) -> str:
    return box.supervisorctl("pid", name).stdout.decode().strip()


def program_state(box: Box, name: str) -> str:
    words = box.supervisorctl("status", name).stdout.decode().split()
    return words[1] if len(words) > 1 else ""


def change_args(fleet: FleetFiles, recipe: str, args: str) -> str:
    """Edit a recipe's args in models.yaml as an operator does (args do not move the division
    of the card, so no other server changes); the revision the box is now meant to run."""
    models = yaml.safe_load(fleet.models.read_text())
    for entry in models["models"]:
        if entry["model_name"] == recipe:
            entry["model_info"]["vllm"]["args"] = args
    fleet.models.write_text(yaml.safe_dump(models, sort_keys=False))
    return load_fleet(str(fleet.config), str(fleet.models)).assignment(BOX).revision


def end_drain(following: Following, revision: str) -> None:
    """Reconcile's step, through its admin API: the turn's routes are gone, it is drained."""
    status, body = web.call(
        f"{following.server.url}/admin/api/turns", context=following.server.context,
        headers=web.authorization(KEYS.admin_token),
        body={"updates": [{"box": BOX, "revision": revision, "phase": "drained", "why": ""}]})
    assert status == 200 and json.loads(body)["refused"] == [], body


def test_the_follow_program_runs_under_supervisord(following):
    wait_for("llmao-follow RUNNING",
             lambda: program_state(following.box, "llmao-follow") == "RUNNING")
    mode = following.box.exec(["stat", "-c", "%a", FOLLOW_CONF]).stdout.decode().strip()
    assert mode == "600"
    assert f"wrote {FOLLOW_CONF}" in following.booted
    assert FLEET_KEY not in following.booted
    wait_for("the follower's first check",
             lambda: "checked: revision" in following.log())
    revision = following.fleet.fleet.assignment(BOX).revision
    assert f"checked: revision {revision} is current" in following.log()


def test_a_config_change_is_followed_restarting_only_the_changed_program(following):
    box = following.box
    wait_for("llmao-follow RUNNING", lambda: program_state(box, "llmao-follow") == "RUNNING")
    for name in ("tiny-chat", "tiny-code"):
        wait_for(f"{name} RUNNING", lambda name=name: program_state(box, name) == "RUNNING")
    pids = {name: program_pid(box, name) for name in ("tiny-chat", "tiny-code", "llmao-follow")}

    revision = change_args(following.fleet, "tiny-code", NEW_ARGS)
    following.server.reload()
    wait_for("the follower holds a draining turn",
             lambda: f"turn: granted for revision {revision} (draining)" in following.log(),
             FOLLOW_WAIT_S)
    end_drain(following, revision)
    wait_for("llmao knows the applied revision", lambda: following.applied() == revision,
             FOLLOW_WAIT_S)

    log = following.log()
    steps = [f"checked: revision {revision} is intended",
             f"turn: asking for revision {revision} (servers tiny-code)",
             f"turn: granted for revision {revision} (draining): waiting for the drain",
             f"turn: granted for revision {revision}, drained: apply",
             f"applying revision {revision}",
             f"reported revision {revision} to llmao",
             f"applied revision {revision}"]
    places = [log.find(step) for step in steps]
    assert -1 not in places and places == sorted(places), log[-4000:]
    assert f"{NEW_ARGS}\n" in box.read_file(
        "/etc/supervisor/conf.d/llmao-tiny-code.conf").decode()
    wait_for("tiny-code RUNNING again", lambda: program_state(box, "tiny-code") == "RUNNING")
    assert program_pid(box, "tiny-chat") == pids["tiny-chat"], "an unchanged program restarted"
    assert program_pid(box, "tiny-code") != pids["tiny-code"]
    assert program_pid(box, "llmao-follow") == pids["llmao-follow"], "the follower restarted"
    record = json.loads(box.read_file("/data/llmao/applied.json"))
    assert record["revision"] == revision and record["rollout"] == {"follow_s": 1.0,
                                                                    "drain_s": 1.0}
    for secret in following.fleet.secrets():
        assert secret not in log
    assert "Traceback" not in log


def test_the_server_log_holds_no_secret(following):
    log = following.server.log()
    for secret in [*following.fleet.secrets(), KEYS.admin_token]:
        assert secret not in log
