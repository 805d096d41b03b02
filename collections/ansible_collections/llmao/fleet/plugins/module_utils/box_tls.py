# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``box_tls:``: the fleet CA that signs each box's certificate (docs/box-tls.md).

The core checks the section with the standard library's :mod:`ssl` alone, so that
it stays importable where only PyYAML is (Ansible's module_utils rule): OpenSSL
itself parses the CA, says whether it is a CA, when it expires, and whether the
key is its key. Signing needs more than :mod:`ssl` offers and lives in
llmao-server, the one place the CA key is read for use. The same file also
makes the client context everything that dials a box verifies it with.
"""

from __future__ import annotations

import hashlib
import os
import ssl
import stat
import time
from dataclasses import dataclass, field

from .box_protocol import MAX_LEAF_DAYS
from .field_checks import Section

DEFAULT_LEAF_DAYS = 7


@dataclass(frozen=True)
class BoxTls:
    """A checked ``box_tls`` section: where the CA is, its certificate, how long leaves live."""

    ca_cert: str
    ca_key: str = field(repr=False)
    leaf_days: int
    ca_pem: str = field(repr=False)
    # The SHA-256 of the CA certificate's DER form (hex): what the payload carries, so a
    # new CA is a new revision and each box asks for a certificate from it in its turn.
    ca_sha256: str
    ca_not_after: float
    # Where the LiteLLM proxy reads the fleet CA, when not at ca_cert (another machine).
    litellm_ca_path: str | None = None
    # While the CA is rotated: the CA before, whose certificates boxes not yet renewed still
    # serve, trusted beside ca_cert by everything that dials a box (docs/box-tls.md).
    previous_ca_cert: str | None = None

    def litellm_trust(self) -> str:
        """The CA file the LiteLLM proxy verifies a box against (``ssl_verify``), a path on
        its machine."""
        return self.litellm_ca_path or self.ca_cert

    def trusted(self, ca_path: str | None = None) -> list[str]:
        """The CA files a box's certificate is verified against: ``ca_path`` (else
        ``ca_cert``), and the previous CA while one is set."""
        return [ca_path or self.ca_cert] + ([self.previous_ca_cert]
                                            if self.previous_ca_cert else [])

    def payload(self) -> dict[str, object]:
        """The payload's ``tls`` object: which CA signs, and for how long."""
        return {"ca_sha256": self.ca_sha256, "leaf_days": self.leaf_days}


def read_box_tls(section: Section, config_path: str, warnings: list[str],
                 signer: bool = False) -> BoxTls | None:
    """``box_tls:`` as checked; None when the section is absent or has problems.

    Paths are relative to the config file's folder. Each problem names its key:
    the file that is missing or unreadable, the certificate that is not a CA or
    has expired, the key that does not match it. The key is needed only where
    llmao-server signs (``signer``): a controller that runs reconcile dials boxes
    with the certificate alone, and the key never leaves llmao-server, so there a
    missing key is no problem (a readable one is still checked).
    """
    if not section.mapping:
        section.close()
        return None
    cert_path = section.text("ca_cert", required=True)
    key_path = section.text("ca_key", required=True)
    leaf_days = section.integer("leaf_days", DEFAULT_LEAF_DAYS, maximum=MAX_LEAF_DAYS)
    litellm_ca_path = section.text("litellm_ca_path")
    previous_path = section.text("previous_ca_cert")
    section.close()
    if not cert_path or not key_path:
        return None
    folder = os.path.dirname(os.path.abspath(config_path))
    cert_path, key_path = (os.path.join(folder, p) for p in (cert_path, key_path))
    previous = _previous_ca(section, folder, previous_path, litellm_ca_path)
    with_key = signer or os.access(key_path, os.R_OK)
    readable = [_unreadable(section, key, path)
                for key, path in (("ca_cert", cert_path), ("ca_key", key_path))
                if key == "ca_cert" or with_key]
    if any(readable):
        return None
    checked = _check_ca(section, cert_path, key_path if with_key else None)
    if checked is None or previous is False:
        return None
    pem, not_after = checked
    if with_key and os.stat(key_path).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.append(f"{config_path}: box_tls.ca_key: {key_path} can be read by others "
                        f"than its owner; it signs for the whole fleet: chmod 600 it")
    digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()
    return BoxTls(cert_path, key_path, leaf_days or DEFAULT_LEAF_DAYS, pem, digest, not_after,
                  litellm_ca_path, previous or None)


def _previous_ca(section: Section, folder: str, path: str | None,
                 litellm_ca_path: str | None) -> str | bool | None:
    """``previous_ca_cert`` as checked: its path, None when not set, False on a problem.

    LiteLLM verifies each deployment against one file (``ssl_verify``): while two CAs
    sign boxes, that file must hold both, and only the operator can put it on the
    proxy's machine, so ``litellm_ca_path`` is then required."""
    if not path:
        return None
    path = os.path.join(folder, path)
    if _unreadable(section, "previous_ca_cert", path) or \
            _check_ca(section, path, None, "previous_ca_cert") is None:
        return False
    if not litellm_ca_path:
        section.problem("litellm_ca_path", "with previous_ca_cert, LiteLLM must trust both "
                                           "CAs: give a file holding both certificates "
                                           "(cat ca.pem previous.pem > both.pem) on the "
                                           "LiteLLM proxy's machine")
        return False
    return path


def _unreadable(section: Section, key: str, path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        section.problem(key, f"cannot read {path}: {exc.strerror or exc}")
        return True
    return False


def _check_ca(section: Section, cert_path: str, key_path: str | None,
              key: str = "ca_cert") -> tuple[str, float] | None:
    """The CA's PEM and expiry, or None with the problem recorded under ``key``; the CA key
    too, when given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=cert_path)
    except (ssl.SSLError, ValueError) as exc:
        section.problem(key, f"{cert_path} is not a PEM certificate ({exc})")
        return None
    counts = context.cert_store_stats()
    if counts["x509"] != 1:
        section.problem(key, f"{cert_path} must hold exactly one certificate, "
                             f"it holds {counts['x509']}")
        return None
    cas = context.get_ca_certs()
    if not cas:
        section.problem(key, f"{cert_path} is not a CA certificate (no basic "
                             "constraints CA:TRUE); make one with llmao-fleet-ca init")
        return None
    not_after = ssl.cert_time_to_seconds(cas[0]["notAfter"])
    if not_after <= time.time():
        section.problem(key, f"{cert_path} expired on {cas[0]['notAfter']}; make a new "
                             "CA (docs/box-tls.md, rotating the CA)")
        return None
    try:
        if key_path is not None:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
    except ssl.SSLError as exc:
        why = ("is not the key of box_tls.ca_cert" if exc.reason == "KEY_VALUES_MISMATCH"
               else f"is not a usable private key ({exc.reason or exc})")
        section.problem("ca_key", f"{key_path} {why}")
        return None
    with open(cert_path, encoding="ascii", errors="replace") as handle:
        text = handle.read()
    pem = text[text.index(ssl.PEM_HEADER):]  # OpenSSL read it, so the header is there
    return ssl.DER_cert_to_PEM_cert(ssl.PEM_cert_to_DER_cert(pem)), not_after


def box_context(ca_path: str, *more: str) -> ssl.SSLContext:
    """The client context that dials a box: the fleet CA alone is trusted (and ``more``
    CAs: the previous one while the CA is rotated), and the certificate must name the
    address dialled (chain *and* address)."""
    context = ssl.create_default_context(cafile=ca_path)
    for path in more:
        context.load_verify_locations(cafile=path)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
