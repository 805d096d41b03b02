"""bench/README.md names every benchmark's target, so the docs citing it cite what runs."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from bench.__main__ import TARGET_ID, bench_modules

README = Path(__file__).resolve().parents[2] / "bench" / "README.md"


def test_every_target_a_benchmark_prints_is_listed_with_its_module() -> None:
    rows = {match[0]: match[1] for match in
            re.findall(r"^\| (P\d+) \|.*\| ([^|]*) \|$", README.read_text(), re.MULTILINE)}
    assert sorted(rows, key=lambda target: int(target[1:])) == [f"P{n}" for n in range(1, 14)]
    for name in bench_modules():
        first_line = (importlib.import_module(f"bench.{name}").__doc__ or "").partition("\n")[0]
        for target in TARGET_ID.findall(first_line):
            assert f"`{name}`" in rows[target], (name, target)
