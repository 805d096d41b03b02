"""A following fleet of two local boxes, one running the real vLLM (CPU build, tiny model).

Each box is a loopback address of its own with its own supervisord (the demo's local boxes:
demo/boxes.py), booted as Vast boots a box: Vast's provision.sh runs the box program, which
fetches the assignment from the real ``llmao-server`` (HTTPS), writes the Supervisor program
and hands over. The real box's ``VLLM_BIN`` is the real vLLM (rig/real_vllm.py), its scratch
files in the test's folder; the other box runs the vLLM stub, so that while the real box takes
its turn in a roll another server keeps the model routed. ``nvidia-smi`` on both is the stub:
the box program's preflight and memory division run as on a GPU box, and the recipe's own
``--kv-cache-memory-bytes`` sizes the real server's KV cache (on the CPU the division's
``--gpu-memory-utilization`` would be a share of host RAM).

Reconcile (``playbooks/reconcile.yml``) runs back to back in a thread and registers both in the
real LiteLLM; a change is a new models.yaml (and config.yaml) and a SIGHUP to llmao, which the
boxes follow. The fleet boots without box TLS; a fleet CA is made beside it (``llmao-fleet-ca``'s
own code), for a change that turns ``box_tls`` on (docs/box-tls.md).
The fleet's reading and waiting is tests/rolling_fleet.py's.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.intent import (
    IntendedServer,
    deployment_id,
)
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from demo.boxes import INSTALL_SET, PROVISION, box_path, wait_supervisor, write_local_box
from llmao_server.fleet_ca_cli import init as init_fleet_ca
from rig import real_vllm as real
from rig.boxes import free_port
from rig.local_fleet import LocalFleet, loopback_boxes, one_model_hosts
from rig.processes import stop_child
from rig.tls import make_server_tls
from rig.web import authorization, call
from tests.llmao_process import start_llmao_server
from tests.rolling_fleet import ReconcileLoop, RollingFleet, forget_routes, mask

MODEL = "tiny"
LISTEN_PORT = 8001
SERVER = f"{MODEL}-{LISTEN_PORT}"
KV_CACHE_BYTES = 2 * 2**20  # 2,048 tokens of the tiny model
# At most three requests run at once: the rest wait, which the scrape must show, while the
# three running hold 12 of the 16 KV blocks and are never preempted. Without the cap, 20 held
# streams filled the cache and vLLM preempted and recomputed about 300 times in 90 s, a churn in
# which its CPU engine once died mid-test (500, then its port closed while Supervisor restarted it).
MAX_RUNNING = 3
RECIPE_ARGS = ["--kv-cache-memory-bytes", str(KV_CACHE_BYTES), "--enforce-eager",
               "--max-num-seqs", str(MAX_RUNNING)]
FIRST_CONTEXT, NEXT_CONTEXT = 512, 1024
# A real start takes one to two minutes here (more when the machine is busy): Loading, not down.
HEALTH_GRACE_S = 420.0
# The client load of a roll asks for at most LOAD_MAX_TOKENS tokens: a few seconds of the tiny
# model, even queued behind MAX_RUNNING others on a busy machine. The drain outlasts that, so
# no request in flight when a route goes is cut by its box's restart.
LOAD_MAX_TOKENS = 16
DRAIN_S = 20.0
FOLLOW_S = 1.0
SETTLE_TIMEOUT_S = 480.0
BOOT_TIMEOUT_S = 120.0
SUPERVISORD_STOP_S = 60.0


def recipe(max_model_len: int) -> dict[str, Any]:
    """models.yaml's vLLM recipe of the tiny model: the local folder, its context, the KV size."""
    return {"model": str(real.MODEL_DIR), "max_model_len": max_model_len, "args": RECIPE_ARGS}


