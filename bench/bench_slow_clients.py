"""P6: a box's keyed fetch while 1,000 idle or trickling connections are open.

``llmao-server`` (two workers, its default read time limit) serves a fleet on
loopback. Each round measures the p99 latency of keyed ``GET /vllm/config``
requests, each on a fresh connection as a booting box makes it, first with
nothing else open, then while :func:`rig.slow_clients.slow_clients` holds
1,000 connections without a key (half silent, half trickling a request's
headers). The legs alternate, so load from elsewhere on the machine lands on
both alike; each leg reports its median round. P6 is the p99 with the slow
clients over the p99 without (target <= 2). Nothing here asserts on time.

    python -m bench.bench_slow_clients [--rounds 3] [--fetches 400]
"""

from __future__ import annotations

import http.client
import os
import statistics
import time

from bench.arguments import run_bench
from bench.bench_config_endpoint import fetch_headers, fleet_server
from rig.slow_clients import slow_clients

FLEET_SIZE = 1_000
SLOW_CLIENTS = 1_000
# The command line: (flag, default, help), each passed to run() by name.
OPTIONS = (
    ("--rounds", 3, "rounds over both legs (3)"),
    ("--fetches", 400, "keyed fetches per leg and round (400)"),
)


def p99_ms(port: int, headers_of: list[dict[str, str]], fetches: int) -> float:
    """The 99th percentile latency of ``fetches`` keyed fetches, each on a new connection."""
    samples = []
    for index in range(fetches):
        started = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/vllm/config", headers=headers_of[index % len(headers_of)])
        answer = connection.getresponse()
        answer.read()
        connection.close()
        if answer.status != 200:
            raise RuntimeError(f"a keyed fetch answered {answer.status}: the figure would "
                               "mean nothing")
        samples.append((time.perf_counter() - started) * 1000.0)
    return statistics.quantiles(samples, n=100)[98]


def run(rounds: int, fetches: int) -> None:
    print(f"bench_slow_clients: llmao-server with 2 workers, {FLEET_SIZE:,} boxes; {rounds} "
          f"rounds of {fetches} keyed fetches per leg; {SLOW_CLIENTS:,} slow clients; "
          f"load average {os.getloadavg()[0]:.1f}")
    quiet, crowded, held = [], [], []
    with fleet_server(FLEET_SIZE) as server:
        port = server.port
        headers_of = [fetch_headers(server.fleet, box) for box in server.fleet.boxes]
        p99_ms(port, headers_of, fetches)  # warm both workers up
        for _ in range(rounds):
            quiet.append(p99_ms(port, headers_of, fetches))
            with slow_clients("127.0.0.1", port, SLOW_CLIENTS) as clients:
                crowded.append(p99_ms(port, headers_of, fetches))
                held.append(clients.still_open())
    none_open, many_open = statistics.median(quiet), statistics.median(crowded)
    print(f"  P6 keyed fetch p99: {none_open:.2f} ms with none open, {many_open:.2f} ms with "
          f"{SLOW_CLIENTS:,} slow clients (still open at the end: {min(held):,}), "
          f"ratio {many_open / none_open:.2f} (target <= 2)")


def main(argv: list[str] | None = None) -> int:
    return run_bench("bench_slow_clients", __doc__, OPTIONS, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
