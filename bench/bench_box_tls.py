"""P10: a reconcile pass of 300 servers over HTTPS (box TLS, every probe and scrape verifying
the box's certificate against the fleet CA) over the same pass over plain HTTP (target
<= 1.3). Printed, never asserted.

The fleet is bench_reconcile's: 300 stub vLLM servers on loopback (100 boxes of three) against
the LiteLLM contract fake and the real ``llmao-server``. Each box's stubs serve a certificate of
a fleet CA made for the run, signed by llmao's own code for the box's address. The same fleet
runs over HTTP, then with ``box_tls``; in each, a first pass registers every server, then steady
passes (nothing to change) are timed through the modules' logic in-process, and their medians
compared. Both fleets cannot run at once (600 stub processes), so the machine's load may weigh
on one more than the other: the rounds' spread is printed.

A box is 200 ms from each answer in one of two ways, and each is measured:

- far: 200 ms away (the stub's ``round_trip_s``), as a rented box across the internet is: every
  flight of bytes (a TLS ClientHello, a request, requests pipelined together) comes back a round
  trip after it left, and vLLM answers quickly. HTTPS then waits for its handshake where HTTP
  waits for ``/health`` before it asks the rest, so what it adds is the handshakes' CPU. The
  target is judged here.
- slow: each answer takes 200 ms (``answer_delay_s``, P4's fleet), and vLLM answers requests
  pipelined on one connection in turn. Under box TLS a probe pipelines its three requests on one
  connection (a second handshake costs more than it saves), so here it waits for three answers
  in a row where plain HTTP waits for two: a bound on what a busy box costs, printed beside.

    python -m bench.bench_box_tls [--boxes N] [--rounds N]
"""

from __future__ import annotations

import secrets
import statistics
import tempfile
import time
from pathlib import Path

from bench.arguments import run_bench
from bench.bench_reconcile import ANSWER_DELAY_S, SERVERS_PER_BOX, module_chain, timed
from rig.boxes import free_port
from rig.litellm_process import start_litellm
from rig.local_fleet import LocalFleet, loopback_boxes, one_model_hosts, start_stubs, stop_stubs
from tests.llmao_process import start_llmao_server
from tests.tls_files import make_test_ca

OPTIONS = [("--boxes", 100, "boxes of three servers"), ("--rounds", 3, "steady passes timed")]
# How the stubs are 200 ms from an answer (their behaviour key), and what that says.
MODELS = {
    "far": ("round_trip_s", "boxes 200 ms away (each flight answered a round trip later)"),
    "slow": ("answer_delay_s", "boxes taking 200 ms over each answer, pipelined ones in turn"),
}


def say(text: str) -> None:
    print(f"bench_box_tls: {text}", flush=True)


def steady_passes(folder: Path, boxes: list[str], rounds: int, tls: bool,
                  delay: str) -> list[float]:
    """A first pass, then ``rounds`` timed steady passes, over HTTPS when ``tls``, the stubs
    200 ms from each answer by their behaviour key ``delay``."""
    folder.mkdir(parents=True)
    master_key = "sk-bench-" + secrets.token_urlsafe(12)
    local = LocalFleet(folder / "fleet", one_model_hosts(boxes, SERVERS_PER_BOX))
    port = free_port()
    sections = {"server": {"url": f"http://127.0.0.1:{port}",
                           "state": str(folder / "state.sqlite3")}}
    files = {}
    if tls:
        ca = make_test_ca(folder / "ca")
        sections["box_tls"] = {"ca_cert": str(ca.cert), "ca_key": str(ca.key)}
        files = {box: ca.leaf(folder / "boxes" / box, box) for box in boxes}
    with start_litellm("fake", master_key=master_key, log_dir=folder) as litellm:
        fleet = local.write(litellm={"url": litellm.url, "master_key": master_key}, **sections)
        say(f"starting {len(boxes) * SERVERS_PER_BOX} stub servers "
            f"({'https' if tls else 'http'}) ...")
        stubs = start_stubs(fleet, {box: {"*": {delay: ANSWER_DELAY_S}} for box in boxes},
                            tls=files)
        try:
            with start_llmao_server(local.config_path, local.models_path, folder, port=port):
                registered = module_chain(fleet)
                if registered != len(boxes) * SERVERS_PER_BOX:
                    raise RuntimeError(f"the first pass registered {registered} servers, not "
                                       f"{len(boxes) * SERVERS_PER_BOX}")
                return [timed(lambda: module_chain(fleet)) for _ in range(rounds)]
        finally:
            stop_stubs(stubs)


def run(boxes: int, rounds: int) -> None:
    names = loopback_boxes(boxes)
    began = time.perf_counter()
    for model, (delay, what) in MODELS.items():
        with tempfile.TemporaryDirectory(prefix="bench-box-tls-") as scratch:
            plain = steady_passes(Path(scratch) / "http", names, rounds, False, delay)
            secure = steady_passes(Path(scratch) / "https", names, rounds, True, delay)
        over_http, over_https = statistics.median(plain), statistics.median(secure)
        say(f"{model}: steady pass of {boxes * SERVERS_PER_BOX} servers, {what}: over HTTPS "
            f"{over_https:.2f} s ({', '.join(f'{t:.2f}' for t in secure)}), over HTTP "
            f"{over_http:.2f} s ({', '.join(f'{t:.2f}' for t in plain)}), ratio "
            f"{over_https / over_http:.2f}" + (" (target <= 1.3)" if model == "far" else ""))
    say(f"{time.perf_counter() - began:.0f} s in all")


def main(argv: list[str] | None = None) -> int:
    return run_bench("bench_box_tls", __doc__, OPTIONS, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
