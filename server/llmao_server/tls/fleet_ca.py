"""The fleet CA: making one, and signing a box's certificate request (docs/box-tls.md).

The CA key is read here and nowhere else; it never leaves llmao-server. A leaf
names only the addresses it is given (the caller decides which are the box's),
is good for server authentication alone, and cannot sign anything itself.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import is_ip_address

CA_YEARS = 10
# A request is signed when its key is one of these: EC on the NIST curves of 256 bits and
# more, Ed25519, or RSA of 2048 to 4096 bits. Anything else is refused, never signed.
ALLOWED_CURVES = (ec.SECP256R1, ec.SECP384R1)
RSA_EXPONENT = 65537
RSA_BITS = (2048, 4096)
# The leaf is valid from a little before now, so that a box whose clock is behind accepts it.
BACKDATE = datetime.timedelta(minutes=5)


class CsrRefused(ValueError):
    """A certificate request that is not signed; the message says why, for the box."""


@dataclass(frozen=True)
class IssuedCertificate:
    pem: str
    not_after: datetime.datetime
    serial: int


def make_ca(common_name: str) -> tuple[bytes, bytes]:
    """A new CA: its certificate and its key (PKCS#8, unencrypted), both PEM.

    EC P-256, valid for :data:`CA_YEARS` years, allowed to sign certificates and
    nothing else, and only leaves (path length 0).
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    public = key.public_key()
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=365 * CA_YEARS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def read_csr(pem: str) -> x509.CertificateSigningRequest:
    """The request, its key one of the allowed set, then its own signature checked: the key
    is judged first, so that a request whose key costs much to verify with (a huge RSA
    exponent or size) is refused before any work is spent on it."""
    try:
        csr = x509.load_pem_x509_csr(pem.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise CsrRefused("csr is not a PEM certificate request") from None
    try:
        key = csr.public_key()
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise CsrRefused(f"the request's key cannot be read: {exc}") from None
    check_key(key)
    try:
        signed = csr.is_signature_valid
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise CsrRefused(f"the request's signature cannot be read: {exc}") from None
    if not signed:
        raise CsrRefused("the request's signature does not verify with its own key")
    return csr


def check_key(key: object) -> None:
    """A box key llmao signs for: EC P-256 or P-384, Ed25519, or RSA of 2048 or 4096 bits
    with the public exponent 65537."""
    if isinstance(key, ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ALLOWED_CURVES):
            raise CsrRefused(f"EC curve {key.curve.name} is not allowed; use prime256v1 "
                             "(P-256) or secp384r1")
    elif isinstance(key, rsa.RSAPublicKey):
        if key.key_size not in RSA_BITS:
            raise CsrRefused(f"an RSA key of {key.key_size} bits is not allowed; use EC "
                             "P-256 (or RSA of 2048 or 4096 bits)")
        if key.public_numbers().e != RSA_EXPONENT:
            raise CsrRefused(f"an RSA public exponent other than {RSA_EXPONENT} is not "
                             "allowed; use EC P-256")
    elif not isinstance(key, ed25519.Ed25519PublicKey):
        raise CsrRefused(f"a {type(key).__name__} key is not allowed; use EC P-256")


def requested_names(csr: x509.CertificateSigningRequest) -> set[str]:
    """Every address the request asks for: its subject alternative names and common name."""
    names: set[str] = set()
    try:
        extensions = csr.extensions
    except (ValueError, x509.DuplicateExtension, x509.UnsupportedGeneralNameType) as exc:
        # A request whose extensions do not parse is the box's mistake, never a server error.
        raise CsrRefused(f"the request's extensions cannot be read: {exc}") from None
    try:
        san = extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = None
    if san is not None:
        for entry in san:
            if isinstance(entry, x509.IPAddress):
                names.add(str(entry.value))
            elif isinstance(entry, x509.DNSName):
                names.add(entry.value.lower())
            else:
                raise CsrRefused(f"a {type(entry).__name__} name is not allowed; ask for IP "
                                 "addresses and DNS names only")
    for attribute in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME):
        names.add(str(attribute.value).lower())
    return names


def sign_leaf(csr: x509.CertificateSigningRequest, addresses: list[str], ca_cert_pem: bytes,
              ca_key_pem: bytes, days: int) -> IssuedCertificate:
    """A certificate for the request's key naming ``addresses`` (and nothing the request
    said beyond them), valid ``days`` days but never past the CA."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    now = datetime.datetime.now(datetime.UTC)
    not_after = min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc)
    alternative = [x509.IPAddress(ipaddress.ip_address(a)) if is_ip_address(a) else x509.DNSName(a)
                   for a in addresses]
    public = csr.public_key()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, addresses[0])]))
            .issuer_name(ca_cert.subject).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, None if isinstance(ca_key, ed25519.Ed25519PrivateKey)
                  else hashes.SHA256()))
    return IssuedCertificate(cert.public_bytes(serialization.Encoding.PEM).decode("ascii"),
                             not_after, cert.serial_number)


class CaSigner:
    """The fleet CA as llmao-server signs with it: its certificate (the one the payload pins)
    and its key, read once when the app loads and checked to belong together, so a key
    replaced on disk later never signs a leaf that does not chain. Each leaf is verified
    against the CA before it is answered."""

    def __init__(self, ca_pem: str, key_path: str):
        self.ca_pem = ca_pem.encode("ascii")
        self.ca_cert = x509.load_pem_x509_certificate(self.ca_pem)
        with open(key_path, "rb") as handle:
            self.key_pem = handle.read()
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        public = serialization.PublicFormat.SubjectPublicKeyInfo
        if (key.public_key().public_bytes(serialization.Encoding.DER, public)
                != self.ca_cert.public_key().public_bytes(serialization.Encoding.DER, public)):
            raise ValueError(f"{key_path} is not the key of the fleet CA certificate")

    def sign(self, csr: x509.CertificateSigningRequest, addresses: list[str],
             days: int) -> IssuedCertificate:
        issued = sign_leaf(csr, addresses, self.ca_pem, self.key_pem, days)
        leaf = x509.load_pem_x509_certificate(issued.pem.encode("ascii"))
        leaf.verify_directly_issued_by(self.ca_cert)  # raises: never answered unchained
        return issued
