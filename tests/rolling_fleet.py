"""A following fleet, for the pull path's rolling-change acceptance test and P8's benchmark.

Three container boxes (real supervisord, the vLLM stub) serve one model, each booted as the
Vast template boots a box (tests/box/template_boot.py), with ``rollout.follow_s`` set so each
installs its follow program. The real ``llmao-server`` (gunicorn, several workers) serves them
over HTTPS on the container bridge; the real LiteLLM proxy routes to them through the ports the
engine published (the docker provider's listing); ``ansible-playbook playbooks/reconcile.yml``
runs back to back in a thread, as a short timer would. A change is a new models.yaml and a
SIGHUP to llmao, which every box then follows on its own.

What the fleet is doing is read where an operator reads it: llmao's admin observations (each
box's applied revision, the turns) and LiteLLM's listing (what is routed).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from rig import web
from rig.background import Background
from rig.boxes import Box, free_port, host_gateway_address, start_box
from rig.chat_load import ChatLoad, Shape
from rig.litellm_process import LiteLLMProcess
from rig.local_fleet import LocalFleet, one_model_hosts
from rig.route_watch import RouteWatch
from rig.tls import make_server_tls
from tests.box.template_boot import boot, template_env
from tests.llmao_process import LlmaoServer, start_llmao_server
from tests.reconcile_run import ANSIBLE_PLAYBOOK, REPO, PlaybookRun, run_reconcile

MODEL = "roll-model"
BOX_COUNT = 3
LISTEN_PORT = 8001
OTHER_PORT = 8002  # where a box's server moves, for a change of that box alone
SERVER = f"{MODEL}-{LISTEN_PORT}"  # one_model_hosts names each server model-port
WORKERS = 3
SETTLE_TIMEOUT_S = 240.0
PASS_PAUSE_S = 0.5
# A pass's time limit, and its lease's: a pass killed at the limit leaves no lease that would
# keep the next passes from writing for longer (as an operator sets both alike, see
# docs/reconcile-schedule.md).
PASS_TIMEOUT_S = 300
FOLLOW_LOG = "/data/llmao/follow.log"
ACTIVE_PHASES = ("draining", "drained")
PROVISION = REPO / "playbooks" / "provision.yml"
# What both acceptance tests (pull and push) drive the fleet with: a stub that streams at a
# known pace, refuses one context at start as vLLM refuses a bad value, and a steady chat load
# where a quarter of the requests are streams of several seconds.
TOKEN_DELAY_S = 0.05
LONG_STREAM_TOKENS = 80  # 4 s at the stub's pace
GOOD_CONTEXT, BAD_CONTEXT = 2048, 3072
BEHAVIOUR = {"*": {"token_delay_s": TOKEN_DELAY_S, "load_delay_s": 1.0,
                   "refuse_args": [f"--max-model-len={BAD_CONTEXT}"]}}
DRAIN_S = LONG_STREAM_TOKENS * TOKEN_DELAY_S + 3  # longer than the longest stream
MIX = (Shape(stream=False), Shape(stream=True), Shape(stream=False),
       Shape(stream=True, min_tokens=LONG_STREAM_TOKENS))
RATE_PER_S = 2.0
PROVISION_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Knobs:
    """The settings a scenario picks: how often boxes check (None: they do not follow, changes
    are pushed), how long a drain waits, the grace a (re)started server has to answer, and the
    model's context at boot."""

    follow_s: float | None = 1.0
    drain_s: float = 6.0
    health_grace_s: float = 30.0
    max_model_len: int = 4096


# The pull path's fleet checks every second; the push path's boxes do not follow.
FOLLOWING = Knobs(follow_s=1.0, drain_s=DRAIN_S, health_grace_s=25)
PUSHED = Knobs(follow_s=None, drain_s=DRAIN_S, health_grace_s=25)


