"""P1, P2 and P9: what ``GET /vllm/config`` costs under gunicorn, against a bare WSGI app.

Four servers run side by side on loopback:

- ``llmao-server`` on a 10,000-box fleet with ``fleet.binding: first_fetch``, every
  box bound and confirmed before the rounds, each fetch presenting its box token;
- a bare WSGI app that answers each box's request with the very same bytes,
  run by the same gunicorn configuration (workers, worker class, read time limit);
- ``llmao-server`` on the same fleet with ``fleet.binding: off`` (no token);
- ``llmao-server`` on a 10-box fleet (bound and confirmed too).

Each round drives the first three with many connections (throughput) and the
two llmao servers with one (the latency of a single fetch). The throughput legs
run in slices of one second, one server after the other, the bound llmao
server's slice between those it is compared with (the bare app, binding off),
and every other slice in the reverse order; a round's figure for a server is
what its slices made together. So load from elsewhere on the machine that
grows or fades during a run favours neither side, and a burst of a second or
two is shared by every server of the round rather than landing on one leg (on
a shared machine, whole legs of two seconds gave rounds from 0.67 to 1.29 in
one run; in slices, most runs kept their rounds within 0.15 of each other).
Every figure is the median of its rounds.

P1 is llmao's throughput over the bare app's (target: a median >= 0.85, every
round >= 0.8), the median of the rounds' ratios, each round's beside it, printed
with the server CPU per request of each, which a busy machine moves less; P2 is
the p50
latency of a fetch at 10,000 boxes over 10 boxes (target <= 1.2); P9 is the
throughput without binding over that with a confirmed token, the median of the
rounds' ratios (target <= 1.1: a fetch reads no store). The load
comes from Debian's ``wrk`` when installed, else from a small Python
generator (which then bounds both legs, so its ratios say less). Nothing here
asserts on time: the numbers are printed.

    python -m bench.bench_config_endpoint [--seconds 3] [--rounds 5] [--connections 16]
        [--boxes 10000]
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.arguments import bench_parser
from bench.fleetgen import GeneratedFleet, write_fleet

LARGE_FLEET = 10_000
SMALL_FLEET = 10
WORKERS = 2
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
# Length of a throughput leg's slice, whole seconds (wrk's least duration).
SLICE_S = 1
MAX_SAMPLES_PER_THREAD = 200_000
REPO = Path(__file__).resolve().parents[1]
TOKEN_HEADER = "X-LLMAO-Box-Token"
# Boxes bound at once before the rounds: each confirmation counts a credential attempt
# from the one loopback peer until it succeeds, under admin.attempts.per_peer (5).
BINDING_THREADS = 4


@dataclass(frozen=True)
class Load:
    """One run of the load generator against one server."""

    requests: int
    requests_per_s: float
    p50_ms: float
    failures: int
    # What the generator said of them (wrk's lines), to tell refusals from timeouts.
    failure_lines: str = ""


@dataclass(frozen=True)
class Server:
    """A running server under test: where it listens, its arbiter, the fleet it serves."""

    port: int
    pid: int
    fleet: GeneratedFleet
    # Box name -> its confirmed box token, when the server binds boxes (:func:`bind_all`).
    tokens: Mapping[str, str] = field(default_factory=dict)


# ----------------------------------------------------------------- the bare app


def bare_app(bodies: dict[str, bytes]) -> Callable[..., Any]:
    """The least a WSGI app can do to answer a box: look the name up, return the bytes."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        body = bodies.get(environ.get("HTTP_X_LLMAO_HOST", ""))
        if body is None:
            start_response("404 Not Found", [("Content-Length", "0")])
            return [b""]
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(body)))])
        return [body]

    return app


def serve_bare(config: str, models: str, bind: str, workers: int) -> None:
    """Serve the bare app for a fleet with llmao-server's gunicorn configuration."""
    from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
    from llmao_server.gunicorn_app import GunicornServer, gunicorn_options

    fleet = load_fleet(config, models)
    bodies = {box: assignment.body for box, assignment in fleet.assignments.items()}
    GunicornServer(lambda: bare_app(bodies), gunicorn_options(bind, workers)).run()


# ---------------------------------------------------------------- the servers


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fetch_status(port: int, fleet: GeneratedFleet) -> int | None:
    """The status of one real fetch, or None while nothing answers yet."""
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("GET", "/vllm/config", headers=fetch_headers(fleet, fleet.boxes[0]))
        status = connection.getresponse().status
        connection.close()
        return status
    except OSError:
        return None


