"""P7: a reconcile pass of 300 servers with the scrape of every server's /metrics, over the same
pass without it (target <= 1.2). Printed, never asserted.

The fleet is bench_reconcile's: 300 stub vLLM servers on loopback (100 boxes of three), each
answering every request after 200 ms, against the LiteLLM contract fake and the real
``llmao-server``. A first pass registers every server; then steady passes (nothing to change)
are timed through the modules' logic in-process, alternating with and without the scrape so
the machine's load weighs on both alike; the median of each is compared.

    python -m bench.bench_scrape
"""

from __future__ import annotations

import secrets
import statistics
import sys
import tempfile
import time
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
from tests.llmao_process import start_llmao_server
from tests.local_fleet import LocalFleet, loopback_boxes, one_model_hosts, start_stubs, stop_stubs

ROUNDS = 3


def say(text: str) -> None:
    print(f"bench_scrape: {text}", flush=True)


def measure(folder: Path) -> dict[bool, list[float]]:
    """Steady passes with and without the scrape, alternating, ROUNDS of each."""
    boxes = loopback_boxes(BOXES)
    master_key = "sk-bench-" + secrets.token_urlsafe(12)
    local = LocalFleet(folder / "fleet", one_model_hosts(boxes, SERVERS_PER_BOX))
    port = free_port()
    times: dict[bool, list[float]] = {True: [], False: []}
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
                for _ in range(ROUNDS):
                    for scrape in (True, False):
                        times[scrape].append(timed(lambda s=scrape: module_chain(fleet, s)))
        finally:
            stop_stubs(stubs)
    return times


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as scratch:
        began = time.perf_counter()
        times = measure(Path(scratch))
    with_scrape, without = statistics.median(times[True]), statistics.median(times[False])
    say(f"steady pass of {BOXES * SERVERS_PER_BOX} servers answering after "
        f"{ANSWER_DELAY_S * 1000:.0f} ms: with the scrape {with_scrape:.2f} s "
        f"({', '.join(f'{t:.2f}' for t in times[True])}), without {without:.2f} s "
        f"({', '.join(f'{t:.2f}' for t in times[False])}), ratio {with_scrape / without:.2f} "
        f"(target <= 1.2); {time.perf_counter() - began:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