class ReconcileLoop(Background):
    """reconcile.yml run back to back in a thread until stopped; every run is kept."""

    def __init__(self, inventory: Path, env: Mapping[str, str]) -> None:
        super().__init__("reconcile-loop", PASS_PAUSE_S)
        self.inventory = inventory
        self.env = dict(env)
        self.runs: list[tuple[float, float, PlaybookRun]] = []  # (began, ended, run)
        # Held by each pass; a test holds it to run passes of its own at chosen moments.
        self._turn = threading.RLock()

    @contextmanager
    def held(self) -> Iterator[None]:
        """No pass of the loop's runs in the block (one under way ends first); ``step()``
        called in it runs a pass then and there, so a test knows the interval between two."""
        with self._turn:
            yield

    def passes_since(self, began: float) -> list[PlaybookRun]:
        return [run for start, _, run in self.runs if start >= began]

    def last_output(self) -> str:
        return self.runs[-1][2].output if self.runs else "(no reconcile pass ran)"

    def report(self) -> str:
        """For a failed test: each pass's time and status, the last failed pass's output (a
        pass that hung leaves the lease held, so the passes after it print only that) and the
        last pass's output."""
        times = " ".join(f"{ended - began:.0f}s:{run.returncode}"
                         for began, ended, run in self.runs[-40:])
        failed = [run for _, _, run in self.runs if run.returncode != 0]
        parts = [f"--- reconcile passes (seconds:status, the last 40): {times}"]
        if failed and failed[-1] is not self.runs[-1][2]:
            parts.append(f"--- last failed reconcile pass\n{failed[-1].output[-4000:]}")
        parts.append(f"--- last reconcile pass\n{self.last_output()[-4000:]}")
        return "\n".join(parts)

    def step(self) -> None:
        with self._turn:
            self._one_pass()

    def _one_pass(self) -> None:
        began = time.monotonic()
        try:
            run = run_reconcile(self.inventory, "-e", f"llmao_pass_lease_s={PASS_TIMEOUT_S}",
                                env=self.env, timeout=PASS_TIMEOUT_S)
        except subprocess.TimeoutExpired as slow:
            # A pass past its time limit is one failed pass (a systemd timer would start the
            # next one too); the loop, like the operator's timer, goes on.
            run = PlaybookRun(-1, f"reconcile timed out after {slow.timeout:g} s; its output "
                                  f"so far:\n{partial_output(slow)}")
        self.runs.append((began, time.monotonic(), run))


def partial_output(slow: subprocess.TimeoutExpired) -> str:
    """What a pass past its time limit had printed (which task it was stuck in)."""
    parts = (slow.stdout or b"", slow.stderr or b"")
    return "".join(p.decode(errors="replace") if isinstance(p, bytes) else p for p in parts)


