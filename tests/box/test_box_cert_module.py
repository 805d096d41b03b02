"""The module ``llmao.fleet.box_cert`` in-process against a contract-shaped llmao on loopback:
the push path has a box's certificate request signed as the controller (admin token,
``POST /admin/api/boxes/<box>/cert``), never as the box."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import box_path
from ansible_collections.llmao.fleet.plugins.modules import box_cert
from llmao_server.fleet_ca_cli import init
from rig.local_fleet import MODEL, LocalFleet
from tests.unit.box_program.helpers import FakeLlmao

BOX = "203.0.113.10"
CSR = "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"
SIGNED = {"certificate": "-----BEGIN CERTIFICATE-----\nleaf\n-----END CERTIFICATE-----\n",
          "ca": "-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n",
          "not_after": "2026-12-09T02:00:00Z"}


@pytest.fixture
def llmao(tmp_path):
    fake = FakeLlmao()
    with fake.serve():
        local = LocalFleet(tmp_path / "fleet", {BOX: [[MODEL, 8001, f"{MODEL}-8001"]]})
        cert, key = init(str(tmp_path / "ca"), "module test CA")
        local.write(server={"url": fake.url}, box_tls={"ca_cert": cert, "ca_key": key})
        fake.local = local
        yield fake


def run(capsys, llmao, check: bool = False, **args: Any) -> dict[str, Any]:
    local = llmao.local
    args = {"config": str(local.config_path), "models": str(local.models_path), "box": BOX,
            "csr": CSR, "_ansible_check_mode": check, **args}
    with patch_module_args(args), pytest.raises(SystemExit):
        box_cert.main()
    printed = capsys.readouterr().out
    assert not any(secret in printed for secret in local.secrets())
    return json.loads(printed)


def test_the_request_is_signed_as_the_controller(capsys, llmao):
    llmao.script(box_path(BOX, "cert"), (200, SIGNED))
    result = run(capsys, llmao)
    assert result["changed"] is True and result["box"] == BOX
    assert {key: result[key] for key in SIGNED} == SIGNED
    (asked,) = llmao.requests_to(box_path(BOX, "cert"))
    assert asked.method == "POST" and json.loads(asked.body) == {"csr": CSR}
    assert asked.headers["authorization"] == f"Bearer {llmao.local.admin_token}"
    assert not any(seen.path.startswith("/vllm/") for seen in llmao.seen)


def test_a_refusal_fails_the_task_with_llmaos_reason(capsys, llmao):
    llmao.script(box_path(BOX, "cert"), (403, {"error": {
        "code": "address_not_attributed",
        "message": "10.0.0.9 is not an address llmao attributes to 203.0.113.10"}}))
    result = run(capsys, llmao)
    assert result["failed"] is True
    assert "HTTP 403" in result["msg"] and "10.0.0.9 is not an address" in result["msg"]


def test_check_mode_asks_nothing(capsys, llmao):
    result = run(capsys, llmao, check=True)
    assert result["changed"] is True and result["msg"].startswith("would ")
    assert llmao.seen == []


def test_without_box_tls_or_for_an_unknown_box_nothing_is_asked(capsys, llmao):
    assert "not in fleet.hosts" in run(capsys, llmao, box="198.51.100.7")["msg"]
    llmao.local.settings.pop("box_tls")
    llmao.local.write()
    assert "no box_tls section" in run(capsys, llmao)["msg"]
    assert llmao.seen == []


def test_a_wrong_admin_token_is_named_as_such(capsys, llmao):
    llmao.script(box_path(BOX, "cert"), (403, {"error": {
        "code": "admin_token_wrong", "message": "the admin token is not this server's"}}))
    result = run(capsys, llmao)
    assert result["failed"] is True and "refused the admin token (HTTP 403)" in result["msg"]
