"""Pools end to end: the fake Vast (rig/rent_api.py) really boots each box it rents (a local box
running Vast's provision.sh, tests/pool_boxes.py), the real llmao-server (``fleet.binding:
enrolled``: a name binds only by the bootstrap token minted for it), LiteLLM's real proxy, and
``playbooks/reconcile.yml`` run pass after pass as an operator runs it.

One scenario, since each pass builds on what the one before left (pool memory, verdicts):

1. the empty pool rents a box up to ``boxes.min``; it boots, is bound by its token as a member
   of the pool, is probed at the address the listing gives, Healthy, and routed;
2. streaming clients through LiteLLM keep its scheduler full (the vLLM double runs two
   requests at once, the others wait, and says so in ``/metrics``): saturated, the pool rents
   a second box, which is routed and answers; the load asks for a third, which the budget
   refuses with its figures; not one request fails;
3. the load stopped (a trickle of chats goes on), the pool drains its dearest box out of
   LiteLLM and destroys it ``rollout.drain_s`` later; not one request fails;
4. the provider interrupts the last box: it is replaced (rent first, then returned) and the
   new box is routed within ``scale_up_passes + 2`` passes;
5. an instance of the same account without llmao's label is never touched, and no secret
   shows in any output.

A create that times out, a 429 with Retry-After and the budget are also covered pass by pass
against the real server in tests/integration/test_box_pool_pass.py.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from ansible_collections.llmao.fleet.plugins.module_utils.pool_config import read_label
from llmao_server.store import open_store
from rig.boxes import free_port
from rig.chat_load import ChatLoad, Outcome, Shape
from rig.fleet_files import strong_secret
from rig.litellm_process import LiteLLMProcess, start_litellm
from rig.local_fleet import MODEL, LocalFleet
from rig.rent_api import Instance, RentApi, serve_rent_api, vast_offer
from rig.web import answers
from tests.llmao_process import start_llmao_server
from tests.pool_boxes import RentedBoxes
from tests.reconcile_run import run_reconcile

pytestmark = [pytest.mark.litellm, pytest.mark.slow]

VAST_KEY = "vast-rent-key-" + "e" * 30
SCALE_UP_PASSES = 1
# The double's scheduler runs two requests at once; eight clients keep four waiting on two
# boxes, so a third is asked for (and refused by the budget: 0.40 + 0.45 + 0.50 > 1.0).
MAX_NUM_SEQS, CLIENTS = 2, 8
STREAM = Shape(stream=True, min_tokens=20)  # 20 tokens, 0.05 s apart: 1 s a request
BOOT_S = 90.0


@dataclass
class PoolRig:
    """Everything the scenario acts on and reads."""

    local: LocalFleet
    api: RentApi
    boxes: RentedBoxes
    litellm: LiteLLMProcess
    master_key: str
    state: Path
    outputs: list[str]

    def reconcile(self) -> str:
        """One pass; it must succeed."""
        run = run_reconcile(self.local.inventory_path)
        self.outputs.append(run.output)
        assert run.returncode == 0, run.output[-4000:]
        return run.output

    def passes_until(self, done: Callable[[], bool], limit: int, what: str) -> int:
        """Passes run until ``done`` holds (at most ``limit``); how many it took."""
        for count in range(1, limit + 1):
            self.reconcile()
            if done():
                return count
        raise AssertionError(f"{what}: not after {limit} pass(es); the last said:\n"
                             f"{self.outputs[-1][-4000:]}")

    def labelled(self) -> dict[str, Instance]:
        """The pool's instances (llmao's label), by box name."""
        return {read_label(i.label)[1]: i for i in list(self.api.instances.values())
                if read_label(i.label)}

    def routes(self, box: str) -> list[str]:
        client = LiteLLM(self.litellm.url, self.master_key, 30)
        return [route.id for route in client.routes() if route.id.startswith(f"llmao:{box}:")]

    def bound_in_pool(self, box: str) -> bool:
        store = open_store(str(self.state))
        try:
            binding = {b.box: b for b in store.bindings_since(0)}.get(box)
        finally:
            store.close()
        return binding is not None and binding.bound and binding.confirmed \
            and binding.pool == "chat"

    def wait_booted(self, instance: Instance) -> None:
        """Until its vLLM double answers at the listed address (or its box died)."""
        deadline = time.monotonic() + BOOT_S
        while time.monotonic() < deadline and self.boxes.alive(instance.instance_id):
            if answers(f"http://{instance.address}:8001/health"):
                return
            time.sleep(0.3)
        log = self.boxes.folder / instance.instance_id / "supervisord.out"
        raise AssertionError(f"box {instance.instance_id} did not boot:\n"
                             f"{log.read_text()[-2000:] if log.exists() else ''}")


class Clients:
    """``count`` clients, each streaming one request after the other through LiteLLM: a closed
    loop, so the load stays ``count`` requests in flight whatever the fleet's size (the
    saturation is steady and no queue grows past it). Each request is a one-request
    :class:`ChatLoad`, so its outcome is judged as every load's is."""

    def __init__(self, url: str, key: str, count: int, shape: Shape) -> None:
        self.url, self.key, self.shape = url, key, shape
        self.loads: list[ChatLoad] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._client, daemon=True)
                        for _ in range(count)]

    def __enter__(self) -> Clients:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(180)

    def _client(self) -> None:
        while not self.stopping.is_set():
            load = ChatLoad(self.url, self.key, MODEL, rate_per_s=1.0, count=1, max_s=60,
                            mix=(self.shape,))
            with self.lock:
                self.loads.append(load)
            load.start()
            load.join()

    def outcomes(self) -> list[Outcome]:
        with self.lock:
            return [outcome for load in self.loads for outcome in load.outcomes()]