@dataclass
class RollingFleet:
    """The running fleet and how to read and change it (see the module's docstring)."""

    local: LocalFleet
    server: LlmaoServer
    boxes: dict[str, Box]
    litellm: LiteLLM
    loop: ReconcileLoop

    def route_ids(self) -> dict[str, str]:
        """Box name -> the LiteLLM deployment id of its one intended server."""
        return {server.box: server.id
                for server in self.local.load().servers()}

    def intended(self) -> dict[str, str]:
        fleet = self.local.load()
        return {box: fleet.assignment(box).revision for box in self.boxes}

    def observations(self) -> dict[str, Any]:
        status, body = web.call(f"{self.server.url}/admin/api/observations",
                                headers=web.authorization(self.local.admin_token),
                                context=self.server.context, timeout=30)
        if status != 200:
            raise RuntimeError(f"llmao's observations answered {status}")
        return json.loads(body)

    def applied(self) -> dict[str, str | None]:
        boxes = self.observations()["boxes"]
        return {box: ((boxes.get(box) or {}).get("applied") or {}).get("revision")
                for box in self.boxes}

    def turns(self) -> dict[str, dict[str, Any]]:
        """Box name -> its latest turn as llmao records it."""
        return {turn["box"]: turn for turn in self.observations().get("turns", [])
                if turn["box"] in self.boxes}

    def routed(self) -> set[str]:
        """The boxes whose server LiteLLM routes now."""
        ids = {route.id for route in self.litellm.routes()}
        return {box for box, route_id in self.route_ids().items() if route_id in ids}

    def settled(self) -> bool:
        """Every box applied its intended revision, is routed, and no turn is in progress."""
        intended = self.intended()
        return (self.applied() == intended and self.routed() == set(self.boxes)
                and not any(turn["phase"] in ACTIVE_PHASES for turn in self.turns().values()))

    def change(self, max_model_len: int | None = None,
               moved: str | None = None) -> dict[str, str]:
        """A new context for the model in models.yaml, or the ``moved`` box's server moved to
        another listen port (a change of that box alone); llmao reloaded with it: every worker
        serves the new revisions when this returns them."""
        if max_model_len is not None:
            self.local.recipes = {MODEL: {"max_model_len": max_model_len}}
        if moved is not None:
            [[model, port, name]] = self.local.hosts[moved]
            self.local.hosts[moved] = [[model, OTHER_PORT if port == LISTEN_PORT
                                        else LISTEN_PORT, name]]
        self.local.write()
        self.server.reload()
        return self.intended()

    def turn_on_box_tls(self, ca_cert: Path, ca_key: Path, leaf_days: int = 2) -> dict[str, str]:
        """``box_tls`` added to config.yaml (docs/box-tls.md) with whatever else changed in the
        files; llmao reloaded: every box's revision changes (the payload's ``tls``)."""
        self.local.write(box_tls={"ca_cert": str(ca_cert), "ca_key": str(ca_key),
                                  "leaf_days": leaf_days})
        self.server.reload()
        return self.intended()

    def api_bases(self) -> dict[str, str | None]:
        """Box name -> the api_base LiteLLM routes its server at (None: not routed)."""
        routes = {route.id: route.api_base for route in self.litellm.routes()}
        return {box: routes.get(route_id) for box, route_id in self.route_ids().items()}

    def provision(self, folder: Path, *flags: str) -> PlaybookRun:
        """``playbooks/provision.yml`` on the three boxes, as an operator runs it: the fleet's
        inventory, and a second source that says how Ansible reaches each container box. The
        output is as printed (a test checks it holds no secret; mask it to show it)."""
        reach = folder / "containers.yml"
        reach.write_text(json.dumps({"all": {"hosts": {
            name: {"ansible_connection": "community.docker.docker",
                   "ansible_host": box.container} for name, box in self.boxes.items()}}}))
        env = {**os.environ, **self.loop.env, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
               "ANSIBLE_PIPELINING": "true", "ANSIBLE_LOCAL_TEMP": str(folder / "ansible-tmp")}
        done = subprocess.run(
            [str(ANSIBLE_PLAYBOOK), str(PROVISION), "-i", str(self.local.inventory_path),
             "-i", str(reach), *flags], cwd=REPO, env=env, capture_output=True, text=True,
            stdin=subprocess.DEVNULL, timeout=PROVISION_TIMEOUT_S, check=False)
        return PlaybookRun(done.returncode, done.stdout + done.stderr)

    def wait(self, what: str, done: Callable[[], bool], timeout: float) -> float:
        """Poll ``done`` until true; the seconds it took, or TimeoutError with what the fleet
        was doing."""
        began = time.monotonic()
        while not done():
            if time.monotonic() - began > timeout:
                raise TimeoutError(f"not within {timeout:.0f} s: {what}\n{self.diagnostics()}")
            time.sleep(0.5)
        return time.monotonic() - began

    def served_context(self, box: str) -> int | None:
        """The max_model_len the box's vLLM reports now (None when it does not answer)."""
        server = next(s for s in self.local.load().servers() if s.box == box)
        try:
            status, body = web.call(f"{self.boxes[box].url(server.listen_port)}/v1/models",
                                    headers=web.authorization(server.api_key), timeout=5)
        except OSError:
            return None
        return json.loads(body)["data"][0]["max_model_len"] if status == 200 else None

    def box_diagnostics(self, name: str) -> str:
        """What one box's follower and Supervisor say."""
        box = self.boxes[name]
        follow = box.exec(["sh", "-c", f"tail -n 25 {FOLLOW_LOG} 2>&1"], check=False)
        status = box.supervisorctl("status")
        return (f"--- {name}: supervisorctl status\n{status.stdout.decode()}"
                f"--- {name}: {FOLLOW_LOG}\n{follow.stdout.decode()}")

    def diagnostics(self) -> str:
        """What each box's follower and Supervisor say, llmao's view, and the last pass."""
        parts = [self.box_diagnostics(name) for name in self.boxes]
        try:
            parts.append(f"--- applied {self.applied()}\n--- turns {self.turns()}")
        except (OSError, RuntimeError, ValueError) as exc:
            parts.append(f"--- llmao's observations unreadable: {exc}")
        parts.append(f"--- intended {self.intended()}")
        parts.append(self.loop.report())
        return mask("\n".join(parts), self.local.secrets())


