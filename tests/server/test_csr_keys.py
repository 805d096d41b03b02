"""A certificate request's key is judged before its signature is checked (docs/box-tls.md): a
key that costs much to verify with, or is not one llmao signs for, is refused unverified."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from llmao_server.tls.fleet_ca import CsrRefused, read_csr


def request_pem(key) -> str:
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "203.0.113.10")]))
           .sign(key, hashes.SHA256()))
    return csr.public_bytes(serialization.Encoding.PEM).decode("ascii")


def test_an_rsa_key_with_another_exponent_is_refused() -> None:
    pem = request_pem(rsa.generate_private_key(public_exponent=3, key_size=2048))
    with pytest.raises(CsrRefused, match="exponent other than 65537"):
        read_csr(pem)


@pytest.mark.parametrize("key", [
    ec.generate_private_key(ec.SECP256R1()),
    rsa.generate_private_key(public_exponent=65537, key_size=2048),
])
def test_the_allowed_keys_pass(key) -> None:
    assert read_csr(request_pem(key)).is_signature_valid


def test_a_curve_llmao_does_not_sign_for_is_refused() -> None:
    with pytest.raises(CsrRefused, match="curve"):
        read_csr(request_pem(ec.generate_private_key(ec.SECP521R1())))
