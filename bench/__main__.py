"""``python -m bench [ID ...]``: run every ``bench/bench_*.py`` module's ``main()`` in turn.

With arguments, only the benchmarks they name run: a target id of the first line
of a module's docstring (``p11``, any case) or a part of its module name
(``turn_flood``). ``python -m bench.<module>`` runs one with its own options.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from inspect import signature
from types import ModuleType

import bench

TARGET_ID = re.compile(r"\bP\d+\b")


def bench_modules() -> list[str]:
    return sorted(info.name for info in pkgutil.iter_modules(bench.__path__)
                  if info.name.startswith("bench_"))


def named(module: ModuleType, wanted: list[str]) -> bool:
    """Whether ``wanted`` (none: all) names this benchmark, by target id or module name."""
    first_line = (module.__doc__ or "").partition("\n")[0]
    ids = {target.lower() for target in TARGET_ID.findall(first_line)}
    name = module.__name__.rpartition(".")[2]
    return not wanted or any(word.lower() in ids or word.lower() in name for word in wanted)


def main(argv: list[str] | None = None) -> int:
    wanted = sys.argv[1:] if argv is None else argv
    failed, ran = [], 0
    for name in bench_modules():
        module = importlib.import_module(f"bench.{name}")
        if not named(module, wanted):
            continue
        ran += 1
        try:
            # The selecting words are not the benchmark's options: it runs with its defaults.
            status = module.main([]) if signature(module.main).parameters else module.main()
        except Exception as exc:  # one broken benchmark must not hide the others' numbers
            print(f"{name}: failed: {exc}", file=sys.stderr)
            status = 1
        if status:
            failed.append(name)
    if not ran:
        print(f"no benchmark is named {' '.join(wanted)}; see bench/bench_*.py", file=sys.stderr)
        return 2
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
