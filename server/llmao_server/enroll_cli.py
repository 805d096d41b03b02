"""``llmao-server enroll <name> --ttl 1h [--pool P]``: mint a box's one-time bootstrap token
from the command line, straight into the state store every server instance shares (no
running server needed), by the same rule as ``POST /admin/api/boxes/<name>/enroll``.

The token is printed alone on stdout, once, so that a script can take it
(``TOKEN=$(llmao-server enroll ...)``); what it is for and when it expires go to stderr.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import normalize_host

from .boxes.bindings import MAX_ENROLL_S, MIN_ENROLL_S, enroll_box
from .state import ServerState
from .store import StoreError, open_store
from .store.schema import NewerSchema

PROG = "llmao-server enroll"
DURATION_RE = re.compile(r"^(\d+)([smhd]?)$")
UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``1h``, ``2d`` as seconds, within an enrollment's bounds."""
    match = DURATION_RE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration like 3600, 30m, 1h or 2d")
    seconds = int(match.group(1)) * UNIT_S[match.group(2)]
    if not MIN_ENROLL_S <= seconds <= MAX_ENROLL_S:
        raise argparse.ArgumentTypeError(f"{text!r}: from {MIN_ENROLL_S} s to 30 days")
    return float(seconds)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Mint a one-time bootstrap token for a box (docs/box-identity.md).")
    parser.add_argument("name", help="the box's name: a fleet.hosts key, an approved box, or a "
                                     "new member of --pool")
    parser.add_argument("--ttl", type=duration, default=3600.0,
                        help="how long the token is good for (1h)")
    parser.add_argument("--pool", help="the pool the box joins")
    parser.add_argument("--config", default=os.environ.get("LLMAO_CONFIG"),
                        help="config.yaml (default: $LLMAO_CONFIG)")
    parser.add_argument("--models", default=os.environ.get("LLMAO_MODELS"),
                        help="models.yaml (default: $LLMAO_MODELS)")
    parser.add_argument("--state", default=os.environ.get("LLMAO_STATE"), metavar="PATH_OR_URL",
                        help="state store, overriding server.state (default: $LLMAO_STATE)")
    args = parser.parse_args(argv)
    if not args.config or not args.models:
        parser.error("--config and --models (or LLMAO_CONFIG and LLMAO_MODELS) are required")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        fleet = load_fleet(args.config, args.models)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    box = normalize_host(args.name)
    if args.pool is not None and args.pool not in fleet.settings.pools:
        print(f"{PROG}: pool {args.pool!r} is not in {args.config}'s pools", file=sys.stderr)
        return 2
    try:
        store = open_store(args.state or fleet.settings.server.state)
        state = ServerState(fleet, store)
        try:
            if args.pool is None and state.served_assignment(box) is None:
                print(f"{PROG}: {box!r} is not served: add it to fleet.hosts, approve it, or "
                      "name the pool it joins (--pool)", file=sys.stderr)
                return 2
            token, expires_at = enroll_box(state, box, args.ttl, args.pool, "cli", None)
        finally:
            state.close()
    except (StoreError, NewerSchema) as exc:
        print(f"{PROG}: the state store cannot be written: {exc}", file=sys.stderr)
        return 2
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at))
    print(f"{PROG}: a bootstrap token for {box}, good once until {until}: set it as "
          "LLMAO_BOOTSTRAP_TOKEN on that box only", file=sys.stderr)
    print(token)
    return 0