@dataclass
class LocalBox:
    """A loopback box: its folder (bin/, conf.d/, data/) and its supervisord, our child."""

    name: str
    folder: Path
    supervisord: subprocess.Popen[bytes]

    def env(self) -> dict[str, str]:
        return {"PATH": box_path(self.folder), "HOME": str(self.folder), "LANG": "C.UTF-8"}

    def supervisorctl(self, *args: str) -> str:
        done = subprocess.run([str(self.folder / "bin" / "supervisorctl"), *args],
                              capture_output=True, text=True, env=self.env(), check=False)
        return done.stdout + done.stderr

    def url(self, port: int, scheme: str = "http") -> str:
        return f"{scheme}://{self.name}:{port}"

    def log_lines(self, name: str) -> list[str] | None:
        """A log under the box's data directory, line by line; None when there is none."""
        path = self.folder / "data" / name
        return path.read_text(errors="replace").splitlines() if path.exists() else None

    def log_tail(self, name: str, lines: int = 25) -> str:
        """The end of a log under the box's data directory."""
        found = self.log_lines(name)
        return f"({name}: no log)" if found is None else "\n".join(found[-lines:])

    def log_errors(self, name: str, lines: int = 30) -> str:
        """The last error lines of a log under the box's data directory: where vLLM's engine
        says why it died, long before the tail that shows Supervisor's restart."""
        found = self.log_lines(name)
        if found is None:
            return f"({name}: no log)"
        errors = [line for line in found if " ERROR " in line or "Traceback" in line]
        return "\n".join(errors[-lines:]) or "(none)"

    def stop(self) -> None:
        """SIGTERM to supervisord's PID: it stops its programs (vLLM included), then itself."""
        stop_child(self.supervisord, SUPERVISORD_STOP_S)


def start_local_box(name: str, folder: Path, scratch: Path | None = None) -> LocalBox:
    """The box's files and its supervisord; with ``scratch`` (a short path: vLLM's IPC sockets
    go there), the real vLLM as its `vllm`."""
    write_local_box(folder, name)
    if scratch is not None:
        real.write_wrapper(folder / "bin" / "vllm", scratch)
    box_env = {"PATH": box_path(folder), "HOME": str(folder), "LANG": "C.UTF-8"}
    with open(folder / "supervisord.out", "wb") as log:
        process = subprocess.Popen([str(folder / "bin" / "supervisord"), "-n"], env=box_env,
                                   cwd=folder, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
    box = LocalBox(name, folder, process)
    try:
        wait_supervisor(folder, name)
    except BaseException:
        box.stop()
        raise
    return box


def boot(box: LocalBox, llmao_url: str, fleet_key: str, ca_file: Path) -> str:
    """Vast's provision.sh on the box, as the template runs it; its output (never shown whole:
    mask it) or RuntimeError."""
    env = {**box.env(), "LLMAO_URL": llmao_url, "FLEET_KEY": fleet_key,
           "PUBLIC_IPADDR": box.name, "SSL_CERT_FILE": str(ca_file),
           "DATA_DIRECTORY": str(box.folder / "data"),
           "SUPERVISOR_CONF_DIR": str(box.folder / "conf.d"),
           "VLLM_BIN": str(box.folder / "bin" / "vllm"), "VLLM_HOST": box.name,
           "LLMAO_INSTALL_SET": str(INSTALL_SET)}
    done = subprocess.run(["bash", str(PROVISION)], env=env, cwd=box.folder,
                          capture_output=True, text=True, timeout=BOOT_TIMEOUT_S, check=False)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{box.name} did not boot (exit {done.returncode}):\n"
                           f"{mask(output, [fleet_key])}")
    return output


