"""The payload's ``tls`` object and when the box asks for a certificate (docs/box-tls.md)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import ssl
import stat
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from llmao_server.fleet_ca_cli import init
from llmao_server.tls.fleet_ca import read_csr, sign_leaf

from .helpers import payload, server_entry

DIGEST = "ab" * 32
# Found before a test box narrows PATH to its fakes.
OPENSSL = shutil.which("openssl")


def with_tls(tls):
    return {**payload(server_entry(0)), "tls": tls}


def test_tls_is_read_and_kept_in_the_applied_record(install_set):
    assignment = install_set.validate_assignment(
        with_tls({"ca_sha256": DIGEST, "leaf_days": 7}))
    assert assignment.tls == install_set.BoxTls(DIGEST, 7)
    record = install_set.build_record(assignment, {}, "2026-12-01T00:00:00Z")
    assert record["tls"] == {"ca_sha256": DIGEST, "leaf_days": 7}


@pytest.mark.parametrize("tls", [
    {"ca_sha256": DIGEST}, {"ca_sha256": DIGEST, "leaf_days": 0},
    {"ca_sha256": DIGEST, "leaf_days": 91}, {"ca_sha256": DIGEST, "leaf_days": True},
    {"ca_sha256": DIGEST.upper(), "leaf_days": 7}, {"ca_sha256": DIGEST, "leaf_days": 7, "x": 1},
    "on",
])
def test_a_malformed_tls_object_refuses_the_assignment(install_set, tls):
    with pytest.raises(install_set.Refused, match="assignment.tls"):
        install_set.validate_assignment(with_tls(tls))


def test_the_vllm_command_serves_https_only_with_tls(install_set, tmp_path):
    server = install_set.validate_assignment(payload(server_entry(0))).servers[0]
    plain = install_set.vllm_argv(server, None, "vllm")
    assert not any(arg.startswith("--ssl") for arg in plain)
    secure = install_set.vllm_argv(server, None, "vllm", tls_dir=tmp_path)
    assert secure[-5:] == ["--ssl-keyfile", str(tmp_path / "key.pem"), "--ssl-certfile",
                           str(tmp_path / "cert.pem"), "--enable-ssl-refresh"]


def settings_at(install_set, data):
    return install_set.read_settings({"DATA_DIRECTORY": str(data)}, fetching=False)


def test_a_certificate_is_due_when_missing_from_another_ca_or_in_its_last_third(install_set,
                                                                              tmp_path):
    settings = settings_at(install_set, tmp_path)
    tls = install_set.BoxTls(DIGEST, 3)
    due = install_set.certificate_due
    assert due(settings, tls, 0) == "no certificate yet"
    settings.tls_dir.mkdir(parents=True)
    for name in ("key.pem", "cert.pem"):
        (settings.tls_dir / name).write_text("x")
    assert due(settings, tls, 0) == "what the box knew of its certificate is lost"
    meta = {"issued_at": 0, "not_after": 3000, "ca_sha256": DIGEST}
    (settings.tls_dir / "cert.json").write_text(json.dumps(meta))
    assert due(settings, tls, 1999) is None
    assert due(settings, tls, 2000) == "less than a third of its life is left"
    assert due(settings, install_set.BoxTls("cd" * 32, 3), 0) == "the fleet CA changed"


def test_a_pushed_assignment_with_tls_is_refused_before_anything_is_written(box, run_main):
    outcome = run_main("--payload", str(box.write_payload(
        with_tls({"ca_sha256": DIGEST, "leaf_days": 7}))))
    assert outcome.rc != 0
    refusal = [line for line in outcome.err.splitlines() if "box TLS" in line]
    assert len(refusal) == 1 and "--cert-request" in refusal[0] and "--certificate" \
        in refusal[0]
    assert "no certificate yet" in refusal[0] and "Traceback" not in outcome.err
    assert box.snapshot() == {} and box.ctl_calls() == [], "nothing written, nothing handed over"


# ------------------------------------------------ the push path: --cert-request, --certificate


class PushCa:
    """A fleet CA on the controller's side, signing what a pushed box requests."""

    def __init__(self, folder: Path):
        cert, key = init(str(folder), "push test CA")
        self.cert, self.key = Path(cert).read_bytes(), Path(key).read_bytes()
        self.sha256 = hashlib.sha256(ssl.PEM_cert_to_DER_cert(self.cert.decode())).hexdigest()

    def answer(self, csr: str) -> dict:
        issued = sign_leaf(read_csr(csr), ["10.0.0.5"], self.cert, self.key, 3)
        return {"certificate": issued.pem, "ca": self.cert.decode(),
                "not_after": issued.not_after.strftime("%Y-%m-%dT%H:%M:%SZ")}