def fetch_headers(fleet: GeneratedFleet, box: str, token: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {fleet.fleet_key}", "X-LLMAO-Host": box}
    if token is not None:
        headers[TOKEN_HEADER] = token
    return headers


def bind_all(server: Server) -> Server:
    """Bind and confirm every box of the server's fleet (a first fetch, then one presenting
    the token handed out); the server with the tokens its requests present."""
    def bind(boxes: Sequence[str]) -> dict[str, str]:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        tokens = {}
        for box in boxes:
            token = None
            for _ in range(2):
                connection.request("GET", "/vllm/config",
                                   headers=fetch_headers(server.fleet, box, token))
                answer = connection.getresponse()
                answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"binding {box} answered {answer.status}")
                token = answer.getheader(TOKEN_HEADER) or token
            tokens[box] = token
        connection.close()
        return tokens

    boxes = server.fleet.boxes
    with ThreadPoolExecutor(BINDING_THREADS) as pool:
        shares = pool.map(bind, [boxes[slot::BINDING_THREADS]
                                 for slot in range(BINDING_THREADS)])
        tokens = {box: token for share in shares for box, token in share.items()}
    return Server(server.port, server.pid, server.fleet, tokens)


@contextmanager
def serving(command: Sequence[str], port: int, fleet: GeneratedFleet,
            log_path: Path) -> Iterator[Server]:
    """Run a server until the block ends; ready once a real fetch answers 200."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while fetch_status(port, fleet) != 200:
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"server did not start:\n{tail}")
            time.sleep(0.2)
        yield Server(port, process.pid, fleet)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def with_tokens(server: Server, tokens: Mapping[str, str]) -> Server:
    """The same server, its requests presenting these tokens (the bare app ignores them)."""
    return Server(server.port, server.pid, server.fleet, tokens)


def llmao_command(fleet: GeneratedFleet, port: int, state: Path) -> list[str]:
    return [sys.executable, "-m", "llmao_server.cli", "--config", str(fleet.config_path),
            "--models", str(fleet.models_path), "--bind", f"127.0.0.1:{port}",
            "--workers", str(WORKERS), "--state", str(state)]


@contextmanager
def fleet_server(boxes: int) -> Iterator[Server]:
    """``llmao-server`` on a generated fleet of ``boxes``, all in a folder gone afterwards."""
    with tempfile.TemporaryDirectory(prefix="llmao-bench-") as tmp:
        work = Path(tmp)
        fleet = write_fleet(work / "fleet", boxes)
        port = free_port()
        with serving(llmao_command(fleet, port, work / "state.sqlite3"), port, fleet,
                     work / "llmao.log") as server:
            yield server


def bare_command(fleet: GeneratedFleet, port: int) -> list[str]:
    return [sys.executable, "-m", "bench.bench_config_endpoint", "--serve-bare",
            str(fleet.config_path), str(fleet.models_path), f"127.0.0.1:{port}"]


# ------------------------------------------------------------ load generators


WRK_SCRIPT = """\
local boxes = {%(boxes)s}
local requests = {}
local next_request = 0
init = function(args)
  for i, box in ipairs(boxes) do
    local headers = {["Authorization"] = "Bearer %(key)s", ["X-LLMAO-Host"] = box[1]}
    if box[2] ~= "" then headers["%(token_header)s"] = box[2] end
    requests[i] = wrk.format("GET", "/vllm/config", headers)
  end
end
request = function()
  next_request = next_request %% #requests + 1
  return requests[next_request]
