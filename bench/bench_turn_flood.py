"""P11: a box's keyed fetch while 20 boxes ask for their turns as fast as they can.

``llmao-server`` (two workers) serves a 10,000-box fleet that follows
(``rollout.follow_s`` set), with a stored reconcile pass that calls every
server Healthy, as a real fleet's last pass would. Each round measures the p99
latency of keyed ``GET /vllm/config`` requests, each on a new connection as a
booting box makes it, first with nothing else running, then while 20 other
boxes (one thread and one kept-alive connection each, in a process of their
own) send ``POST /vllm/turn`` for their intended revision back to back,
ignoring every ``Retry-After``. The legs alternate, so load from elsewhere on
the machine lands on both alike; each leg reports its median round. P11 is the
p99 with the askers over the p99 without (target <= 2), printed with the spread of
the rounds' own ratios. The askers' answers
are counted by status (most are 429: each box's asks are rate-limited). Nothing
here asserts on time.

    python -m bench.bench_turn_flood [--rounds 3] [--fetches 300] [--boxes 10000]
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.arguments import run_bench
from bench.bench_config_endpoint import fetch_headers, free_port, llmao_command, serving
from bench.bench_slow_clients import p99_ms
from bench.fleetgen import GeneratedFleet, write_fleet

ASKERS = 20
# Long enough that a box's turn never expires while it waits; the drain never ends in a leg.
ROLLOUT = {"follow_s": 10, "drain_s": 3600, "max_unavailable": 1}
ASK_TIMEOUT_S = 30
# The command line: (flag, default, help), each passed to run() by name.
OPTIONS = (
    ("--rounds", 3, "rounds over both legs (3)"),
    ("--fetches", 300, "keyed fetches per leg and round (300)"),
    ("--boxes", 10_000, "boxes in the fleet (10000)"),
)


def store_healthy_pass(fleet: GeneratedFleet, state: Path) -> None:
    """The state store as after a pass that found every server Healthy."""
    from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
    from llmao_server.store import ReconcilePass, SqliteStore

    loaded = load_fleet(str(fleet.config_path), str(fleet.models_path))
    verdicts = {s.id: {"state": "Healthy"} for s in loaded.servers()}
    store = SqliteStore(str(state))
    now = time.time()
    store.record_pass(ReconcilePass(now, verdicts, (), now))
    store.close()


def asks(port: int, fleet: GeneratedFleet) -> list[tuple[dict[str, str], bytes]]:
    """Each asker's headers and body: its intended revision, every server it runs."""
    prepared = []
    for box in fleet.boxes[1:ASKERS + 1]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=ASK_TIMEOUT_S)
        connection.request("GET", "/vllm/config", headers=fetch_headers(fleet, box))
        payload = json.loads(connection.getresponse().read())
        connection.close()
        body = {"revision": payload["revision"],
                "servers": [server["name"] for server in payload["servers"]]}
        prepared.append(({**fetch_headers(fleet, box), "Content-Type": "application/json"},
                         json.dumps(body).encode()))
    return prepared


def ask_flood(port: int, prepared: list[tuple[dict[str, str], bytes]], stop: Any,
              counts: Any) -> None:
    """One thread per asker, asking back to back until ``stop`` (an event) is set; the
    statuses are counted into ``counts`` (a shared dict)."""
    seen: Counter[int] = Counter()
    lock = threading.Lock()

    def ask(headers: dict[str, str], body: bytes) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=ASK_TIMEOUT_S)
        mine: Counter[int] = Counter()
        while not stop.is_set():
            connection.request("POST", "/vllm/turn", body=body, headers=headers)
            answer = connection.getresponse()
            answer.read()
            mine[answer.status] += 1
        connection.close()
        with lock:
            seen.update(mine)

    threads = [threading.Thread(target=ask, args=one) for one in prepared]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts.update({str(status): count for status, count in seen.items()})


@contextmanager
def askers(port: int, prepared: list[tuple[dict[str, str], bytes]],
           counts: Counter[str]) -> Iterator[None]:
    """The 20 askers, in a process of their own so that they never slow the measuring one."""
    context = multiprocessing.get_context("fork")
    with context.Manager() as manager:
        stop, shared = context.Event(), manager.dict()
        process = context.Process(target=ask_flood, args=(port, prepared, stop, shared))
        process.start()
        try:
            time.sleep(1.0)  # every asker connected and asking
            yield
        finally:
            stop.set()
            process.join(ASK_TIMEOUT_S + 5)
            if process.is_alive():
                process.kill()
                process.join()
        counts.update({status: count for status, count in shared.items()})


def run(rounds: int, fetches: int, boxes: int) -> None:
    print(f"bench_turn_flood: llmao-server with 2 workers, {boxes:,} boxes following; "
          f"{rounds} rounds of {fetches} keyed fetches per leg; {ASKERS} boxes asking for "
          f"turns back to back; load average {os.getloadavg()[0]:.1f}")
    quiet, flooded = [], []
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="llmao-bench-") as tmp:
        work = Path(tmp)
        fleet = write_fleet(work / "fleet", boxes, ROLLOUT)
        state = work / "state.sqlite3"
        store_healthy_pass(fleet, state)
        port = free_port()
        with serving(llmao_command(fleet, port, state), port, fleet, work / "llmao.log"):
            headers_of = [fetch_headers(fleet, box) for box in fleet.boxes[ASKERS + 1:]]
            prepared = asks(port, fleet)
            p99_ms(port, headers_of, fetches)  # warm both workers up
            for _ in range(rounds):
                quiet.append(p99_ms(port, headers_of, fetches))
                started = time.monotonic()
                before = sum(counts.values())
                with askers(port, prepared, counts):
                    flooded.append(p99_ms(port, headers_of, fetches))
                    elapsed = time.monotonic() - started
                print(f"  round: p99 {quiet[-1]:.2f} ms quiet, {flooded[-1]:.2f} ms with "
                      f"askers ({(sum(counts.values()) - before) / elapsed:,.0f} asks/s)")
    without, with_askers = statistics.median(quiet), statistics.median(flooded)
    answered = ", ".join(f"{status}: {count:,}" for status, count in sorted(counts.items()))
    # Each round's legs ran back to back: their ratios show how much the machine's own load
    # moved the figures (on a busy shared machine, the quiet leg swings most).
    ratios = sorted(crowded / alone for alone, crowded in zip(quiet, flooded, strict=True))
    print(f"  asks answered: {answered}")
    print(f"  P11 keyed fetch p99: {without:.2f} ms without askers, {with_askers:.2f} ms with "
          f"{ASKERS} askers, ratio {with_askers / without:.2f} (rounds {ratios[0]:.2f} to "
          f"{ratios[-1]:.2f}; target <= 2)")


def main(argv: list[str] | None = None) -> int:
    return run_bench("bench_turn_flood", __doc__, OPTIONS, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