def chat_load(url: str, key: str, bound_s: float) -> ChatLoad:
    """The steady load through LiteLLM at ``url``, bounded in count and time by ``bound_s``."""
    return ChatLoad(url, key, MODEL, rate_per_s=RATE_PER_S, count=int(bound_s * RATE_PER_S),
                    max_s=bound_s, mix=MIX)


def assert_turns_never_overlap(turns: list[dict]) -> None:
    """Each turn ended before the next began: one box changed at a time."""
    spans = sorted((turn["granted_at"], turn["ended_at"], turn["box"]) for turn in turns)
    for (_, ended, box), (granted, _, later) in zip(spans, spans[1:], strict=False):
        assert ended is not None and ended <= granted, f"{box}'s and {later}'s turns overlap"


def assert_rolled(fleet: RollingFleet, load: ChatLoad, watch: RouteWatch,
                  before: Mapping[str, str], new: Mapping[str, str], said: str) -> None:
    """R10's good change: every box moved to its new revision one turn at a time, serving the
    new context, with no failed request and never fewer than two of three servers routed."""
    assert all(new[box] != before[box] for box in new), said
    assert load.failures() == [] and len(load.outcomes()) >= 20, said
    assert any(o.shape.min_tokens for o in load.outcomes()), said
    assert watch.fewest() >= 2 and watch.errors == [], said
    assert fleet.applied() == new, said
    turns = fleet.turns()
    assert {box: (turn["revision"], turn["phase"]) for box, turn in turns.items()} == \
        {box: (revision, "done") for box, revision in new.items()}, said
    assert_turns_never_overlap(list(turns.values()))
    assert {box: fleet.served_context(box) for box in fleet.boxes} == \
        dict.fromkeys(fleet.boxes, GOOD_CONTEXT), said


def assert_stopped_at_one(fleet: RollingFleet, load: ChatLoad, watch: RouteWatch,
                          new: Mapping[str, str], bad: Mapping[str, str], said: str) -> str:
    """R10's failing change: exactly one box's turn failed and paused the model, the others
    kept the revision before and kept answering, no request failed. Returns the failed box."""
    assert load.failures() == [], said
    assert watch.fewest() >= 2 and watch.errors == [], said
    turns = fleet.turns()
    failed = [box for box, turn in turns.items() if turn["phase"] == "failed"]
    assert len(failed) == 1, said
    (broken,) = failed
    assert turns[broken]["revision"] == bad[broken] and turns[broken]["why"], said
    applied = fleet.applied()
    kept = [box for box in fleet.boxes if box != broken]
    assert applied[broken] == bad[broken], said
    assert {box: applied[box] for box in kept} == {box: new[box] for box in kept}, said
    assert fleet.routed() == set(kept), said
    assert {box: fleet.served_context(box) for box in kept} == \
        dict.fromkeys(kept, GOOD_CONTEXT), said
    answered = {o.answered_by.split(":")[0] for o in load.outcomes()}
    assert set(kept) <= answered, said
    assert f"PAUSED at {broken} (rev {bad[broken]}" in fleet.loop.last_output(), said
    return broken


