"""``llmao-server``: check the fleet, then serve it under gunicorn.

Everything that can be wrong before serving is found before binding: the
fleet files (the core's message, no traceback), the TLS pair, the state store.
Plain HTTP is for loopback only; boxes fetch over HTTPS.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet

from .app import create_app
from .gunicorn_app import READ_TIMEOUT_S, GunicornServer, gunicorn_options
from .logs import log_to_stderr
from .store import StoreError, open_store

PROG = "llmao-server"


class Refused(Exception):
    """The server will not start; the message says why and what to do."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Serve GET /vllm/config and POST /vllm/applied for a fleet.")
    parser.add_argument("--config", required=True, help="config.yaml")
    parser.add_argument("--models", required=True, help="models.yaml")
    parser.add_argument("--bind", required=True, metavar="HOST:PORT",
                        help="address to listen on, e.g. 0.0.0.0:8443 or [::1]:8080")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes (2)")
    parser.add_argument("--certfile", help="TLS certificate chain (PEM)")
    parser.add_argument("--keyfile", help="TLS private key (PEM)")
    parser.add_argument("--state", metavar="PATH_OR_URL",
                        help="state store: a SQLite file or a postgresql:// URL, "
                             "overriding server.state")
    parser.add_argument("--read-timeout", type=int, default=READ_TIMEOUT_S, metavar="SECONDS",
                        help="time limit for a TLS handshake, for a request's headers (and "
                             "an idle kept-alive connection), and for a request's body and "
                             f"answer; a slower client is disconnected ({READ_TIMEOUT_S})")
    return parser.parse_args(argv)


def bind_host(bind: str) -> str:
    """The host part of ``HOST:PORT`` / ``[V6]:PORT``; refuses anything else."""
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise Refused(f"--bind {bind!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_transport(args: argparse.Namespace) -> None:
    """HTTPS needs both halves of the pair, readable; plain HTTP only on loopback."""
    if bool(args.certfile) != bool(args.keyfile):
        raise Refused("pass --certfile and --keyfile together")
    for flag, path in (("--certfile", args.certfile), ("--keyfile", args.keyfile)):
        if path and not os.access(path, os.R_OK):
            raise Refused(f"{flag} {path}: cannot be read")
    host = bind_host(args.bind)
    if not args.certfile and not is_loopback(host):
        raise Refused(f"--bind {args.bind}: plain HTTP is only served on loopback; pass "
                      "--certfile and --keyfile to serve HTTPS on this address")


def prepare_state(location: str) -> None:
    """Open (and create) the store now, and forget approvals: they never outlive a run."""
    try:
        store = open_store(location)
        store.clear_approvals()
        store.close()
    except StoreError as exc:
        raise Refused(str(exc)) from None


def load_checked_fleet(args: argparse.Namespace) -> Fleet:
    try:
        fleet = load_fleet(args.config, args.models)
    except ConfigError as exc:
        raise Refused(f"the fleet files are not usable:\n{exc}") from None
    for warning in fleet.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    if not fleet.fleet_key_configured:
        print(f"{PROG}: warning: fleet.key is missing, empty or CHANGE_ME: every "
              "GET /vllm/config will answer 503", file=sys.stderr)
    return fleet


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.workers < 1:
            raise Refused("--workers must be at least 1")
        if args.read_timeout < 1:
            raise Refused("--read-timeout must be at least 1 second")
        fleet = load_checked_fleet(args)
        check_transport(args)
        location = args.state or fleet.settings.server_state
        prepare_state(location)
    except Refused as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    log_to_stderr()
    app_config = {"LLMAO_CONFIG": args.config, "LLMAO_MODELS": args.models,
                  "LLMAO_STATE": location, "LLMAO_FLEET": fleet}
    options = gunicorn_options(args.bind, args.workers, args.certfile, args.keyfile,
                               args.read_timeout)
    GunicornServer(lambda: create_app(app_config), options).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
