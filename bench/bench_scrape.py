"""P7: a reconcile pass of 300 servers with the scrape of every server's /metrics, over the same
pass without it (target <= 1.2). Printed, never asserted.

The fleet is bench_reconcile's: 300 stub vLLM servers on loopback (100 boxes of three), each
answering every request after 200 ms, against the LiteLLM contract fake and the real
``llmao-server``. A first pass registers every server; then steady passes (nothing to change)
are timed, alternating with and without the scrape so the machine's load weighs on both alike,
and the medians compared: through ``ansible-playbook playbooks/reconcile.yml`` as operators run
it (``-e llmao_scrape=false`` for the pass without), and through the modules' logic in-process
(the pass without Ansible's own cost, where the scrape weighs most). On loopback the stubs'
own work shares the controller's cores, which a real fleet's servers do not.

    python -m bench.bench_scrape
"""

from __future__ import annotations

import secrets
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from bench.bench_reconcile import (
    ANSWER_DELAY_S,
    BOXES,
    SERVERS_PER_BOX,
    module_chain,
    timed,
)
from rig.boxes import free_port
from rig.litellm_process import start_litellm
from rig.local_fleet import LocalFleet, loopback_boxes, one_model_hosts, start_stubs, stop_stubs
from tests.llmao_process import start_llmao_server
from tests.reconcile_run import run_reconcile

ROUNDS = 3
WAYS = ("playbook", "modules")


def say(text: str) -> None:
    print(f"bench_scrape: {text}", flush=True)


def playbook_pass(local: LocalFleet, scrape: bool) -> None:
    done = run_reconcile(local.inventory_path, "-e", f"llmao_scrape={str(scrape).lower()}",
                         timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"reconcile failed:\n{done.output[-3000:]}")


def measure(folder: Path) -> dict[tuple[str, bool], list[float]]:
    """Steady passes with and without the scrape, alternating, ROUNDS of each, both ways."""
    boxes = loopback_boxes(BOXES)
    master_key = "sk-bench-" + secrets.token_urlsafe(12)
    local = LocalFleet(folder / "fleet", one_model_hosts(boxes, SERVERS_PER_BOX))
    port = free_port()
    times: dict[tuple[str, bool], list[float]] = {(way, scrape): [] for way in WAYS
                                                  for scrape in (True, False)}
    with start_litellm("fake", master_key=master_key, log_dir=folder) as litellm:
        fleet = local.write(litellm={"url": litellm.url, "master_key": master_key},
                            server={"url": f"http://127.0.0.1:{port}",
                                    "state": str(folder / "state.sqlite3")})
        say(f"starting {len(boxes) * SERVERS_PER_BOX} stub servers ...")
        stubs = start_stubs(fleet, {box: {"*": {"answer_delay_s": ANSWER_DELAY_S}}
                                    for box in boxes})
        try:
            with start_llmao_server(local.config_path, local.models_path, folder, port=port):
                module_chain(fleet)  # the first pass registers every server
                passes = {"playbook": lambda scrape: playbook_pass(local, scrape),
                          "modules": lambda scrape: module_chain(fleet, scrape)}
                for _ in range(ROUNDS):
                    for way in WAYS:
                        for scrape in (True, False):
                            times[way, scrape].append(timed(partial(passes[way], scrape)))
        finally:
            stop_stubs(stubs)
    return times


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as scratch:
        began = time.perf_counter()
        times = measure(Path(scratch))
    for way in WAYS:
        with_scrape = statistics.median(times[way, True])
        without = statistics.median(times[way, False])
        say(f"steady pass of {BOXES * SERVERS_PER_BOX} servers answering after "
            f"{ANSWER_DELAY_S * 1000:.0f} ms, {way}: with the scrape {with_scrape:.2f} s "
            f"({', '.join(f'{t:.2f}' for t in times[way, True])}), without {without:.2f} s "
            f"({', '.join(f'{t:.2f}' for t in times[way, False])}), ratio "
            f"{with_scrape / without:.2f} (target <= 1.2)")
    say(f"{time.perf_counter() - began:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
