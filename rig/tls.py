"""A throwaway CA and a server certificate it signed, made with openssl: for tests and the demo.

Boxes fetch their assignment over verified HTTPS (the box program allows plain HTTP only to
loopback, and a container box reaches llmao over the engine's bridge), so the demo and the tests
serve HTTPS like production does. The CA lives as long as its folder: boxes, reconcile and the
demo's printed `curl` trust it by file (SSL_CERT_FILE, --cacert), never through the system's
trust store.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

CURVE = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


@dataclass(frozen=True)
class ServerTls:
    """The CA certificate clients trust, and the server's certificate and key."""

    ca_file: Path
    certfile: Path
    keyfile: Path

    def server_context(self) -> ssl.SSLContext:
        """A server-side context with the certificate, for a test's own HTTPS server."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certfile, self.keyfile)
        return context


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


def make_server_tls(folder: Path, names: list[str], *, days: int = 2,
                    ca_name: str = "llmao test CA") -> ServerTls:
    """A CA, and a certificate it signed for every name in ``names`` (keys 0600), valid for
    ``days``; the first name is also the certificate's common name."""
    folder.mkdir(parents=True, exist_ok=True)
    previous = os.umask(0o077)  # the keys are created private, not chmod-ed after the fact
    try:
        _openssl(folder, "req", "-x509", *CURVE, "-keyout", "ca.key", "-out", "ca.pem",
                 "-days", str(days), "-subj", f"/CN={ca_name}",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        _openssl(folder, "req", *CURVE, "-keyout", "server.key", "-out", "server.csr",
                 "-subj", f"/CN={names[0]}")
        (folder / "server.ext").write_text(
            f"subjectAltName={subject_alt_names(names)}\nextendedKeyUsage=serverAuth\n"
            "basicConstraints=CA:FALSE\n")
        _openssl(folder, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey",
                 "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", str(days),
                 "-extfile", "server.ext")
    finally:
        os.umask(previous)
    (folder / "ca.pem").chmod(0o644)  # the CA certificate is public: boxes read it
    return ServerTls(folder / "ca.pem", folder / "server.pem", folder / "server.key")
