"""P8, second half: what a following box's check costs when nothing changed.

A box that follows its assignment re-checks every ``rollout.follow_s`` seconds
with ``If-None-Match: "<applied revision>"``; the server answers ``304`` with no
body. This runs ``llmao-server`` (gunicorn, the same workers as P1) on a small
fleet and, on one keep-alive connection, sends in the same run 1,000 full
fetches and 1,000 checks answered 304, each box naming its own revision,
interleaved in blocks so load from elsewhere on the machine hits both alike.

Printed, as ratios of the 304 checks over the full fetches (target <= 0.5):
the bytes the server sends (status line, headers and body), the server's CPU,
and the client's wall time. Nothing asserts on time; a 304 that carries a body
or any other status stops the run, since its figures would mean nothing.

Then the same count of checks as the follow program makes them
(``Follower.check`` of the box program, a new connection each, as on a box):
naming the applied revision (answered 304) against not naming it (the whole
payload fetched, decoded and checked, as a box that could not name it would
do), with the CPU each costs the box, and the box and the server together.

    python -m bench.bench_follow_check [--checks 1000] [--rounds 3]
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from bench.arguments import run_bench
from bench.bench_config_endpoint import Server, cpu_seconds, fetch_headers, fleet_server

FLEET_BOXES = 20
BLOCK = 100
INSTALL_SET = Path(__file__).resolve().parents[1] / "roles" / "vllm_box" / "files" / \
    "install_set.py"
# The command line: (flag, default, help), each passed to run() by name.
OPTIONS = (
    ("--checks", 1000, "requests of each kind per round (1000)"),
    ("--rounds", 3, "rounds (3)"),
)


@dataclass
class Cost:
    """What one kind of request has cost so far, summed over its blocks."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    wire_bytes: int = 0


