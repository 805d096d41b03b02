"""``GET /metrics/targets``: Prometheus's http_sd list of every intended vLLM, under the bearer
rule of ``/metrics``; the address is the one the latest pass dialled, or the listen port of a
fleet without listings."""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from llmao_server.fleet_ca_cli import init
from llmao_server.state import ServerState, app_state
from llmao_server.store import Approval
from tests.server.fleet_pair import CONFIG, KNOWN, LEGACY, OTHER_KNOWN, UNKNOWN
from tests.server.loaded_pass import GEMMA, OTHER_QWEN, a_pass

METRICS_TOKEN = secrets.token_urlsafe(32)
REMOTE = {"REMOTE_ADDR": "198.51.100.99"}


def groups(answer) -> dict[str, dict[str, str]]:
    """target → labels; every group names exactly one target."""
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert answer.mimetype == "application/json"
    document = answer.json
    assert isinstance(document, list)
    assert all(len(group["targets"]) == 1 for group in document)
    return {group["targets"][0]: group["labels"] for group in document}


def test_a_local_fleet_lists_every_server_at_its_listen_port(client: FlaskClient) -> None:
    assert groups(client.get("/metrics/targets")) == {
        f"{KNOWN}:8001": {"box": KNOWN, "server": "gemma", "model": "gemma",
                          "provider": "local"},
        f"{KNOWN}:8002": {"box": KNOWN, "server": "qwen", "model": "qwen",
                          "provider": "local"},
        f"{OTHER_KNOWN}:8001": {"box": OTHER_KNOWN, "server": "qwen", "model": "qwen",
                                "provider": "local"},
        f"{LEGACY}:8000": {"box": LEGACY, "server": "gemma", "model": "gemma",
                           "provider": "local"},
    }


def test_the_latest_pass_gives_the_public_address_and_provider(client: FlaskClient,
                                                               state: ServerState) -> None:
    record = a_pass(time.time())
    verdicts = dict(record.verdicts)
    verdicts[GEMMA] = {**verdicts[GEMMA], "public": "198.51.100.20:30001", "provider": "runpod"}
    verdicts[OTHER_QWEN] = {**verdicts[OTHER_QWEN], "public": "[2001:db8::5]:40001",
                            "provider": "vast"}
    state.store.record_pass(replace(record, verdicts=verdicts))
    seen = groups(client.get("/metrics/targets"))
    assert seen["198.51.100.20:30001"] == {"box": KNOWN, "server": "gemma", "model": "gemma",
                                           "provider": "runpod"}
    assert seen["[2001:db8::5]:40001"]["provider"] == "vast"
    assert f"{KNOWN}:8001" not in seen and f"{KNOWN}:8002" in seen


def test_with_listings_a_server_is_listed_once_a_pass_placed_it(
        make_app: Callable[..., Flask]) -> None:
    document = copy.deepcopy(CONFIG)
    document["providers"] = {"vast": {"api_key": "unit-vast-api-key-0d0d"}}
    app = make_app(document, folder="listed")
    assert groups(app.test_client().get("/metrics/targets")) == {}, \
        "no address is guessed before a pass read the listing"
    record = a_pass(time.time())
    verdicts = {GEMMA: {**record.verdicts[GEMMA], "public": "203.0.113.10:41001",
                        "provider": "vast"}}
    app_state(app).store.record_pass(replace(record, verdicts=verdicts))
    assert list(groups(app.test_client().get("/metrics/targets"))) == ["203.0.113.10:41001"]


def test_under_box_tls_every_target_is_scraped_over_https(make_app: Callable[..., Flask],
                                                         tmp_path: Path) -> None:
    document = copy.deepcopy(CONFIG)
    cert, key = init(str(tmp_path / "ca"), "test fleet CA")
    document["box_tls"] = {"ca_cert": cert, "ca_key": key, "leaf_days": 3}
    seen = groups(make_app(document, folder="tls").test_client().get("/metrics/targets"))
    assert seen and all(labels["__scheme__"] == "https" for labels in seen.values())


def test_an_approved_box_is_a_target_too(client: FlaskClient, state: ServerState) -> None:
    state.store.approve(Approval(UNKNOWN, ("gemma",), "admin", time.time()))
    assert groups(client.get("/metrics/targets"))[f"{UNKNOWN}:8001"] == {
        "box": UNKNOWN, "server": "gemma", "model": "gemma", "provider": "local"}


def test_an_approval_no_longer_honoured_is_no_target(client: FlaskClient,
                                                     state: ServerState) -> None:
    # Its model left models.yaml: the box is not served, so it is not scraped either (the
    # fleet in force leaves it out, as reconcile does), and the other targets still answer.
    state.store.approve(Approval(UNKNOWN, ("gone",), "admin", time.time()))
    seen = groups(client.get("/metrics/targets"))
    assert seen and not any(labels["box"] == UNKNOWN for labels in seen.values())


def test_without_a_token_only_loopback_peers_are_answered(client: FlaskClient) -> None:
    refused = client.get("/metrics/targets", environ_base=REMOTE)
    assert refused.status_code == 403
    assert refused.json["error"]["code"] == "metrics_loopback_only"


@pytest.mark.parametrize(("headers", "status"), [
    ({}, 401), ({"Authorization": f"Bearer {METRICS_TOKEN[:-1]}"}, 403),
    ({"Authorization": f"Bearer {METRICS_TOKEN}"}, 200)])
def test_with_a_token_every_peer_presents_it(make_app: Callable[..., Flask], headers,
                                            status) -> None:
    document = copy.deepcopy(CONFIG)
    document["metrics"] = {"token": METRICS_TOKEN}
    app = make_app(document, folder="with-token")
    for peer in (REMOTE, {"REMOTE_ADDR": "127.0.0.1"}):
        assert app.test_client().get("/metrics/targets", headers=headers,
                                     environ_base=peer).status_code == status
