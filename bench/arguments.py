"""The command line every benchmark shares: its docstring as help, whole-number options."""

from __future__ import annotations

import argparse
from collections.abc import Iterable


def bench_parser(module: str, doc: str | None,
                 options: Iterable[tuple[str, int, str]]) -> argparse.ArgumentParser:
    """The parser of ``python -m bench.<module>``: one ``int`` option per (flag, default, help).

    The module's docstring is its description, kept as written (it holds the
    usage line and the targets). A caller adds any option of another shape.
    """
    parser = argparse.ArgumentParser(prog=f"python -m bench.{module}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, default, text in options:
        parser.add_argument(flag, type=int, default=default, help=text)
    return parser
