"""``llmao-vllm-api-key``: print the bearer one vLLM server must require.

For operators who need one key by hand (a box set up outside llmao, a curl
against a vLLM). The derivation is the core's; this only gathers the inputs.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from ansible_collections.llmao.fleet.plugins.module_utils.bearer import (
    BearerError,
    derive_vllm_api_key,
    server_bearer,
)
from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError, Problems
from ansible_collections.llmao.fleet.plugins.module_utils.config_file import load_settings


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="llmao-vllm-api-key",
        description="Print the vLLM bearer for one box and listen port.",
        epilog="The salt is read from --config (fleet.vllm_api_salt), from --salt, or asked "
               "for on the terminal; a legacy pair prints fleet.selfhost_api_key.",
    )
    parser.add_argument("--host", required=True, help="the box name (a fleet.hosts key)")
    parser.add_argument("--port", required=True, type=int, help="the listen port, e.g. 8001")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--salt", help="the salt itself (visible to other users: prefer --config)")
    source.add_argument("--config", help="config.yaml to read fleet.vllm_api_salt from")
    return parser.parse_args(argv)


def bearer_for(args: argparse.Namespace) -> str:
    """The bearer, taking the legacy pairs of a config file into account."""
    if args.config:
        problems = Problems()
        settings = load_settings(args.config, problems, [])
        problems.raise_if_any()
        return server_bearer(settings, args.host, args.port)
    salt = args.salt if args.salt is not None else getpass.getpass("fleet.vllm_api_salt: ")
    return derive_vllm_api_key(salt, args.host, args.port)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        print(bearer_for(args))
    except (BearerError, ConfigError) as exc:
        print(f"llmao-vllm-api-key: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
