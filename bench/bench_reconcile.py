"""P4: reconcile's probe phase and a whole pass, on a fleet of slow stub vLLM servers.

300 stub servers on loopback (100 boxes of three, each box on its own ``127.x.y.z``), every
one answering after 200 ms, as a loaded vLLM might. Printed, never asserted:

- the probe phase (``probe_many``, as ``llmao.fleet.vllm_probe`` runs it) against probing the
  same servers one after the other, measured on a sample and extrapolated (target <= 0.1);
- a whole reconcile pass at 30 and at 300 servers against the LiteLLM contract fake and the
  real ``llmao-server``: the first pass (every server registered) and a steady pass (nothing
  to change), through ``ansible-playbook playbooks/reconcile.yml`` as operators run it, and
  through the same modules' logic called in-process; growth from 30 to 300 (target <= 2x).

``--modules-only`` times only the passes through the modules' logic (no playbook, no probe
phase); ``--steady N`` times N steady passes and keeps their median.

    python -m bench.bench_reconcile [--modules-only] [--steady N]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.listings import read_listings
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    LlmaoAdmin,
    verdicts_document,
)
from ansible_collections.llmao.fleet.plugins.module_utils.probe import probe_many, probe_one
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_plan import probe_targets
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import (
    probes_from_record,
)
from ansible_collections.llmao.fleet.plugins.modules.fleet_observe import observe
from ansible_collections.llmao.fleet.plugins.modules.fleet_plan import make_plan, plan_result
from ansible_collections.llmao.fleet.plugins.modules.litellm_deployment import (
    DEPLOYMENT_OPTIONS,
    apply_all,
)
from ansible_collections.llmao.fleet.plugins.modules.vllm_probe import probe_fleet
from bench.arguments import bench_parser
from rig.boxes import free_port
from rig.fleet_files import strong_secret
from rig.litellm_process import start_litellm
from rig.local_fleet import LocalFleet, loopback_boxes, one_model_hosts, start_stubs, stop_stubs
from tests.llmao_process import start_llmao_server
from tests.reconcile_run import run_reconcile

BOXES = 100
SERVERS_PER_BOX = 3
SMALL_BOXES = 10
ANSWER_DELAY_S = 0.2
SERIAL_SAMPLE = 20
# What Ansible fills in for the options of one ``deployments`` entry that a plan leaves out.
OPTION_DEFAULTS = {name: spec.get("default") for name, spec in DEPLOYMENT_OPTIONS.items()}
TIMEOUTS = {"connect": 5.0, "answer": 10.0}
WAYS = ("playbook", "modules")


def say(text: str) -> None:
    print(f"bench_reconcile: {text}", flush=True)


def timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def probe_phase(fleet: Fleet) -> None:
    """All servers at once against a serial sample, extrapolated to the whole fleet."""
    targets = probe_targets(fleet, read_listings({}, 1.0))
    serial = timed(lambda: [probe_one(t, TIMEOUTS["connect"], TIMEOUTS["answer"])
                            for t in targets[:SERIAL_SAMPLE]])
    serial_all = serial / SERIAL_SAMPLE * len(targets)
    probes: dict = {}
    concurrent = timed(lambda: probes.update(probe_many(targets, TIMEOUTS["connect"],
                                                        TIMEOUTS["answer"])))
    serving = sum(1 for p in probes.values() if p.models.value == "lists")
    say(f"probe phase, {len(targets)} servers answering after {ANSWER_DELAY_S * 1000:.0f} ms: "
        f"concurrent {concurrent:.2f} s, serial {serial_all:.1f} s (from {SERIAL_SAMPLE} "
        f"probed one by one), ratio {concurrent / serial_all:.3f} (target <= 0.1); "
        f"{serving} of {len(targets)} serving")


def module_chain(fleet: Fleet, scrape: bool = True) -> int:
    """One pass through the modules' own logic, in-process; returns how many changes."""
    observations, _ = observe(fleet, 15.0)  # (and the bindings it released: none here)
    knobs = fleet.settings.fleet.lifecycle
    probes = probe_fleet(fleet, observations.listings, None, knobs.probe_connect_timeout_s,
                         knobs.probe_timeout_s, scrape=scrape)
    plan = make_plan(fleet, observations, probes_from_record(probes))
    result = plan_result(plan, observations)
    apply_all(fleet, [{**OPTION_DEFAULTS, **item} for item in result["deployments"]], False,
              15.0)
    LlmaoAdmin.from_settings(fleet.settings).post_verdicts(
        verdicts_document(result["now"], result["servers"], result["memories"],
                          result["drift"], result["models"], result["boxes"]))
    return len(result["deployments"])


def whole_passes(folder: Path, hosts: dict, salt: str, ways: tuple[str, ...] = WAYS,
                 steady: int = 1) -> dict[str, float]:
    """First and steady pass (the median of ``steady``), through the playbook and through the
    module chain, each against its own fresh LiteLLM fake and llmao server so that every first
    pass registers all."""
    times: dict[str, float] = {}
    folder.mkdir(parents=True)
    for way in ways:
        master_key = strong_secret("sk-bench-")
        local = LocalFleet(folder / way, hosts, salt=salt)
        port = free_port()
        with start_litellm("fake", master_key=master_key, log_dir=folder) as litellm:
            fleet = local.write(litellm={"url": litellm.url, "master_key": master_key},
                                server={"url": f"http://127.0.0.1:{port}",
                                        "state": str(folder / f"{way}.sqlite3")})
            with start_llmao_server(local.config_path, local.models_path, folder, port=port):
                step = partial(_playbook, local) if way == "playbook" else partial(
                    module_chain, fleet)
                times[f"{way} first"] = timed(step)
                times[f"{way} steady"] = statistics.median(timed(step) for _ in range(steady))
    return times


def _playbook(local: LocalFleet) -> None:
    done = run_reconcile(local.inventory_path, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"reconcile failed:\n{done.output[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("bench_reconcile", __doc__, [
        ("--steady", 1, "steady passes timed at each size (their median is kept)")])
    parser.add_argument("--modules-only", action="store_true",
                        help="only the passes through the modules' logic")
    args = parser.parse_args(argv)
    ways = ("modules",) if args.modules_only else WAYS
    boxes = loopback_boxes(BOXES)
    hosts = one_model_hosts(boxes, SERVERS_PER_BOX)
    small = {box: hosts[box] for box in boxes[:SMALL_BOXES]}
    with tempfile.TemporaryDirectory(prefix="bench-reconcile-") as scratch:
        folder = Path(scratch)
        full = LocalFleet(folder / "stubs", hosts)
        fleet = full.write()
        say(f"starting {BOXES * SERVERS_PER_BOX} stub servers ...")
        began = time.perf_counter()
        stubs = start_stubs(fleet, {box: {"*": {"answer_delay_s": ANSWER_DELAY_S}}
                                    for box in boxes})
        say(f"stubs up in {time.perf_counter() - began:.0f} s")
        try:
            if not args.modules_only:
                probe_phase(fleet)
            small_times = whole_passes(folder / "small", small, full.salt, ways, args.steady)
            large_times = whole_passes(folder / "large", hosts, full.salt, ways, args.steady)
        finally:
            stop_stubs(stubs)
    servers_small, servers_large = SMALL_BOXES * SERVERS_PER_BOX, BOXES * SERVERS_PER_BOX
    for key in small_times:
        say(f"{key} pass: {servers_small} servers {small_times[key]:.2f} s, {servers_large} "
            f"servers {large_times[key]:.2f} s, growth {large_times[key] / small_times[key]:.2f}x"
            " (target <= 2x)")
    say(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