def mask(text: str, hidden: list[str]) -> str:
    """``text`` with every secret of the fleet replaced, so a failure message shows none."""
    for secret in hidden:
        text = text.replace(secret, "***")
    return text


@contextmanager
def rolling_fleet(folder: Path, image: str, litellm_url: str, master_key: str, knobs: Knobs,
                  behaviour: Mapping[str, Any] = BEHAVIOUR) -> Iterator[RollingFleet]:
    """The fleet of the module's docstring, up and settled (every box routed on its revision);
    boxes, server and routes gone when the block ends."""
    gateway = host_gateway_address()
    tls = make_server_tls(folder / "tls", [gateway])
    suffix = secrets.token_hex(3)
    names = [f"roll-{suffix}-{index}" for index in range(BOX_COUNT)]
    local = LocalFleet(folder / "fleet", one_model_hosts(names, model=MODEL), models=(MODEL,),
                       recipes={MODEL: {"max_model_len": knobs.max_model_len}})
    port = free_port(gateway)
    local.write(
        fleet={"health_grace_s": knobs.health_grace_s, "probe_connect_timeout_s": 2,
               "probe_timeout_s": 5},
        rollout=rollout_section(knobs),
        providers={"docker": {"label": "llmao.box"}},
        litellm={"url": litellm_url, "master_key": master_key},
        server={"url": f"https://{gateway}:{port}", "state": str(folder / "state.sqlite3")})
    litellm = LiteLLM(litellm_url, master_key, 30)
    with ExitStack() as stack:
        # Registered first, so it runs last: after reconcile stopped, it cannot come back.
        stack.callback(forget_routes, litellm,
                       [deployment_id(name, port, SERVER) for name in names
                        for port in (LISTEN_PORT, OTHER_PORT)])
        server = stack.enter_context(start_llmao_server(
            local.config_path, local.models_path, folder, host=gateway, port=port,
            workers=WORKERS, tls=(tls.ca_file, tls.certfile, tls.keyfile)))
        boxes = {}
        for name in names:
            boxes[name] = start_box(name, image=image, behaviour=behaviour,
                                    env=template_env(local.fleet_key, server.url, name))
            stack.callback(boxes[name].remove)
        booted = {name: boot(box, tls.ca_file) for name, box in boxes.items()}
        for name, done in booted.items():
            said = mask((done.stdout + done.stderr).decode(), local.secrets())
            if done.returncode != 0:
                raise RuntimeError(f"{name} did not boot from the template:\n{said}")
        loop = stack.enter_context(ReconcileLoop(local.inventory_path,
                                                 {"SSL_CERT_FILE": str(tls.ca_file)}))
        fleet = RollingFleet(local, server, boxes, litellm, loop)
        fleet.wait("every box serving its revision and routed", fleet.settled, SETTLE_TIMEOUT_S)
        yield fleet


def fleet_fixture(knobs: Knobs) -> Callable[..., Iterator[RollingFleet]]:
    """A test module's ``fleet`` fixture (``fleet = fleet_fixture(FOLLOWING)``): this fleet with
    ``knobs`` against the session's real LiteLLM proxy, up for one test."""

    @pytest.fixture
    def fleet(tmp_path: Path, box_image: str, real_litellm: LiteLLMProcess,
              litellm_master_key: str) -> Iterator[RollingFleet]:
        with rolling_fleet(tmp_path, box_image, real_litellm.url, litellm_master_key,
                           knobs) as running:
            yield running

    return fleet


def rollout_section(knobs: Knobs) -> dict[str, float]:
    """``rollout:`` of config.yaml; without ``follow_s`` boxes do not follow."""
    section = {"drain_s": knobs.drain_s}
    if knobs.follow_s is not None:
        section["follow_s"] = knobs.follow_s
    return section


def forget_routes(litellm: LiteLLM, route_ids: Iterable[str]) -> None:
    """The proxy may be shared with other tests: this fleet's deployments go with it."""
    wanted = set(route_ids)
    for route in litellm.routes():
        if route.id in wanted:
            litellm.delete(route.id)
