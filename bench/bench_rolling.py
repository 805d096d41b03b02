"""P8, first half: rolling a change across three boxes against three single restarts.

The pull path's following fleet of the acceptance test (tests/rolling_fleet.py): three
container boxes booted from the template, following their assignment every ``--follow``
seconds, the real llmao-server, the real LiteLLM proxy, reconcile.yml run back to back. In
the same run it times:

- three single restarts: each box in turn is the only one whose assignment changes (its
  server moves to another listen port), from llmao's reload until the fleet is settled again
  (every box on its revision, routed, no turn active); each one goes through the whole turn:
  asked, drained, ``--drain`` seconds, applied, Healthy, routed;
- one roll: ``max_model_len`` changes for the model, so all three boxes change, one turn at a
  time, from llmao's reload until settled.

Printed (target <= 1.5): the roll's time over the sum of the three single restarts. What the
roll adds is the hand-over between turns (the next box's check, its grant, a reconcile pass),
which a sum of single restarts never pays. Nothing asserts on time. It needs the container
engine, the box image and the LiteLLM venv (``make setup``).

    python -m bench.bench_rolling [--follow 1] [--drain 5]
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.arguments import run_bench
from rig.box_image import ensure_box_image
from rig.dockerd import ensure_engine
from rig.fleet_files import strong_secret
from rig.litellm_process import start_litellm
from tests.rolling_fleet import Knobs, RollingFleet, rolling_fleet

OPTIONS = (
    ("--follow", 1, "rollout.follow_s of the fleet, seconds (1)"),
    ("--drain", 5, "rollout.drain_s of the fleet, seconds (5)"),
)
SETTLE_TIMEOUT_S = 300.0
FIRST_CONTEXT, ROLLED_CONTEXT = 4096, 2048
BEHAVIOUR = {"*": {"load_delay_s": 1.0}}


def timed(fleet: RollingFleet, what: str, **change: object) -> float:
    """Seconds from llmao serving the change until the fleet is settled on it."""
    fleet.change(**change)
    began = time.monotonic()
    fleet.wait(what, fleet.settled, SETTLE_TIMEOUT_S)
    return time.monotonic() - began


def run(follow: int, drain: int) -> None:
    knobs = Knobs(follow_s=follow, drain_s=drain, max_model_len=FIRST_CONTEXT)
    print(f"bench_rolling: three boxes following every {follow} s, drain {drain} s, reconcile "
          f"back to back; load average {os.getloadavg()[0]:.1f}")
    ensure_engine()
    image = ensure_box_image()
    master_key = strong_secret("sk-bench-rolling-")
    with tempfile.TemporaryDirectory(prefix="bench-rolling-") as folder:
        litellm = start_litellm("real", master_key=master_key, log_dir=Path(folder))
        try:
            with rolling_fleet(Path(folder), image, litellm.url, master_key, knobs,
                               BEHAVIOUR) as fleet:
                singles = [timed(fleet, f"{box} alone on its new revision", moved=box)
                           for box in fleet.boxes]
                roll = timed(fleet, "every box rolled", max_model_len=ROLLED_CONTEXT)
        finally:
            litellm.stop()
    shown = ", ".join(f"{seconds:.1f} s" for seconds in singles)
    print(f"  single restarts: {shown} (sum {sum(singles):.1f} s); roll of three: {roll:.1f} s")
    print(f"  P8 roll / sum of single restarts: {roll / sum(singles):.2f} (target <= 1.5)")


def main(argv: list[str] | None = None) -> int:
    return run_bench("bench_rolling", __doc__, OPTIONS, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
