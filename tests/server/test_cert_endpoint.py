"""POST /vllm/cert: a bound box's request signed for the addresses llmao attributes to it,
and every other request refused with nothing signed (docs/box-tls.md)."""

from __future__ import annotations

import json
import logging
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtensionOID
from flask.testing import FlaskClient

from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import box_path
from llmao_server.boxes.box_certs import CERT_REQUESTS_PER_HOUR
from llmao_server.fleet_ca_cli import KEY_FILE, init
from llmao_server.state import app_state
from llmao_server.store import ReconcilePass
from tests.server.fleet_pair import ADMIN_TOKEN, KNOWN, OTHER_KNOWN, box_headers, config
from tests.server.test_admin_api import admin
from tests.tls_files import csr_pem

NAMED = "gpu-a"  # a box named by its provider id: its address comes from a listing


def tls_config(folder: Path, **changes: Any) -> dict[str, Any]:
    cert, key = init(str(folder / "ca"), "test fleet CA")
    document = config(**changes)
    document["box_tls"] = {"ca_cert": cert, "ca_key": key, "leaf_days": 3}
    return document


class Box:
    """A box of the test fleet: fetches once (binding its name), then asks for certificates."""

    def __init__(self, client: FlaskClient, name: str = KNOWN):
        self.client, self.name = client, name
        fetched = client.get("/vllm/config", headers=box_headers(host=name))
        assert fetched.status_code == 200
        self.token = fetched.headers["X-LLMAO-Box-Token"]

    def ask(self, body: Any, token: str | None = "mine"):
        headers = {**box_headers(host=self.name), "Content-Type": "application/json"}
        if token is not None:
            headers["X-LLMAO-Box-Token"] = self.token if token == "mine" else token
        data = body if isinstance(body, bytes) else json.dumps(body)
        return self.client.post("/vllm/cert", data=data, headers=headers)


@pytest.fixture
def tls_client(make_app, tmp_path) -> FlaskClient:
    hosts = {KNOWN: [["gemma", 8001]], OTHER_KNOWN: [["qwen", 8001]], NAMED: [["qwen", 8001]]}
    return make_app(tls_config(tmp_path, hosts=hosts, legacy_servers=None)).test_client()


def test_a_bound_box_gets_a_leaf_for_its_address_that_verifies_against_the_ca(tls_client,
                                                                              tmp_path):
    box = Box(tls_client)
    answer = box.ask({"csr": csr_pem(KNOWN)})
    assert answer.status_code == 200, answer.json
    leaf = x509.load_pem_x509_certificate(answer.json["certificate"].encode())
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == [KNOWN]
    assert names.get_values_for_type(x509.DNSName) == []
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    assert 3 * 86400 <= lifetime.total_seconds() <= 3 * 86400 + 600
    assert answer.json["not_after"] == leaf.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert answer.json["ca"] == (tmp_path / "ca" / "ca.pem").read_text()
    # the chain verifies with the standard library against the fleet CA alone
    store = ssl.create_default_context(cadata=answer.json["ca"])
    assert store.cert_store_stats()["x509_ca"] == 1
    ca = x509.load_pem_x509_certificate(answer.json["ca"].encode())
    leaf.verify_directly_issued_by(ca)


def test_a_request_without_names_gets_the_attributed_address(tls_client):
    key = ec.generate_private_key(ec.SECP256R1())
    bare = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
            .sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode())
    answer = Box(tls_client).ask({"csr": bare})
    assert answer.status_code == 200
    leaf = x509.load_pem_x509_certificate(answer.json["certificate"].encode())
    assert leaf.public_key().public_numbers() == key.public_key().public_numbers()


def test_another_boxes_address_is_refused(tls_client):
    answer = Box(tls_client).ask({"csr": csr_pem(KNOWN, OTHER_KNOWN)})
    assert answer.status_code == 403
    assert answer.json["error"]["code"] == "address_not_attributed"
    assert OTHER_KNOWN in answer.json["error"]["message"]
    assert "certificate" not in answer.json


