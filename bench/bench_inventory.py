"""P3: ``ansible-inventory --list`` on the fleet plugin against a static YAML inventory.

Both legs list the same 10,000 hosts with the same groups and hostvars in the
same run: the plugin reads a synthetic fleet (``bench.fleetgen``), the static
file is what the plugin makes of that fleet, written out as Ansible's YAML
inventory. Each leg is a fresh ``ansible-inventory`` process run from the
repository root (so ``ansible.cfg`` applies), timed wall-clock, alternating
legs; the median of each is compared. Target: plugin / static <= 1.5. Nothing
here asserts on time: the numbers are printed.

    python -m bench.bench_inventory [--boxes 10000] [--repeats 1]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from ansible_collections.llmao.fleet.plugins.inventory.fleet import (
    ALL_BOXES,
    describe_fleet,
    model_group,
    provider_group,
)
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from bench.arguments import run_bench
from bench.fleetgen import write_fleet

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.5
# The command line: (flag, default, help), each passed to run() by name.
OPTIONS = (
    ("--boxes", 10_000, "fleet size (10000)"),
    ("--repeats", 1, "runs of each leg (1: the static leg alone takes minutes)"),
)


def fleet_source(folder: Path) -> Path:
    source = folder / "fleet.yml"
    source.write_text("plugin: llmao.fleet.fleet\nconfig: config.yaml\nmodels: models.yaml\n")
    return source


def static_document(description: dict[str, Any]) -> dict[str, Any]:
    """The plugin's hosts, groups and hostvars as a YAML inventory document."""
    boxes = description["boxes"]
    children: dict[str, Any] = {ALL_BOXES: {
        "vars": description["files"],
        "hosts": {box: facts["hostvars"] for box, facts in boxes.items()},
    }}
    for box, facts in boxes.items():
        groups = [model_group(model) for model in facts["models"]]
        groups.append(provider_group(facts["hostvars"]["llmao_provider"]))
        for group in groups:
            children.setdefault(group, {"hosts": {}})["hosts"][box] = None
    return {"all": {"children": children}}


def static_inventory(folder: Path, config: Path, models: Path) -> Path:
    path = folder / "static.yml"
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    document = static_document(describe_fleet(load_fleet(str(config), str(models))))
    path.write_text(yaml.dump(document, Dumper=dumper, sort_keys=False))
    return path


def list_seconds(source: Path) -> float:
    """Wall time of one ``ansible-inventory --list`` of ``source``; fails loudly if it fails."""
    command = [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(source),
               "--list"]
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"ansible-inventory failed on {source.name}: {done.stderr[-2000:]}")
    return elapsed


def run(boxes: int, repeats: int) -> float:
    with tempfile.TemporaryDirectory(prefix="llmao-bench-inventory-") as tmp:
        folder = Path(tmp)
        fleet = write_fleet(folder, boxes)
        plugin_source = fleet_source(folder)
        static_source = static_inventory(folder, fleet.config_path, fleet.models_path)
        timings: dict[str, list[float]] = {"plugin": [], "static": []}
        for _ in range(repeats):
            timings["plugin"].append(list_seconds(plugin_source))
            timings["static"].append(list_seconds(static_source))
    plugin, static = (statistics.median(timings[leg]) for leg in ("plugin", "static"))
    ratio = plugin / static
    print(f"P3 ansible-inventory --list, {boxes} boxes (median of {repeats}): "
          f"llmao.fleet.fleet {plugin:.2f} s, static YAML {static:.2f} s")
    print(f"P3 ratio plugin/static: {ratio:.2f} (target <= {TARGET})")
    return ratio


def main(argv: list[str] | None = None) -> int:
    return run_bench("bench_inventory", __doc__, OPTIONS, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
