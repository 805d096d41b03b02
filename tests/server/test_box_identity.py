"""A box's identity is given, never won (docs/box-identity.md): enrollment by bootstrap token,
``fleet.binding: enrolled``, a pending name kept from other peers, names the push path owns,
releases that name the next claimant, and the rule's outcomes one by one."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from llmao_server.boxes.bindings import BOOTSTRAP_HEADER, INSTANCE_HEADER, TOKEN_HEADER
from llmao_server.cli import main as cli_main
from llmao_server.state import app_state
from tests.server.fleet_pair import ADMIN_TOKEN, CONFIG, KNOWN, box_headers, config
from tests.server.test_admin_api import admin

THIEF = {"REMOTE_ADDR": "192.0.2.66"}
BOX = {"REMOTE_ADDR": "192.0.2.10"}


def fetch(client: FlaskClient, peer: dict[str, str] = BOX, **headers: str) -> tuple[int, dict]:
    answer = client.get("/vllm/config", headers={**box_headers(), **headers},
                        environ_base=peer)
    return answer.status_code, {"token": answer.headers.get(TOKEN_HEADER),
                                "code": (answer.json or {}).get("error", {}).get("code"),
                                "servers": (answer.json or {}).get("servers")}


def enroll(client: FlaskClient, box: str = KNOWN, **body: object) -> dict:
    answer = client.post(f"/admin/api/boxes/{box}/enroll", headers=admin(),
                         json={"ttl_s": 3600, **body})
    assert answer.status_code == 200, answer.json
    return answer.json


def test_under_enrolled_the_fleet_key_alone_binds_nothing(make_app: Callable[..., Flask]) -> None:
    client = make_app(config(binding="enrolled")).test_client()
    status, seen = fetch(client, THIEF)
    assert (status, seen["code"], seen["servers"]) == (403, "box_not_enrolled", None)
    enrolled = enroll(client)
    assert set(enrolled) == {"box", "bootstrap_token", "expires_at", "pool"}
    assert enrolled["expires_at"].endswith("Z")
    status, seen = fetch(client, **{BOOTSTRAP_HEADER: enrolled["bootstrap_token"]})
    assert status == 200 and seen["token"] and seen["servers"]
    # Bound and confirmed at once: the box's report passes, the thief's fetch does not.
    report = client.post("/vllm/applied", headers={**box_headers(), TOKEN_HEADER: seen["token"]},
                         json={"revision": "0" * 16, "applied_at": "2026-12-05T12:00:00Z",
                               "servers": []}, environ_base=BOX)
    assert report.status_code == 200
    assert fetch(client, THIEF)[1]["code"] == "box_token_required"
    # A bootstrap token works once.
    again = fetch(client, THIEF, **{BOOTSTRAP_HEADER: enrolled["bootstrap_token"]})
    assert again[1]["code"] == "bootstrap_token_invalid"


def test_an_enrolled_name_is_not_bound_by_the_fleet_key_under_first_fetch(
        client: FlaskClient) -> None:
    token = enroll(client)["bootstrap_token"]
    assert fetch(client, THIEF)[1]["code"] == "box_not_enrolled"
    assert fetch(client, BOX, **{BOOTSTRAP_HEADER: "x" * 43})[1]["code"] == \
        "bootstrap_token_invalid"
    status, seen = fetch(client, BOX, **{BOOTSTRAP_HEADER: token})
    assert status == 200 and seen["token"]


def test_a_pending_name_is_not_taken_by_another_peer(client: FlaskClient) -> None:
    status, first = fetch(client, BOX)
    assert status == 200 and first["token"]
    status, thief = fetch(client, THIEF)
    assert (status, thief["code"], thief["token"]) == (403, "box_pending_elsewhere", None)
    status, again = fetch(client, BOX)  # its answer was lost: the same peer asks again
    assert status == 200 and again["token"] not in (None, first["token"])
    strip = client.get("/admin/api/observations", headers=admin()).json["bindings"][KNOWN]
    assert strip["peer"] == BOX["REMOTE_ADDR"] and strip["state"] == "pending"


@pytest.mark.parametrize("path", ["/vllm/applied", "/vllm/turn", "/vllm/cert"])
def test_nothing_but_a_confirmed_token_reports_turns_or_asks_a_certificate(
        client: FlaskClient, path: str) -> None:
    fetch(client, BOX)  # pending
    answer = client.post(path, headers=box_headers(), json={}, environ_base=THIEF)
    assert answer.status_code == 403
    assert answer.json["error"]["code"] in ("box_token_required", "box_pending_elsewhere")


def test_the_push_path_owns_the_names_it_acts_on(client: FlaskClient) -> None:
    turn = client.post("/admin/api/turns/take", headers=admin(),
                       json={"box": KNOWN, "revision": "0" * 16, "servers": ["gemma"]})
    assert turn.status_code in (200, 409)  # whatever the turn, the name is now the controller's
    status, seen = fetch(client, THIEF)
    assert (status, seen["code"], seen["servers"]) == (403, "box_token_required", None)
    for path in ("/vllm/applied", "/vllm/turn", "/vllm/cert"):
        refused = client.post(path, headers=box_headers(), json={}, environ_base=THIEF)
        assert refused.status_code == 403
    binding = client.get("/admin/api/observations", headers=admin()).json["bindings"][KNOWN]
    assert binding["holder"] == "controller"


def test_a_release_can_name_the_next_claimant(client: FlaskClient) -> None:
    _, first = fetch(client, BOX)
    released = client.delete(f"/admin/api/boxes/{KNOWN}/binding?next_instance=i-2",
                             headers=admin())
    assert released.json["released"] is True
    assert fetch(client, THIEF)[1]["code"] == "box_reserved"
    assert fetch(client, THIEF, **{INSTANCE_HEADER: "i-1"})[1]["code"] == "box_reserved"
    status, seen = fetch(client, BOX, **{INSTANCE_HEADER: "i-2"})
    assert status == 200 and seen["token"]


@pytest.mark.parametrize(("body", "status"), [
    ({"ttl_s": 10}, 400), ({"ttl_s": "1h"}, 400), ({"ttl_s": 3600, "pool": "nowhere"}, 400),
    ({"ttl_s": 3600, "extra": 1}, 400), ({}, 200),
])
def test_an_enrollment_is_checked(client: FlaskClient, body: dict, status: int) -> None:
    answer = client.post(f"/admin/api/boxes/{KNOWN}/enroll", headers=admin(), json=body)
    assert answer.status_code == status
    assert client.post("/admin/api/boxes/192.0.2.77/enroll", headers=admin(),
                       json={"ttl_s": 3600}).status_code == 404  # neither served nor pooled


def test_wrong_box_tokens_never_lock_the_admin_api(client: FlaskClient) -> None:
    fetch(client, BOX)
    fetch(client, BOX, **{TOKEN_HEADER: "y" * 43})  # confirms nothing: wrong
    for _ in range(8):
        fetch(client, {"REMOTE_ADDR": "127.0.0.1"}, **{TOKEN_HEADER: "z" * 43})
    assert client.get("/admin/api/observations", headers=admin(),
                      environ_base={"REMOTE_ADDR": "127.0.0.1"}).status_code == 200


def test_binding_off_unquoted_loads_and_published_tokens_do_not(
        make_app: Callable[..., Flask]) -> None:
    make_app(config(binding=False), folder="yaml-off", state="off.sqlite3")  # YAML's `off`
    published = {**CONFIG, "admin": {"token": "example-admin-token-change-me-before-real-use"}}
    with pytest.raises(ConfigError, match="admin.token"):
        make_app(published, folder="published", state="published.sqlite3")
    assert ADMIN_TOKEN not in str(published)


def test_the_cli_mints_a_token_the_server_takes_once(tmp_path, capsys,
                                                     make_app: Callable[..., Flask]) -> None:
    app = make_app(config(binding="enrolled"), folder="cli", state=str(tmp_path / "cli.db"))
    fleet = app_state(app).fleet
    argv = ["enroll", KNOWN, "--ttl", "30m", "--config", fleet.config_path,
            "--models", fleet.models_path, "--state", str(tmp_path / "cli.db")]
    assert cli_main(argv) == 0
    captured = capsys.readouterr()
    token = captured.out.strip()
    assert len(token) == 43 and token not in captured.err
    assert "LLMAO_BOOTSTRAP_TOKEN" in captured.err
    client = app.test_client()
    assert fetch(client, **{BOOTSTRAP_HEADER: token})[0] == 200
    assert fetch(client, THIEF, **{BOOTSTRAP_HEADER: token})[1]["code"] == \
        "bootstrap_token_invalid"
    assert cli_main(["enroll", "192.0.2.77", "--config", fleet.config_path,
                     "--models", fleet.models_path]) == 2
    with pytest.raises(SystemExit) as refused:  # argparse's own refusal, with the bounds
        cli_main(["enroll", KNOWN, "--ttl", "5s", "--config", fleet.config_path,
                  "--models", fleet.models_path])
    assert refused.value.code == 2 and "from 60 s to 30 days" in capsys.readouterr().err
