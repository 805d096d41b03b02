"""``llmao-server``: check the fleet, then serve it under gunicorn.

Everything that can be wrong before serving is found before binding: the
fleet files (the core's message, no traceback), the TLS pair, the state store.
Plain HTTP is for loopback only; boxes fetch over HTTPS.

``--config``, ``--models`` and ``--state`` default to the environment variables
the app factory reads (``LLMAO_CONFIG``, ``LLMAO_MODELS``, ``LLMAO_STATE``), so a
service manager can set them once for both.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from flask import Flask

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet

from .addresses import is_loopback
from .app import SETTINGS_FROM_ENVIRONMENT, create_app
from .build_info import package_version
from .gunicorn_app import READ_TIMEOUT_S, GunicornServer, gunicorn_options
from .logs import LOG_FORMATS, SERVER_LOGGER, gunicorn_log_options, log_to_stderr
from .store import StoreError, open_store

PROG = "llmao-server"
RELOAD_LOGGER = f"{SERVER_LOGGER}.reload"


class Refused(Exception):
    """The server will not start; the message says why and what to do."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Serve GET /vllm/config and POST /vllm/applied for a fleet.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    parser.add_argument("--config", help="config.yaml (default: $LLMAO_CONFIG)")
    parser.add_argument("--models", help="models.yaml (default: $LLMAO_MODELS)")
    parser.add_argument("--bind", required=True, metavar="HOST:PORT",
                        help="address to listen on, e.g. 0.0.0.0:8443 or [::1]:8080")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes (2)")
    parser.add_argument("--certfile", help="TLS certificate chain (PEM)")
    parser.add_argument("--keyfile", help="TLS private key (PEM)")
    parser.add_argument("--state", metavar="PATH_OR_URL",
                        help="state store: a SQLite file or a postgresql:// URL, "
                             "overriding server.state (default: $LLMAO_STATE)")
    parser.add_argument("--read-timeout", type=int, default=READ_TIMEOUT_S, metavar="SECONDS",
                        help="time limit for a TLS handshake, for a request's headers (and "
                             "an idle kept-alive connection), and for a request's body and "
                             f"answer; a slower client is disconnected ({READ_TIMEOUT_S})")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=LOG_FORMATS[0],
                        help="text lines, or one JSON object a line for a log collector "
                             f"({LOG_FORMATS[0]})")
    parser.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True,
                        help="one line per request: method, path, status, duration, box, "
                             "peer (on)")
    parser.set_defaults(**environment_defaults(os.environ))
    args = parser.parse_args(argv)
    if not args.config or not args.models:
        parser.error("--config and --models (or LLMAO_CONFIG and LLMAO_MODELS) are required")
    return args


def environment_defaults(environ: Mapping[str, str]) -> dict[str, str]:
    """``LLMAO_CONFIG`` → ``config``, …: the app factory's settings as the options' defaults."""
    return {key.removeprefix("LLMAO_").lower(): environ[key]
            for key in SETTINGS_FROM_ENVIRONMENT if environ.get(key)}


def bind_host(bind: str) -> str:
    """The host part of ``HOST:PORT`` / ``[V6]:PORT``; refuses anything else."""
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise Refused(f"--bind {bind!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host



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


def prepare_state(location: str) -> tuple[int, int]:
    """Open (and create, or upgrade) the store now, and forget approvals: they never outlive
    a run. The store's schema version before and after."""
    try:
        store = open_store(location)
        store.clear_approvals()
        store.close()
    except StoreError as exc:
        raise Refused(str(exc)) from None
    return store.schema_versions


def log_upgrade(versions: tuple[int, int]) -> None:
    """Say once, in the server's log, that the store's schema was upgraded."""
    before, after = versions
    if before != after:
        logging.getLogger(SERVER_LOGGER).info(
            "%s: the state store's schema is now version %s (it was %s)", PROG, after,
            before or "new, or of 0.1.0")


def load_checked_fleet(args: argparse.Namespace) -> Fleet:
    try:
        fleet = load_fleet(args.config, args.models, signer=True)
    except ConfigError as exc:
        raise Refused(f"the fleet files are not usable:\n{exc}") from None
    for warning in fleet.warnings:
        say(args, f"warning: {warning}", logging.WARNING)
    if not fleet.fleet_key_configured:
        say(args, "warning: fleet.key is missing, empty or CHANGE_ME: every "
            "GET /vllm/config will answer 503", logging.WARNING)
    return fleet


def say(args: argparse.Namespace, text: str, level: int) -> None:
    """A line of the start (a warning, a refusal) on stderr: ``llmao-server: text`` as
    ever, or under ``--log-format json`` a JSON line like every line after it, so that
    ``journalctl ... | jq .`` reads the log from its first line."""
    if args.log_format == "json":
        log_to_stderr("json")  # the first line may come before main's own setup
        logging.getLogger(SERVER_LOGGER).log(level, "%s: %s", PROG, text)
    else:
        print(f"{PROG}: {text}", file=sys.stderr)


def app_settings(args: argparse.Namespace, location: str, fleet: Fleet) -> dict[str, Any]:
    """The app factory's settings: the files, the store, and the fleet already checked."""
    return {"LLMAO_CONFIG": args.config, "LLMAO_MODELS": args.models,
            "LLMAO_STATE": location, "LLMAO_FLEET": fleet, "LLMAO_ACCESS_LOG": args.access_log}


def reloaded_app(args: argparse.Namespace, location: str) -> Flask | None:
    """SIGHUP: the app over the fleet files as they are now, or None to keep the one serving.

    The files are checked as at start and refused with the same message; the store is
    not reset, so approvals (which last until a restart) outlive a reload. Any failure
    keeps the app in force: a reload must never stop a serving fleet.
    """
    log = logging.getLogger(RELOAD_LOGGER)
    try:
        app = create_app(app_settings(args, location, load_checked_fleet(args)))
    except Refused as exc:
        log.error("%s: reload refused, still serving the files read before: %s", PROG, exc)
        return None
    except Exception:  # the store, the dashboard: anything, the old app keeps serving
        log.exception("%s: reload failed, still serving the files read before", PROG)
        return None
    log.info("%s: reloaded %s and %s", PROG, args.config, args.models)
    return app


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["enroll"]:  # the one subcommand: mint a box's bootstrap token
        from .enroll_cli import main as enroll

        return enroll(words[1:])
    args = parse_args(argv)
    try:
        if args.workers < 1:
            raise Refused("--workers must be at least 1")
        if args.read_timeout < 1:
            raise Refused("--read-timeout must be at least 1 second")
        fleet = load_checked_fleet(args)
        check_transport(args)
        location = args.state or fleet.settings.server.state
        versions = prepare_state(location)
    except Refused as exc:
        say(args, str(exc), logging.ERROR)
        return 2
    log_to_stderr(args.log_format)
    log_upgrade(versions)
    app_config = app_settings(args, location, fleet)
    options = gunicorn_options(args.bind, args.workers, args.certfile, args.keyfile,
                               args.read_timeout)
    options.update(gunicorn_log_options(args.log_format))
    GunicornServer(lambda: create_app(app_config), options,
                   reload=lambda: reloaded_app(args, location)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