@pytest.fixture
def pushed(box, tmp_path):
    """A box with the openssl command, a CA, and the assignment that names it."""
    assert OPENSSL, "the push path's tests need the openssl command"
    os.symlink(OPENSSL, box.bin / "openssl")
    box.gpu(24576, 24000)
    box.supervisorctl(0)
    ca = PushCa(tmp_path / "ca")
    return box, ca, box.write_payload(with_tls({"ca_sha256": ca.sha256, "leaf_days": 3}))


def test_the_box_makes_its_key_and_prints_only_the_request(pushed, run_main):
    box, ca, payload_path = pushed
    dry = run_main("--payload", str(payload_path), "--cert-request", "--dry-run")
    assert json.loads(dry.out) == {"tls": True, "due": "no certificate yet", "csr": None}
    assert not (box.data / "llmao" / "tls" / "key.pem").exists()
    outcome = run_main("--payload", str(payload_path), "--cert-request")
    assert outcome.rc == 0, outcome.err
    answer = json.loads(outcome.out)
    assert answer["due"] == "no certificate yet"
    key = box.data / "llmao" / "tls" / "key.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert "PRIVATE KEY" not in outcome.out + outcome.err
    request = x509.load_pem_x509_csr(answer["csr"].encode())
    assert request.is_signature_valid
    kept = serialization.load_pem_private_key(key.read_bytes(), password=None)
    assert request.public_key().public_numbers() == kept.public_key().public_numbers()
    # asked again (an answer was lost), the box makes a new request for the same key
    before = key.read_bytes()
    assert json.loads(run_main("--payload", str(payload_path), "--cert-request").out)["csr"]
    assert key.read_bytes() == before


def test_the_answer_given_is_kept_and_the_apply_proceeds(pushed, run_main, install_set):
    box, ca, payload_path = pushed
    csr = json.loads(run_main("--payload", str(payload_path), "--cert-request").out)["csr"]
    answer = box.write_payload(ca.answer(csr), "answer.json")
    outcome = run_main("--payload", str(payload_path), "--certificate", str(answer), "--json")
    assert outcome.rc == 0, outcome.err
    folder = box.data / "llmao" / "tls"
    assert (folder / "ca.pem").read_bytes() == ca.cert
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(folder / "cert.pem",
                                                            folder / "key.pem")
    settings = settings_at(install_set, box.data)
    assert install_set.certificate_due(settings, install_set.BoxTls(ca.sha256, 3),
                                       time.time()) is None
    assert f"--ssl-certfile {folder / 'cert.pem'}" in box.program("model-0").read_text()
    again = run_main("--payload", str(payload_path), "--cert-request")
    assert json.loads(again.out) == {"tls": True, "due": None, "csr": None}


def test_an_answer_from_another_ca_or_for_another_key_is_not_kept(pushed, run_main, tmp_path):
    box, ca, payload_path = pushed
    csr = json.loads(run_main("--payload", str(payload_path), "--cert-request").out)["csr"]
    other = PushCa(tmp_path / "other")
    for name, doc in (("other-ca.json", other.answer(csr)),
                      ("garbage.json", {"certificate": "x", "ca": "y"})):
        outcome = run_main("--payload", str(payload_path), "--certificate",
                           str(box.write_payload(doc, name)))
        assert outcome.rc == 2 and "Traceback" not in outcome.err
        assert not (box.data / "llmao" / "tls" / "cert.pem").exists()
        assert box.ctl_calls() == []