@dataclass
class RealVllmFleet(RollingFleet):
    """RollingFleet's reading and waiting, over local boxes: which one runs the real vLLM."""

    real_box: str = ""
    stub_box: str = ""
    # The fleet CA's certificate and key, for box_tls: made with the fleet, used once it is on.
    ca_cert: Path = Path()
    ca_key: Path = Path()

    def tls_on(self) -> bool:
        return "box_tls" in self.local.settings

    def box_url(self, box: str, port: int = LISTEN_PORT) -> str:
        """Where the box's server answers: over HTTPS once box TLS is on (and rolled)."""
        return self.boxes[box].url(port, "https" if self.tls_on() else "http")

    def context(self) -> ssl.SSLContext | None:
        """What a client dialling a box trusts under box TLS: the fleet CA alone."""
        return ssl.create_default_context(cafile=str(self.ca_cert)) if self.tls_on() else None

    def served_context(self, box: str) -> int | None:
        server = next(s for s in self.local.load().servers() if s.box == box)
        try:
            status, body = call(f"{self.box_url(box, server.listen_port)}/v1/models",
                                headers=authorization(server.api_key), context=self.context(),
                                timeout=5)
        except OSError:
            return None
        return json.loads(body)["data"][0]["max_model_len"] if status == 200 else None

    def change(self, max_model_len: int | None = None, moved: str | None = None,
               box_tls: bool = False) -> dict[str, str]:
        """A new context in the tiny model's recipe (the rest of it kept), with ``box_tls``
        also the fleet CA's section turned on; llmao reloaded."""
        if moved is not None:
            raise ValueError("this fleet's boxes do not move")
        self.local.recipes = {MODEL: recipe(max_model_len or FIRST_CONTEXT)}
        if box_tls:
            return self.turn_on_box_tls(self.ca_cert, self.ca_key)
        self.local.write()
        self.server.reload()
        return self.intended()

    def real_server(self) -> IntendedServer:
        return next(s for s in self.local.load().servers() if s.box == self.real_box)

    def box_diagnostics(self, name: str) -> str:
        box = self.boxes[name]
        return (f"--- {name}: supervisorctl status\n{box.supervisorctl('status')}"
                f"--- {name}: follow.log\n{box.log_tail('llmao/follow.log')}\n"
                f"--- {name}: {SERVER}.log, its errors\n{box.log_errors(f'logs/{SERVER}.log')}\n"
                f"--- {name}: {SERVER}.log\n{box.log_tail(f'logs/{SERVER}.log', 15)}")


@contextmanager
def real_vllm_fleet(folder: Path, litellm_url: str, master_key: str
                    ) -> Iterator[RealVllmFleet]:
    """The fleet of the module's docstring, up and settled (both boxes routed on their
    revision); boxes, server and routes gone when the block ends."""
    host = "127.0.0.1"
    tls = make_server_tls(folder / "tls", [host])
    ca_cert, ca_key = init_fleet_ca(str(folder / "fleet-ca"), "real vLLM fleet CA")
    real_box, stub_box = loopback_boxes(2, seed=int.from_bytes(secrets.token_bytes(4), "big"))
    local = LocalFleet(folder / "fleet", one_model_hosts([real_box, stub_box], model=MODEL),
                       models=(MODEL,), recipes={MODEL: recipe(FIRST_CONTEXT)})
    port = free_port(host)
    local.write(
        fleet={"health_grace_s": HEALTH_GRACE_S, "probe_connect_timeout_s": 2,
               "probe_timeout_s": 10},
        rollout={"follow_s": FOLLOW_S, "drain_s": DRAIN_S},
        litellm={"url": litellm_url, "master_key": master_key},
        server={"url": f"https://{host}:{port}", "state": str(folder / "state.sqlite3")})
    litellm = LiteLLM(litellm_url, master_key, 30)
    with ExitStack() as stack:
        stack.callback(forget_routes, litellm,
                       [deployment_id(box, LISTEN_PORT, SERVER) for box in (real_box, stub_box)])
        server = stack.enter_context(start_llmao_server(
            local.config_path, local.models_path, folder, host=host, port=port, workers=2,
            tls=(tls.ca_file, tls.certfile, tls.keyfile)))
        boxes = {}
        for name in (real_box, stub_box):
            boxes[name] = start_local_box(name, folder / "boxes" / name,
                                          folder / "vllm" if name == real_box else None)
            stack.callback(boxes[name].stop)
        for box in boxes.values():
            boot(box, server.url, local.fleet_key, tls.ca_file)
        loop = stack.enter_context(ReconcileLoop(
            local.inventory_path, {"SSL_CERT_FILE": str(tls.ca_file),
                                   "ANSIBLE_LOCAL_TEMP": str(folder / "ansible-tmp"),
                                   "HOME": os.environ.get("HOME", str(folder))}))
        fleet = RealVllmFleet(local, server, boxes, litellm, loop, real_box, stub_box,
                              Path(ca_cert), Path(ca_key))
        fleet.wait("both boxes serving their revision and routed", fleet.settled,
                   SETTLE_TIMEOUT_S)
        yield fleet