def test_a_box_named_by_id_gets_the_address_of_the_last_listing(tls_client):
    box = Box(tls_client, NAMED)
    refused = box.ask({"csr": csr_pem("10.9.8.7")})
    assert (refused.status_code, refused.json["error"]["code"]) == (409, "no_address_yet")
    now = time.time()
    verdict = {"box": NAMED, "public": "10.9.8.7:31001", "state": "healthy"}
    app_state(tls_client.application).store.record_pass(
        ReconcilePass(now, {"gpu-a:8001:qwen": verdict}, (), now))
    assert box.ask({"csr": csr_pem("10.9.8.7")}).status_code == 200
    assert box.ask({"csr": csr_pem("10.9.8.8")}).status_code == 403


def test_requests_decode_a_stored_pass_once(tls_client, monkeypatch):
    box = Box(tls_client, NAMED)
    store = app_state(tls_client.application).store
    now = time.time()
    store.record_pass(ReconcilePass(now, {"gpu-a:8001:qwen": {
        "box": NAMED, "public": "10.9.8.7:31001", "state": "healthy"}}, (), now))
    reads = []
    read = store.last_pass
    monkeypatch.setattr(store, "last_pass", lambda: reads.append(1) or read())
    assert box.ask({"csr": csr_pem("10.9.8.7")}).status_code == 200
    assert box.ask({"csr": csr_pem("10.9.8.8")}).status_code == 403
    assert len(reads) == 1
    store.record_pass(ReconcilePass(now + 1, {"gpu-a:8001:qwen": {
        "box": NAMED, "public": "10.9.8.8:31001", "state": "healthy"}}, (), now + 1))
    assert box.ask({"csr": csr_pem("10.9.8.8")}).status_code == 200
    assert len(reads) == 2


def test_a_box_listed_at_an_ipv6_address_gets_it_without_brackets(tls_client):
    box = Box(tls_client, NAMED)
    now = time.time()
    verdict = {"box": NAMED, "public": "[2001:db8::7]:31001", "state": "healthy"}
    app_state(tls_client.application).store.record_pass(
        ReconcilePass(now, {"gpu-a:8001:qwen": verdict}, (), now))
    answer = box.ask({"csr": csr_pem("2001:db8::7")})
    assert answer.status_code == 200, answer.json
    leaf = x509.load_pem_x509_certificate(answer.json["certificate"].encode())
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["2001:db8::7"]


@pytest.mark.parametrize(("key", "why"), [
    (lambda: rsa.generate_private_key(65537, 1024), "RSA key of 1024 bits is not allowed"),
    (lambda: ec.generate_private_key(ec.SECP521R1()), "curve secp521r1 is not allowed"),
])
def test_a_key_outside_the_allowed_set_is_refused(tls_client, key, why):
    answer = Box(tls_client).ask({"csr": csr_pem(KNOWN, key=key())})
    assert (answer.status_code, answer.json["error"]["code"]) == (400, "bad_csr")
    assert why in answer.json["error"]["message"]


def der(tag: int, body: bytes) -> bytes:
    """One DER element (tag, length, body)."""
    size = len(body)
    if size < 0x80:
        return bytes([tag, size]) + body
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + body


