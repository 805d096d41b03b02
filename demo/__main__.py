"""`python -m demo` starts the demo, `python -m demo stop` stops it, `python -m demo roll`
rolls a change through it; `reconcile-loop` is the background process the demo itself starts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .reconcile import loop
from .roll import roll
from .run import start, stop


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("start", help="bring the demo up (the default)")
    commands.add_parser("stop", help="stop everything the demo started")
    rolling = commands.add_parser("roll", help="change a model's max_model_len in the running "
                                               "demo and watch the boxes roll it")
    rolling.add_argument("--model", help="the model to change (default: the first with one)")
    background = commands.add_parser("reconcile-loop", help=argparse.SUPPRESS)
    background.add_argument("--inventory", type=Path, required=True)
    background.add_argument("--ca", type=Path, required=True)
    background.add_argument("--every", type=float, required=True)
    args = parser.parse_args(argv)
    if args.command == "stop":
        return stop()
    if args.command == "roll":
        return roll(args.model)
    if args.command == "reconcile-loop":
        log = args.inventory.parent.parent / "logs" / "reconcile.log"
        return loop(args.inventory, args.ca, log, args.every)
    return start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