def summary(outcomes: list[Outcome]) -> str:
    failed = [outcome for outcome in outcomes if not outcome.ok]
    by_server = Counter(outcome.answered_by for outcome in outcomes if outcome.ok)
    return "\n".join([f"{len(outcomes)} request(s), {len(failed)} failed, answered by "
                      f"{dict(by_server)}"] + [f"  {o.shape.label}: {o.reason}" for o in failed])


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoolRig]:
    folder = tmp_path_factory.mktemp("pools-e2e")
    master_key = strong_secret("sk-pools-e2e-")
    boxes = RentedBoxes(folder / "boxes", behaviour={"*": {"token_delay_s": 0.05}})
    litellm = start_litellm("real", master_key=master_key, log_dir=folder)
    try:
        with serve_rent_api() as api:
            api.vast_offers = [vast_offer(41 + n, "RTX 4090", price)
                               for n, price in enumerate((0.40, 0.45, 0.50, 0.55))]
            api.starter, api.stopper = boxes.start, boxes.stop
            local = LocalFleet(folder / "fleet", {}, recipes={
                MODEL: {"args": ["--max-num-seqs", str(MAX_NUM_SEQS)]}})
            port, state = free_port(), folder / "state.sqlite3"
            local.write_reconciled(
                litellm.url, master_key, port, state,
                fleet={"binding": "enrolled", "saturated_passes": 1,
                       "probe_connect_timeout_s": 2, "probe_timeout_s": 5},
                providers={"vast": {"api_key": VAST_KEY, "url": api.vast_url}},
                pools={"chat": {"provider": "vast", "boxes": {"min": 1, "max": 3},
                                "serve": [[MODEL, 8001]], "scale_up_passes": SCALE_UP_PASSES,
                                "idle_s": 1,
                                "offer": {"gpu_names": ["RTX 4090"],
                                          "max_usd_per_hour": 0.6}}},
                budget={"max_usd_per_hour": 1.0}, rollout={"drain_s": 2})
            with start_llmao_server(local.config_path, local.models_path, folder, port=port,
                                    workers=2):
                try:
                    yield PoolRig(local, api, boxes, litellm, master_key, state, [])
                finally:
                    boxes.stop_all()
    finally:
        litellm.stop()