def raw_csr(*extensions: bytes, duplicate: bool = False) -> str:
    """A correctly signed request whose subject alternative name extension holds ``extensions``
    as raw DER (what ``openssl req -addext subjectAltName=DER:...`` makes); ``duplicate`` turns
    its issuer alternative name into a second subject alternative name."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
    for value in extensions:
        builder = builder.add_extension(x509.UnrecognizedExtension(
            ExtensionOID.SUBJECT_ALTERNATIVE_NAME, value), critical=False)
    if duplicate:
        for kind in (x509.SubjectAlternativeName, x509.IssuerAlternativeName):
            builder = builder.add_extension(kind([x509.DNSName("box.example")]),
                                            critical=False)
    info = builder.sign(key, hashes.SHA256()).tbs_certrequest_bytes
    if duplicate:  # 2.5.29.18 (issuer) becomes 2.5.29.17 (subject): same length, re-signed
        info = info.replace(b"\x06\x03\x55\x1d\x12", b"\x06\x03\x55\x1d\x11")
    signature = key.sign(info, ec.ECDSA(hashes.SHA256()))
    ecdsa_sha256 = der(0x30, der(0x06, bytes.fromhex("2a8648ce3d040302")))
    request = der(0x30, info + ecdsa_sha256 + der(0x03, b"\x00" + signature))
    return x509.load_der_x509_csr(request).public_bytes(serialization.Encoding.PEM).decode()


@pytest.mark.parametrize("csr", [
    pytest.param(lambda: raw_csr(bytes.fromhex("0403010203")), id="not-a-name-sequence"),
    pytest.param(lambda: raw_csr(bytes.fromhex("3002a300")), id="x400-address"),
    pytest.param(lambda: raw_csr(duplicate=True), id="two-subject-alternative-names"),
])
def test_a_request_whose_extensions_do_not_parse_is_refused(tls_client, csr):
    answer = Box(tls_client).ask({"csr": csr()})
    assert (answer.status_code, answer.json["error"]["code"]) == (400, "bad_csr")
    assert "extensions cannot be read" in answer.json["error"]["message"]


def test_a_request_on_an_unknown_curve_is_refused(tls_client):
    key = ec.generate_private_key(ec.SECP256R1())
    request = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
               .sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER))
    # prime256v1 (1.2.840.10045.3.1.7) becomes 1.2.840.10045.3.1.9, a curve nobody knows
    odd = request.replace(bytes.fromhex("2a8648ce3d030107"), bytes.fromhex("2a8648ce3d030109"))
    pem = x509.load_der_x509_csr(odd).public_bytes(serialization.Encoding.PEM).decode()
    answer = Box(tls_client).ask({"csr": pem})
    assert (answer.status_code, answer.json["error"]["code"]) == (400, "bad_csr")
    assert "key cannot be read" in answer.json["error"]["message"]


@pytest.mark.parametrize("body", [{"csr": "not a request"}, {"csr": 1}, [],
                                  {"csr": "x", "key": "y"}])
def test_malformed_requests_are_refused(tls_client, body):
    assert Box(tls_client).ask(body).status_code == 400


def test_a_huge_request_is_refused(tls_client):
    answer = Box(tls_client).ask(json.dumps({"csr": "A" * 100_000}).encode())
    assert answer.status_code == 413


def test_a_flood_is_refused_after_a_few_an_hour(tls_client):
    box = Box(tls_client)
    for _ in range(CERT_REQUESTS_PER_HOUR):
        assert box.ask({"csr": csr_pem(KNOWN)}).status_code == 200
    answer = box.ask({"csr": csr_pem(KNOWN)})
    assert (answer.status_code, answer.json["error"]["code"]) == (429, "cert_rate_limited")
    assert 0 < int(answer.headers["Retry-After"]) <= 3600
    # another box keeps its own budget
    assert Box(tls_client, OTHER_KNOWN).ask({"csr": csr_pem(OTHER_KNOWN)}).status_code == 200


def test_the_box_token_is_required(tls_client):
    box = Box(tls_client)
    assert box.ask({"csr": csr_pem(KNOWN)}, token=None).json["error"]["code"] == \
        "box_token_required"
    assert box.ask({"csr": csr_pem(KNOWN)}, token="x" * 43).status_code == 403


def test_without_box_tls_there_is_no_certificate(client):
    answer = Box(client).ask({"csr": csr_pem(KNOWN)})
    assert (answer.status_code, answer.json["error"]["code"]) == (404, "box_tls_off")


# ------------------------------------------- the push path: the controller asks for the box


def sign_as_controller(client: FlaskClient, box: str, body: Any, token: str = ADMIN_TOKEN):
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.post(box_path(box, "cert"), data=data,
                       headers={**admin(token), "Content-Type": "application/json"})


def test_the_controller_gets_a_pushed_boxs_certificate_and_the_audit_names_it(tls_client,
                                                                              caplog):
    with caplog.at_level(logging.INFO, logger="llmao_server.audit"):
        answer = sign_as_controller(tls_client, KNOWN, {"csr": csr_pem(KNOWN)})
    assert answer.status_code == 200, answer.json
    assert answer.headers["Cache-Control"] == "no-store"
    leaf = x509.load_pem_x509_certificate(answer.json["certificate"].encode())
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == [KNOWN]
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(answer.json["ca"].encode()))
    lines = [r.getMessage() for r in caplog.records if "box_cert" in r.getMessage()]
    assert len(lines) == 1
    assert "outcome=issued who='admin-api'" in lines[0] and f"box='{KNOWN}'" in lines[0]


@pytest.mark.parametrize(("body", "status", "code"), [
    (lambda: {"csr": csr_pem(KNOWN, OTHER_KNOWN)}, 403, "address_not_attributed"),
    (lambda: {"csr": csr_pem(KNOWN, key=rsa.generate_private_key(65537, 1024))}, 400,
     "bad_csr"),
    (lambda: {"csr": "x", "key": "y"}, 400, "bad_cert_request"),
    (lambda: json.dumps({"csr": "A" * 100_000}).encode(), 413, "too_large"),
])
def test_the_controller_is_refused_as_a_box_is(tls_client, body, status, code):
    answer = sign_as_controller(tls_client, KNOWN, body())
    assert (answer.status_code, answer.json["error"]["code"]) == (status, code)
    assert "certificate" not in answer.json


def test_a_box_named_by_id_waits_for_its_listing_on_the_push_path_too(tls_client):
    answer = sign_as_controller(tls_client, NAMED, {"csr": csr_pem("10.9.8.7")})
    assert (answer.status_code, answer.json["error"]["code"]) == (409, "no_address_yet")


def test_the_controller_has_an_hourly_budget_no_box_can_spend(tls_client):
    box = Box(tls_client)
    for _ in range(CERT_REQUESTS_PER_HOUR):
        assert box.ask({"csr": csr_pem(KNOWN)}).status_code == 200
    assert box.ask({"csr": csr_pem(KNOWN)}).status_code == 429
    for _ in range(CERT_REQUESTS_PER_HOUR):
        signed = sign_as_controller(tls_client, KNOWN, {"csr": csr_pem(KNOWN)})
        assert signed.status_code == 200
    answer = sign_as_controller(tls_client, KNOWN, {"csr": csr_pem(KNOWN)})
    assert (answer.status_code, answer.json["error"]["code"]) == (429, "cert_rate_limited")


def test_the_push_path_needs_the_admin_token_and_a_served_box(tls_client):
    wrong = sign_as_controller(tls_client, KNOWN, {"csr": csr_pem(KNOWN)}, token="x" * 40)
    assert wrong.status_code == 403
    unknown = sign_as_controller(tls_client, "10.200.0.9", {"csr": csr_pem("10.200.0.9")})
    assert (unknown.status_code, unknown.json["error"]["code"]) == (404, "unknown_host")


def test_without_box_tls_the_controller_gets_no_certificate(client):
    answer = sign_as_controller(client, KNOWN, {"csr": csr_pem(KNOWN)})
    assert (answer.status_code, answer.json["error"]["code"]) == (404, "box_tls_off")


def test_a_ca_key_replaced_on_disk_after_load_signs_nothing(tls_client, tmp_path):
    """The CA key is read once, with the app: a key written over it later never signs, and
    every leaf answered chains to the CA the payload pins."""
    key_path = tmp_path / "ca" / KEY_FILE
    other = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    assert key_path.exists()
    key_path.write_bytes(other)
    answer = Box(tls_client).ask({"csr": csr_pem(KNOWN)})
    assert answer.status_code == 200
    leaf = x509.load_pem_x509_certificate(answer.json["certificate"].encode())
    ca = x509.load_pem_x509_certificate(answer.json["ca"].encode())
    leaf.verify_directly_issued_by(ca)
