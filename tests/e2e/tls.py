"""A throwaway CA and a server certificate for the addresses the end-to-end server binds.

Boxes fetch their assignment over verified HTTPS (only loopback may use plain HTTP), and in
these tests they reach llmao at the host's address on the container bridge; so the
certificate names that address, and each box and the controller trust the CA file.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServerTls:
    ca_file: Path
    certfile: Path
    keyfile: Path


def make_server_tls(folder: Path, addresses: list[str]) -> ServerTls:
    """A CA (two days) and a certificate it signed for ``addresses`` (IP SANs), with openssl."""
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=llmao e2e test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr",
            "-subj", f"/CN={addresses[0]}")
    names = ",".join(f"IP:{address}" for address in addresses)
    (folder / "server.ext").write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n"
                                       "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext")
    return ServerTls(folder / "ca.pem", folder / "server.pem", folder / "server.key")