def revisions(server: Server) -> dict[str, str]:
    """Each box's current ETag, from one full fetch each."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    tags = {}
    for box in server.fleet.boxes:
        connection.request("GET", "/vllm/config", headers=fetch_headers(server.fleet, box))
        answer = connection.getresponse()
        answer.read()
        tags[box] = answer.headers["ETag"]
    connection.close()
    return tags


def wire_size(answer: http.client.HTTPResponse, body: bytes) -> int:
    """Bytes of the answer on the wire: status line, headers, blank line, body."""
    head = sum(len(f"{name}: {value}\r\n") for name, value in answer.getheaders())
    return len(f"HTTP/1.1 {answer.status} {answer.reason}\r\n") + head + 2 + len(body)


def block(connection: http.client.HTTPConnection, server: Server, tags: dict[str, str] | None,
          count: int, cost: Cost) -> None:
    """``count`` requests cycling over the boxes: full fetches, or checks naming the revision."""
    boxes = server.fleet.boxes
    expected = 200 if tags is None else 304
    cpu_before = cpu_seconds(server.pid)
    started = time.perf_counter()
    for index in range(count):
        box = boxes[index % len(boxes)]
        headers = fetch_headers(server.fleet, box)
        if tags is not None:
            headers["If-None-Match"] = tags[box]
        connection.request("GET", "/vllm/config", headers=headers)
        answer = connection.getresponse()
        body = answer.read()
        if answer.status != expected or (expected == 304 and body):
            raise RuntimeError(f"expected {expected} for {box}, got {answer.status} "
                               f"with {len(body)} bytes of body")
        cost.wire_bytes += wire_size(answer, body)
    cost.wall_s += time.perf_counter() - started
    cost.cpu_s += cpu_seconds(server.pid) - cpu_before


def one_round(server: Server, tags: dict[str, str], checks: int) -> tuple[Cost, Cost]:
    """1,000 (``checks``) of each kind, in alternating blocks: (full fetches, 304 checks)."""
    full, not_modified = Cost(), Cost()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    for done in range(0, checks, BLOCK):
        size = min(BLOCK, checks - done)
        block(connection, server, None, size, full)
        block(connection, server, tags, size, not_modified)
    connection.close()
    return full, not_modified


def box_program() -> ModuleType:
    """The box program, imported from its file (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("llmao_box_program", INSTALL_SET)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def follower_checks(server: Server, tags: dict[str, str], checks: int,
                    named: bool) -> tuple[float, float]:
    """``checks`` follow checks as the box program makes them, cycling over the boxes, each
    naming its applied revision or not: (the box's CPU seconds, the server's)."""
    program = box_program()
    followers = []
    for box in server.fleet.boxes:
        settings = program.read_settings({"LLMAO_URL": f"http://127.0.0.1:{server.port}",
                                          "FLEET_KEY": server.fleet.fleet_key,
                                          "LLMAO_HOST": box}, fetching=True)
        applied = program.Applied(tags[box].strip('"') if named else None, 1.0)
        console = program.Console(json_mode=True, stamped=True)  # as the follow program's
        followers.append((program.Follower(settings, console), applied))
    # The line each check writes goes where a box's follow.log would be: here, nowhere.
    with open(os.devnull, "w") as log, contextlib.redirect_stderr(log):
        server_before, box_before = cpu_seconds(server.pid), time.process_time()
        for index in range(checks):
            follower, applied = followers[index % len(followers)]
            if (follower.check(applied) is None) != named:
                raise RuntimeError("a check naming the applied revision was not answered "
                                   "304, or one not naming it was")
        return time.process_time() - box_before, cpu_seconds(server.pid) - server_before


def run(checks: int, rounds: int) -> None:
    print(f"bench_follow_check: {checks:,} full fetches and {checks:,} checks answered 304 per "
          f"round, {rounds} rounds, one keep-alive connection, {FLEET_BOXES} boxes; "
          f"load average {os.getloadavg()[0]:.1f}")
    with fleet_server(FLEET_BOXES) as server:
        tags = revisions(server)
        results = [one_round(server, tags, checks) for _ in range(rounds)]
        as_boxes = [(follower_checks(server, tags, checks, named=False),
                     follower_checks(server, tags, checks, named=True))
                    for _ in range(rounds)]
    ratios = {
        "bytes sent": [nm.wire_bytes / full.wire_bytes for full, nm in results],
        "server CPU": [nm.cpu_s / full.cpu_s if full.cpu_s else float("nan")
                       for full, nm in results],
        "client wall time": [nm.wall_s / full.wall_s for full, nm in results],
    }
    full, nm = results[0]
    print(f"  one answer on the wire: full fetch {full.wire_bytes / checks:,.0f} bytes, "
          f"304 {nm.wire_bytes / checks:,.0f} bytes")
    print(f"  {checks:,} full fetches: {statistics.median(f.wall_s for f, _ in results):.3f} s, "
          f"{checks:,} checks answered 304: "
          f"{statistics.median(n.wall_s for _, n in results):.3f} s (median round)")
    print(f"  server CPU per answer: full fetch "
          f"{statistics.median(f.cpu_s for f, _ in results) * 1e6 / checks:.0f} us, "
          f"304 {statistics.median(n.cpu_s for _, n in results) * 1e6 / checks:.0f} us "
          "(median round)")
    for name, values in ratios.items():
        spread = ", ".join(f"{value:.2f}" for value in values)
        print(f"  P8 304 checks / full fetches, {name}: {statistics.median(values):.2f} "
              f"(rounds: {spread}; target <= 0.5)")
    box_ratios = {
        "the box's CPU": [named[0] / full[0] for full, named in as_boxes],
        "box and server CPU": [sum(named) / sum(full) for full, named in as_boxes],
    }
    full, named = as_boxes[0]
    print(f"  as the follow program checks: the box's CPU per check {full[0] * 1e6 / checks:.0f} "
          f"us fetching the payload, {named[0] * 1e6 / checks:.0f} us answered 304")
    for name, values in box_ratios.items():
        spread = ", ".join(f"{value:.2f}" for value in values)
        print(f"  P8 follow checks answered 304 / fetching the payload, {name}: "
              f"{statistics.median(values):.2f} (rounds: {spread}; target <= 0.5)")


def main(argv: list[str] | None = None) -> int:
    return run_bench("bench_follow_check", __doc__, OPTIONS, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
