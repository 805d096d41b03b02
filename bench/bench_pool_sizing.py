"""P12, P13: how fast a pool grows under sustained saturation, and what it pays while idle.

Both run the pool planner itself (``pool_plan.plan_pools``, what ``llmao.fleet.box_pool`` acts
on) over a simulated day of reconcile passes (one every ``--pass-s`` seconds), against a load
that needs some number of boxes each pass: busy spells and quiet ones. A box the planner rents
is routed ``--boot-s`` seconds later (a box's own boot: image, weights, vLLM start); while the
routed boxes are fewer than the load needs, the pool's model is saturated; a pass with no load
runs no request on any box. Drains end after ``rollout.drain_s`` (30 s), then the box is
returned. Offers are plentiful and within the budget, so only the sizing rules decide.

Printed:

- P12: passes from the first pass the model reads saturated (the saturated flag, itself
  ``fleet.saturated_passes`` of waiting) to the new box routed, less the box's own boot
  passes; goal <= 2. Each busy spell's first growth is counted, and the worst is printed.
- P13: box-hours paid while idle (a box rented during a pass with no request on any box) of
  the pool sized by load, over the same of a fixed fleet of ``boxes.max`` boxes under the same
  load; goal <= 0.5.

What this does not measure: the providers' own create latency and the real boot, which the
end-to-end test runs (tests/integration/test_pool_box_boot.py); those add to P12's boot term.

    python -m bench.bench_pool_sizing [--pass-s 30] [--boot-s 120] [--idle-s 1800]
"""

from __future__ import annotations

import math
from dataclasses import replace

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import HostRow
from ansible_collections.llmao.fleet.plugins.module_utils.pool_config import Budget, Offer, Pool
from ansible_collections.llmao.fleet.plugins.module_utils.pool_plan import (
    RENT,
    RETURN,
    BoxSignal,
    Member,
    PoolMemory,
    PoolView,
    plan_pools,
)
from ansible_collections.llmao.fleet.plugins.module_utils.provider_rent import RentOffer
from bench.arguments import run_bench

DRAIN_S = 30.0
MAX_BOXES = 4
PRICE = 0.5
# (hours, boxes the load needs): a day of busy and quiet spells.
DAY = ((1.0, 0), (2.0, 3), (3.0, 0), (1.0, 2), (4.0, 0), (1.5, 4), (2.5, 1), (9.0, 0))


def needs(pass_s: int) -> list[int]:
    """The boxes the load needs at each pass of the day."""
    return [boxes for hours, boxes in DAY for _ in range(round(hours * 3600 / pass_s))]


class SimulatedPool:
    """The instances of one pool: when each was rented, and whether it is routed yet."""

    def __init__(self, pool: Pool, boot_s: int) -> None:
        self.pool, self.boot_s = pool, boot_s
        self.rented_at: dict[str, float] = {}
        self.memory = PoolMemory()
        self.serial = 0

    def routed(self, now: float) -> int:
        return sum(1 for at in self.rented_at.values() if now - at >= self.boot_s)

    def step(self, now: float, need: int) -> list[str]:
        """One pass: the planner's decisions carried out; the kinds decided."""
        routed = self.routed(now)
        members = tuple(Member(box, box, price=PRICE) for box in sorted(self.rented_at))
        signals = {box: BoxSignal(running=min(need, 1) if box not in self.memory.draining
                                  else 0, booting=now - at < self.boot_s)
                   for box, at in self.rented_at.items()}
        offers = tuple(RentOffer("vast", str(n), "RTX 4090", 1, 24, PRICE) for n in range(4))
        view = PoolView(self.pool, members, None, need > routed, signals, offers, self.memory)
        plan = plan_pools({self.pool.name: view}, Budget(100.0), now, DRAIN_S)
        self.memory = plan.memory[self.pool.name]
        for decision in plan.decisions:
            if decision.kind == RENT:
                self.serial += 1
                box = f"{self.pool.name}-{self.serial:08d}"
                self.rented_at[box] = now
                self.memory = replace(self.memory, pending={})  # listed at once here
            elif decision.kind == RETURN:
                self.rented_at.pop(decision.box, None)
        return [decision.kind for decision in plan.decisions]


def simulate(pass_s: int, boot_s: int, idle_s: int) -> tuple[int, float, float]:
    """Worst P12 (passes beyond the boot), and the idle box-hours of the pool and the fixed
    fleet."""
    pool = Pool("chat", "vast", Offer(("RTX 4090",), PRICE), 0, MAX_BOXES,
                (HostRow(0, "gemma", 8001, "gemma"),), "img", 3, float(idle_s))
    simulated = SimulatedPool(pool, boot_s)
    boot_passes = math.ceil(boot_s / pass_s)
    worst, saturated_since, idle_pool, idle_fixed = 0, None, 0.0, 0.0
    for index, need in enumerate(needs(pass_s)):
        now = index * float(pass_s)
        before = simulated.routed(now)
        if need > before and saturated_since is None:
            saturated_since = index
        if need <= before:
            saturated_since = None
        simulated.step(now, need)
        if saturated_since is not None and simulated.routed(now + pass_s) > before:
            worst = max(worst, index + 1 - saturated_since - boot_passes)
            saturated_since = None
        if need == 0:
            idle_pool += len(simulated.rented_at) * pass_s / 3600
            idle_fixed += MAX_BOXES * pass_s / 3600
    return worst, idle_pool, idle_fixed


def run(pass_s: int, boot_s: int, idle_s: int) -> None:
    worst, idle_pool, idle_fixed = simulate(pass_s, boot_s, idle_s)
    print(f"P12 passes from saturation to the new box routed, beyond its boot "
          f"({boot_s} s = {math.ceil(boot_s / pass_s)} passes of {pass_s} s): worst {worst} "
          f"(goal <= 2)")
    print(f"P13 idle box-hours, pool sized by load {idle_pool:.2f} / fixed fleet of "
          f"{MAX_BOXES} {idle_fixed:.2f} = {idle_pool / idle_fixed:.3f} (goal <= 0.5)")


def main(argv: list[str] | None = None) -> int:
    return run_bench("bench_pool_sizing", __doc__,
                     [("--pass-s", 30, "seconds between reconcile passes"),
                      ("--boot-s", 120, "a rented box's boot, rent to routed"),
                      ("--idle-s", 1800, "the pool's idle_s")], run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