end
"""

WRK_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def wrk_load(server: Server, connections: int, seconds: int, workdir: Path) -> Load:
    """Drive the server with wrk, each request naming the next box of the fleet."""
    script = workdir / "fetch.lua"
    boxes = ", ".join(f'{{"{box}", "{server.tokens.get(box, "")}"}}'
                      for box in server.fleet.boxes)
    fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:  # the script holds the fleet key: owner only
        handle.write(WRK_SCRIPT % {"boxes": boxes, "key": server.fleet.fleet_key,
                                   "token_header": TOKEN_HEADER})
    try:
        result = subprocess.run(
            ["wrk", "--latency", "-t", "1", "-c", str(connections), "-d", f"{seconds}s",
             "-s", str(script), f"http://127.0.0.1:{server.port}"],
            capture_output=True, text=True, check=True, timeout=seconds + 30)
    finally:
        script.unlink()
    return parse_wrk(result.stdout)


def parse_wrk(output: str) -> Load:
    count = re.search(r"(\d+) requests in", output)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    p50 = re.search(r"^\s+50%\s+([\d.]+)(us|ms|s)\s*$", output, re.MULTILINE)
    if not count or not rate or not p50:
        raise RuntimeError(f"cannot read wrk's output:\n{output}")
    failures = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors:.*", output)
    failed = int(failures.group(1)) if failures else 0
    if errors:
        failed += sum(int(n) for n in re.findall(r"\d+", errors.group(0)))
    said = "; ".join(found.group(0).strip() for found in (failures, errors) if found)
    return Load(int(count.group(1)), float(rate.group(1)),
                float(p50.group(1)) * WRK_UNITS_MS[p50.group(2)], failed, said)


def python_load(server: Server, connections: int, seconds: int) -> Load:
    """A bounded stand-in for wrk: one keep-alive connection per thread, for ``seconds``."""
    deadline = time.monotonic() + seconds
    samples: list[list[float]] = [[] for _ in range(connections)]
    failures = [0] * connections
    boxes = server.fleet.boxes

    def drive(slot: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        box = slot
        while time.monotonic() < deadline and len(samples[slot]) < MAX_SAMPLES_PER_THREAD:
            box = (box + connections) % len(boxes)
            started = time.perf_counter()
            connection.request("GET", "/vllm/config",
                               headers=fetch_headers(server.fleet, boxes[box],
                                                     server.tokens.get(boxes[box])))
            answer = connection.getresponse()
            answer.read()
            samples[slot].append(time.perf_counter() - started)
            failures[slot] += answer.status != 200
        connection.close()

    threads = [threading.Thread(target=drive, args=(slot,)) for slot in range(connections)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    every = [sample for slot in samples for sample in slot]
    return Load(len(every), len(every) / elapsed, statistics.median(every) * 1000.0,
                sum(failures))


def cpu_seconds(pid: int) -> float:
    """CPU time used so far by a process and its children (an arbiter and its workers)."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            own_pid, rest = stat.read_text().split(" ", 1)
        except OSError:  # the process ended while we looked
            continue
        fields = rest.rsplit(")", 1)[1].split()
        if int(own_pid) == pid or int(fields[1]) == pid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Leg:
    """One measured leg: the load it took and the server CPU it cost."""

    load: Load
    cpu_ms_per_request: float


def measure(server: Server, connections: int, seconds: int, workdir: Path) -> Leg:
    cpu_before = cpu_seconds(server.pid)
    if shutil.which("wrk"):
        load = wrk_load(server, connections, seconds, workdir)
    else:
        load = python_load(server, connections, seconds)
    cpu = cpu_seconds(server.pid) - cpu_before
    if load.failures:
        raise RuntimeError(f"{load.failures} fetches failed ({load.failure_lines or 'not 200'}): "
                           "the numbers would mean nothing")
    return Leg(load, cpu * 1000.0 / max(load.requests, 1))


def joined(slices: Sequence[Leg]) -> Leg:
    """The slices of one server's leg in a round, as one leg: their requests over their time,
    their server CPU over their requests (the median of their p50s)."""
    requests = sum(part.load.requests for part in slices)
    seconds = sum(part.load.requests / part.load.requests_per_s for part in slices)
    cpu_ms = sum(part.cpu_ms_per_request * part.load.requests for part in slices)
    p50_ms = statistics.median(part.load.p50_ms for part in slices)
    load = Load(requests, requests / seconds, p50_ms, sum(part.load.failures for part in slices))
    return Leg(load, cpu_ms / max(requests, 1))


# ----------------------------------------------------------------------- main


