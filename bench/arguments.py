"""The command line every benchmark shares: its docstring as help, whole-number options."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from typing import Any

Options = Iterable[tuple[str, int, str]]


def bench_parser(module: str, doc: str | None, options: Options) -> argparse.ArgumentParser:
    """The parser of ``python -m bench.<module>``: one ``int`` option per (flag, default, help).

    The module's docstring is its description, kept as written (it holds the
    usage line and the targets). A caller adds any option of another shape.
    """
    parser = argparse.ArgumentParser(prog=f"python -m bench.{module}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, default, text in options:
        parser.add_argument(flag, type=int, default=default, help=text)
    return parser


def run_bench(module: str, doc: str | None, options: Options, run: Callable[..., Any],
              argv: Sequence[str] | None) -> int:
    """Parse ``argv`` as :func:`bench_parser` says and call ``run`` with the options by name."""
    run(**vars(bench_parser(module, doc, options).parse_args(argv)))
    return 0
