"""``llmao-fleet-ca init --dir DIR``: make the fleet CA that box TLS signs with.

Writes ``ca.pem`` (the certificate, world-readable: every client that dials a
box trusts it) and ``ca.key`` (mode 0600: it signs for the whole fleet). An
existing CA is never overwritten: rotating one is a deliberate, documented act
(docs/box-tls.md).
"""

from __future__ import annotations

import argparse
import os
import sys

from .tls.fleet_ca import make_ca

CERT_FILE = "ca.pem"
KEY_FILE = "ca.key"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="llmao-fleet-ca",
        description="Make the CA that signs each box's certificate (box_tls in config.yaml).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    init = commands.add_parser("init", help="write a new CA: DIR/ca.pem and DIR/ca.key (0600)")
    init.add_argument("--dir", required=True, help="the folder to write into (created 0700)")
    init.add_argument("--name", default="llmao fleet CA", help="the CA's common name")
    return parser.parse_args(argv)


def write_new(path: str, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` from the start; an existing file is an error."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


def init(folder: str, name: str) -> tuple[str, str]:
    """Write a new CA into ``folder``; the paths of the certificate and the key."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    cert_path, key_path = os.path.join(folder, CERT_FILE), os.path.join(folder, KEY_FILE)
    for path in (cert_path, key_path):
        if os.path.exists(path):
            raise FileExistsError(f"{path} exists; a CA is never overwritten (rotating one: "
                                  "docs/box-tls.md)")
    cert, key = make_ca(name)
    write_new(key_path, key, 0o600)
    write_new(cert_path, cert, 0o644)
    return cert_path, key_path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cert_path, key_path = init(args.dir, args.name)
    except OSError as exc:
        print(f"llmao-fleet-ca: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {cert_path} and {key_path} (0600). In config.yaml:\n"
          f"box_tls:\n  ca_cert: {os.path.abspath(cert_path)}\n"
          f"  ca_key: {os.path.abspath(key_path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
