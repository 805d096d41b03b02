"""A throwaway CA and a server certificate for the demo's llmao-server, made with openssl.

Boxes fetch their assignment over verified HTTPS (the box program allows plain HTTP only to
loopback, and a container box reaches llmao over the engine's bridge), so the demo serves HTTPS
like production does. The CA lives for the demo only: boxes, reconcile and the printed `curl`
trust it by file (SSL_CERT_FILE, --cacert), never through the system's trust store.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

VALID_DAYS = "30"
CURVE = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


@dataclass(frozen=True)
class DemoTls:
    ca_file: Path
    certfile: Path
    keyfile: Path


class TlsError(RuntimeError):
    """openssl failed; the message carries its stderr."""


def _openssl(folder: Path, *args: str) -> None:
    done = subprocess.run(["openssl", *args], cwd=folder, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise TlsError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def subject_alt_names(names: list[str]) -> str:
    """`IP:` for addresses, `DNS:` for host names: clients check whichever they dialled."""
    def one(name: str) -> str:
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return f"DNS:{name}"
        return f"IP:{name}"

    return ",".join(one(name) for name in names)


def make_demo_tls(folder: Path, names: list[str]) -> DemoTls:
    """A CA, and a certificate it signed for every name in ``names`` (keys 0600)."""
    folder.mkdir(parents=True, exist_ok=True)
    previous = os.umask(0o077)  # the keys are created private, not chmod-ed after the fact
    try:
        _openssl(folder, "req", "-x509", *CURVE, "-keyout", "ca.key", "-out", "ca.pem",
                 "-days", VALID_DAYS, "-subj", "/CN=llmao demo CA",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        _openssl(folder, "req", *CURVE, "-keyout", "server.key", "-out", "server.csr",
                 "-subj", f"/CN={names[0]}")
        (folder / "server.ext").write_text(
            f"subjectAltName={subject_alt_names(names)}\nextendedKeyUsage=serverAuth\n"
            "basicConstraints=CA:FALSE\n")
        _openssl(folder, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey",
                 "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", VALID_DAYS,
                 "-extfile", "server.ext")
    finally:
        os.umask(previous)
    (folder / "ca.pem").chmod(0o644)  # the CA certificate is public: boxes read it
    return DemoTls(folder / "ca.pem", folder / "server.pem", folder / "server.key")
