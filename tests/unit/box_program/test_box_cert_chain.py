"""A certificate llmao answers is installed only when it chains to the CA the assignment pins and
is for the box's own key (docs/box-tls.md): a server whose CA key was replaced signs leaves
that nothing verifies, and the box refuses them in one line, installing nothing."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from llmao_server.tls.fleet_ca import read_csr, sign_leaf

from .conftest import point_box_at
from .helpers import FakeLlmao, Seen, server_entry
from .test_box_tls import OPENSSL, PushCa, with_tls

CONFIG, CERT, APPLIED = "/vllm/config", "/vllm/cert", "/vllm/applied"
ADDRESS = "10.0.0.5"


def another_key_request() -> str:
    """A certificate request for a key that is not the box's."""
    key = ec.generate_private_key(ec.SECP256R1())
    request = (x509.CertificateSigningRequestBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "x")]))
               .sign(key, hashes.SHA256()))
    return request.public_bytes(serialization.Encoding.PEM).decode()


@dataclass
class SigningLlmao(FakeLlmao):
    """llmao with box TLS: the assignment pins ``pinned``; ``signer`` signs what the box asks
    for (the request it sends, or ``csr`` when a test swaps it), and the answer names the
    pinned CA, as a server whose signing key was replaced would."""

    pinned: PushCa | None = None
    signer: PushCa | None = None
    csr: str | None = None

    def answer(self, request: Seen) -> tuple[int, bytes, dict[str, str]]:
        if request.path == CONFIG:
            doc = with_tls({"ca_sha256": self.pinned.sha256, "leaf_days": 3})
            return 200, json.dumps(doc).encode(), {}
        if request.path == CERT:
            csr = self.csr or json.loads(request.body)["csr"]
            issued = sign_leaf(read_csr(csr), [ADDRESS], self.signer.cert, self.signer.key, 3)
            return 200, json.dumps({
                "certificate": issued.pem, "ca": self.pinned.cert.decode(),
                "not_after": issued.not_after.strftime("%Y-%m-%dT%H:%M:%SZ")}).encode(), {}
        return 200, b"{}", {}


@pytest.fixture
def cas(tmp_path_factory) -> tuple[PushCa, PushCa]:
    return (PushCa(tmp_path_factory.mktemp("pinned")),
            PushCa(tmp_path_factory.mktemp("replaced")))


@pytest.fixture
def signing(box, cas, monkeypatch) -> Iterator[SigningLlmao]:
    assert OPENSSL, "box TLS's tests need the openssl command"
    os.symlink(OPENSSL, box.bin / "openssl")
    box.gpu(24576, 24000)
    with SigningLlmao(pinned=cas[0], signer=cas[0]).serve() as fake:
        point_box_at(fake, monkeypatch)
        yield fake


def tls_files(box) -> list[str]:
    folder = box.data / "llmao" / "tls"
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


def test_a_leaf_of_the_pinned_ca_for_the_box_key_is_installed(signing, box, run_main):
    outcome = run_main()
    assert outcome.rc == 0, outcome.err
    assert tls_files(box) == ["ca.pem", "cert.json", "cert.pem", "key.pem"]
    assert "--ssl-certfile" in box.program(server_entry(0)["name"]).read_text()


def test_a_leaf_another_ca_key_signed_is_refused_and_nothing_installed(signing, cas, box,
                                                                       run_main):
    signing.signer = cas[1]  # same CA name, another key: what a replaced CA key signs
    outcome = run_main()
    assert outcome.rc == 2
    (line,) = outcome.err.strip().splitlines()
    assert "llmao's certificate does not chain to the fleet CA its assignment pins" in line
    assert "(openssl verify: " in line and line.endswith("was llmao's CA key replaced?")
    assert tls_files(box) == ["key.pem"], "no certificate, no CA, nothing staged left"
    assert not any(box.conf.iterdir()) and box.ctl_calls() == []
    assert signing.requests_to(APPLIED) == []


def test_a_leaf_for_another_key_is_refused_and_nothing_installed(signing, box, run_main):
    signing.csr = another_key_request()
    outcome = run_main()
    assert outcome.rc == 2
    assert "llmao's certificate does not fit this box's key" in outcome.err
    assert tls_files(box) == ["key.pem"] and not any(box.conf.iterdir())


def test_the_push_path_refuses_a_leaf_that_does_not_chain_too(signing, cas, box, run_main):
    doc = with_tls({"ca_sha256": cas[0].sha256, "leaf_days": 3})
    pushed = str(box.write_payload(doc))
    csr = json.loads(run_main("--payload", pushed, "--cert-request").out)["csr"]
    forged = {**cas[1].answer(csr), "ca": cas[0].cert.decode()}
    outcome = run_main("--payload", pushed, "--certificate",
                       str(box.write_payload(forged, "answer.json")))
    assert outcome.rc == 2
    assert "does not chain to the fleet CA its assignment pins" in outcome.err
    assert tls_files(box) == ["key.pem"] and box.ctl_calls() == []


def test_a_renewal_that_does_not_chain_leaves_the_certificate_in_use(signing, cas, box,
                                                                    run_main):
    """vLLM reloads whatever lands in cert.pem: a refused renewal must not touch it."""
    assert run_main().rc == 0
    folder = box.data / "llmao" / "tls"
    in_use = {name: (folder / name).read_bytes() for name in ("cert.pem", "ca.pem", "cert.json")}
    meta = json.loads(in_use["cert.json"])
    (folder / "cert.json").write_text(json.dumps({**meta, "not_after": meta["issued_at"]}))
    signing.signer = cas[1]
    outcome = run_main()
    assert outcome.rc == 2 and "does not chain" in outcome.err
    assert "less than a third of its life is left: asking llmao for one" in outcome.out
    assert {name: (folder / name).read_bytes() for name in ("cert.pem", "ca.pem")} == \
        {name: in_use[name] for name in ("cert.pem", "ca.pem")}
    assert tls_files(box) == ["ca.pem", "cert.json", "cert.pem", "key.pem"]
