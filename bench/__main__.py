"""``python -m bench``: run every ``bench/bench_*.py`` module's ``main()`` in turn."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import bench


def bench_modules() -> list[str]:
    return sorted(info.name for info in pkgutil.iter_modules(bench.__path__)
                  if info.name.startswith("bench_"))


def main() -> int:
    failed = []
    for name in bench_modules():
        module = importlib.import_module(f"bench.{name}")
        try:
            status = module.main()
        except Exception as exc:  # one broken benchmark must not hide the others' numbers
            print(f"{name}: failed: {exc}", file=sys.stderr)
            status = 1
        if status:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
