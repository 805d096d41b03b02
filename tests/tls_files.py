"""A fleet CA and box certificates for tests, made with llmao's own signing code."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from llmao_server.tls.fleet_ca import make_ca, read_csr, sign_leaf


@dataclass(frozen=True)
class TestCa:
    cert: Path
    key: Path

    def leaf(self, folder: Path, *addresses: str, days: int = 7) -> tuple[Path, Path]:
        """A key (0600) and a certificate naming ``addresses``, as a box would hold them."""
        folder.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        request = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
                   .sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
        issued = sign_leaf(read_csr(request.decode()), list(addresses),
                           self.cert.read_bytes(), self.key.read_bytes(), days)
        key_path, cert_path = folder / "key.pem", folder / "cert.pem"
        write_atomically(key_path, key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()), 0o600)
        write_atomically(cert_path, issued.pem.encode(), 0o644)
        return key_path, cert_path


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    staged = path.with_name(f".{path.name}.new")
    staged.write_bytes(data)
    os.chmod(staged, mode)
    os.replace(staged, path)


def make_test_ca(folder: Path, name: str = "test fleet CA") -> TestCa:
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = make_ca(name)
    write_atomically(folder / "ca.pem", cert, 0o644)
    write_atomically(folder / "ca.key", key, 0o600)
    return TestCa(folder / "ca.pem", folder / "ca.key")


def csr_pem(*names: str, key: Any = None) -> str:
    """A box's certificate request (PEM) naming ``names``, made with ``key`` (a new P-256
    key by default)."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    alternative = [x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit()
                   else x509.DNSName(n) for n in names]
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else "box")]))
    if alternative:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()