def run(seconds: int, connections: int, rounds: int, boxes: int = LARGE_FLEET) -> None:
    """Start the four servers, bind every box, then measure every leg once per round: the
    throughput legs in slices of :data:`SLICE_S`, in turn (every other slice backwards),
    then the latency legs (every other round backwards).

    Interleaving the legs means a burst of load from elsewhere on the machine
    hits all of them alike; each leg reports its median round. The server CPU
    per request is printed too: on a busy machine it moves less than throughput.
    """
    generator = "wrk" if shutil.which("wrk") else "a Python generator (install wrk for more)"
    print(f"bench_config_endpoint: gunicorn with {WORKERS} workers, load by {generator}; "
          f"{rounds} rounds of {seconds} s per leg (throughput in slices of {SLICE_S} s); "
          f"{connections} connections for throughput, 1 for latency; "
          f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="llmao-bench-") as tmp, ExitStack() as running:
        work = Path(tmp)
        large = write_fleet(work / "large", boxes, binding="first_fetch")
        unbound = write_fleet(work / "unbound", boxes)
        small = write_fleet(work / "small", SMALL_FLEET, binding="first_fetch")
        ports = [free_port() for _ in range(4)]
        llmao = running.enter_context(serving(
            llmao_command(large, ports[0], work / "large.sqlite3"), ports[0], large,
            work / "llmao-large.log"))
        bare = running.enter_context(serving(
            bare_command(large, ports[1]), ports[1], large, work / "bare.log"))
        off = running.enter_context(serving(
            llmao_command(unbound, ports[2], work / "unbound.sqlite3"), ports[2], unbound,
            work / "llmao-unbound.log"))
        small_llmao = running.enter_context(serving(
            llmao_command(small, ports[3], work / "small.sqlite3"), ports[3], small,
            work / "llmao-small.log"))
        started = time.monotonic()
        llmao, small_llmao = bind_all(llmao), bind_all(small_llmao)
        print(f"  bound and confirmed {boxes:,} boxes in {time.monotonic() - started:.1f} s")
        bare = with_tokens(bare, llmao.tokens)  # the very same requests
        # The compared legs side by side: bare | llmao | off.
        throughput = {"bare": bare, "llmao": llmao, "off": off}
        latency = {"large_one": llmao, "small_one": small_llmao}
        results: dict[str, list[Leg]] = {name: [] for name in [*throughput, *latency]}
        slices = max(seconds // SLICE_S, 1)
        for number in range(rounds):
            parts: dict[str, list[Leg]] = {name: [] for name in throughput}
            for part in range(slices):
                order = list(throughput.items())
                for name, server in order if (number + part) % 2 == 0 else reversed(order):
                    parts[name].append(measure(server, connections, SLICE_S, work))
            for name, legs in parts.items():
                results[name].append(joined(legs))
            order = list(latency.items())
            for name, server in order if number % 2 == 0 else reversed(order):
                results[name].append(measure(server, 1, seconds, work))
    report(results, boxes)


def report(results: dict[str, list[Leg]], boxes: int) -> None:
    rate = {name: statistics.median(leg.load.requests_per_s for leg in runs)
            for name, runs in results.items()}
    cost = {name: statistics.median(leg.cpu_ms_per_request for leg in runs)
            for name, runs in results.items()}
    p50 = {name: statistics.median(leg.load.p50_ms for leg in runs)
           for name, runs in results.items()}
    # Each round's legs ran back to back, so their ratio is the least touched by load
    # from elsewhere: P1 and P9 are the medians of the rounds' ratios, spreads beside.
    rounds = [mine.load.requests_per_s / bare.load.requests_per_s
              for mine, bare in zip(results["llmao"], results["bare"], strict=True)]
    print(f"  P1 throughput at {boxes:,} boxes, every box bound: llmao "
          f"{rate['llmao']:,.0f} req/s, bare WSGI {rate['bare']:,.0f} req/s, ratio "
          f"{statistics.median(rounds):.2f} (rounds {' '.join(f'{r:.2f}' for r in rounds)}; "
          f"target: median >= 0.85, every round >= 0.8)")
    print(f"     server CPU per request: llmao {cost['llmao']:.3f} ms, "
          f"bare WSGI {cost['bare']:.3f} ms, ratio {cost['bare'] / cost['llmao']:.2f}")
    print(f"  P2 p50 of one fetch: {boxes:,} boxes {p50['large_one']:.3f} ms, "
          f"{SMALL_FLEET} boxes {p50['small_one']:.3f} ms, "
          f"ratio {p50['large_one'] / p50['small_one']:.2f} (target <= 1.2)")
    costs = sorted(off.load.requests_per_s / mine.load.requests_per_s
                   for mine, off in zip(results["llmao"], results["off"], strict=True))
    print(f"  P9 a fetch with a confirmed box token over one without binding: "
          f"{statistics.median(costs):.2f} (rounds {costs[0]:.2f} to {costs[-1]:.2f}; "
          f"binding off {rate['off']:,.0f} req/s; server CPU per request "
          f"{cost['llmao'] / cost['off']:.2f} of it; target <= 1.1)")


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("bench_config_endpoint", __doc__, [
        ("--seconds", 3, "length of one leg in one round, whole seconds (3)"),
        ("--rounds", 5, "rounds over every leg (5)"),
        ("--connections", 16, "concurrent connections of the throughput legs (16)"),
        ("--boxes", LARGE_FLEET, f"boxes of the large fleet ({LARGE_FLEET})"),
    ])
    parser.add_argument("--serve-bare", nargs=3, metavar=("CONFIG", "MODELS", "BIND"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_bare:
        serve_bare(*args.serve_bare, WORKERS)
        return 0
    run(args.seconds, args.connections, args.rounds, args.boxes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