def test_a_pool_grows_under_load_shrinks_idle_and_replaces_an_interrupted_box(rig):
    stranger = rig.api.add_unlabelled("vast")

    # 1. Up to boxes.min: rented, booted, bound by its token, Healthy and routed.
    rig.passes_until(lambda: len(rig.labelled()) == 1, 1, "the first rent")
    (first,) = rig.labelled()
    rig.wait_booted(rig.labelled()[first])
    rig.passes_until(lambda: rig.routes(first) != [], 2, f"{first} routed")
    assert rig.bound_in_pool(first)

    # 2. Saturated under a streaming load: a second box, routed; a third refused (budget).
    with Clients(rig.litellm.url, rig.master_key, CLIENTS, STREAM) as load:
        time.sleep(3)
        saturated_at = len(rig.outputs)
        rig.passes_until(lambda: len(rig.labelled()) == 2, SCALE_UP_PASSES,
                         "the rent on saturation")
        (second,) = set(rig.labelled()) - {first}
        assert f"chat: rent {second}: saturated for" in rig.outputs[-1]
        rig.wait_booted(rig.labelled()[second])
        rig.passes_until(lambda: rig.routes(second) != [], 2, f"{second} routed")
        routed_after = len(rig.outputs) - saturated_at
        assert rig.bound_in_pool(second)
        assert "past budget.max_usd_per_hour 1" in rig.outputs[-1], rig.outputs[-1][-3000:]
        assert len(rig.labelled()) == 2
        time.sleep(4)  # LiteLLM spreads new requests over both
    grown = load.outcomes()
    assert grown and all(outcome.ok for outcome in grown), summary(grown)
    second_id = rig.labelled()[second].instance_id
    second_address = f"{rig.labelled()[second].address}:8001"
    assert any(o.answered_by == second_address for o in grown), summary(grown)
    assert routed_after <= 2  # the box's boot, then at most two passes to its route

    # 3. Idle: the dearer box is drained out of LiteLLM, then destroyed; chats go on unharmed.
    trickle = ChatLoad(rig.litellm.url, rig.master_key, MODEL, rate_per_s=2, count=2000,
                       max_s=600, mix=(Shape(stream=False),))
    with trickle:
        rig.passes_until(lambda: rig.routes(second) == [], 3, f"{second} drained")
        assert f"chat: drain {second}" in rig.outputs[-1]
        assert second in rig.labelled() and rig.routes(first) != []
        rig.passes_until(lambda: second not in rig.labelled(), 2, f"{second} destroyed")
        assert f"chat: return {second}" in rig.outputs[-1]
        time.sleep(2)
    shrunk = trickle.outcomes()
    assert shrunk and not trickle.failures(), trickle.summary()
    assert not rig.boxes.alive(second_id)

    # 4. Interrupted: replaced (rent first, the old one returned), the new box routed.
    interrupted = rig.labelled()[first]
    rig.api.interrupt(interrupted.instance_id)
    rig.passes_until(lambda: set(rig.labelled()) - {first} != set(), 1, "the replacement")
    assert interrupted.instance_id not in rig.api.instances
    (third,) = rig.labelled()
    rig.wait_booted(rig.labelled()[third])
    replaced_in = 1 + rig.passes_until(lambda: rig.routes(third) != [],
                                       SCALE_UP_PASSES + 1, f"{third} routed")
    assert replaced_in <= SCALE_UP_PASSES + 2 and rig.routes(first) == []

    # 5. The stranger untouched; no secret anywhere.
    assert stranger.instance_id in rig.api.instances
    assert not [call for call in rig.api.calls if stranger.instance_id in call[1]]
    for secret in (*rig.local.secrets(), VAST_KEY):
        assert all(secret not in output for output in rig.outputs)
