#!/usr/bin/env python3
"""Print every option `vllm serve` accepts, one a line, from the real vLLM's own parser.

The vLLM stub refuses an option vLLM does not know, as `vllm serve` exits 2 on one
("unrecognized arguments"), so a recipe's misspelt flag fails in the tests as it would on a box.
Its list, rig/vllm_serve_flags.txt, is this program's output, run by the python of the real
vLLM's environment; tests/rig/test_rig_real_vllm_start.py checks that the two still agree:

    .venv-vllm/bin/python rig/vllm_serve_flags.py > rig/vllm_serve_flags.txt
"""

from __future__ import annotations

import importlib.metadata
import sys


def serve_options() -> list[str]:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand().subparser_init(parser.add_subparsers())
    return sorted({option for option in serve._option_string_actions if option.startswith("--")})


def main() -> int:
    print(f"# vllm serve options of vllm {importlib.metadata.version('vllm')} "
          "(rig/vllm_serve_flags.py)")
    print("\n".join(serve_options()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
