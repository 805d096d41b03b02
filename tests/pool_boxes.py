"""Boxes the fake providers (rig/rent_api.py) start when a pool rents: local boxes that boot as
a rented box does, by running the provider's provision script with the instance's env: Vast's
``provision.sh`` once the box's supervisord runs; RunPod's as the pod's entrypoint, which
writes the programs and then becomes supervisord.

Each instance gets a loopback address of its own (127.0.77.N), its own supervisord, config
folder and data directory (the demo's local box layout, demo/boxes.py), and the vLLM and
nvidia-smi doubles on its PATH. The provision script runs in a thread, as a real box boots
after the create has answered; its output is kept per instance. Destroying or interrupting the
instance stops its supervisord (and with it the servers) by its PID.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from demo.boxes import INSTALL_SET, PROVISION, box_path, wait_supervisor, write_local_box
from demo.paths import venv_tool
from rig.rent_api import Instance

LISTEN_PORTS = (8001, 8002, 8003)
RUNPOD_PROVISION = PROVISION.parent.parent / "runpod" / "provision.sh"
BOOT_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0


@dataclass
class RentedBoxes:
    """The starter and stopper of a :class:`rig.rent_api.RentApi`: boxes under ``folder``."""

    folder: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    # What the boxes' vLLM doubles do (rig/stub_vllm.py's behaviour file, by listen port or
    # "*"): a test paces the streams so that a load keeps their scheduler busy.
    behaviour: dict[str, dict] = field(default_factory=dict)
    supervisors: dict[str, subprocess.Popen] = field(default_factory=dict)
    boots: dict[str, subprocess.CompletedProcess | None] = field(default_factory=dict)
    _addresses: itertools.count = field(default_factory=lambda: itertools.count(10))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, instance: Instance) -> None:
        """Give the instance an address and its ports, and boot it as its provider does."""
        with self.lock:
            address = f"127.0.77.{next(self._addresses)}"
        folder = self.folder / instance.instance_id
        write_local_box(folder, address)
        (folder / "vllm.json").write_text(json.dumps(self.behaviour))
        base = {"PATH": box_path(folder), "HOME": str(folder), "LANG": "C.UTF-8"}
        env = {**base, **instance.env, **self.extra_env,
               "PUBLIC_IPADDR": address, "CONTAINER_ID": instance.instance_id,
               "RUNPOD_POD_ID": instance.instance_id,
               "DATA_DIRECTORY": str(folder / "data"),
               "SUPERVISOR_CONF_DIR": str(folder / "conf.d"),
               "SUPERVISORD_CONF": str(folder / "supervisord.conf"),
               "VLLM_BIN": str(folder / "bin" / "vllm"), "VLLM_HOST": address,
               "LLMAO_INSTALL_SET": str(INSTALL_SET)}
        instance.address = address
        instance.ports = {port: port for port in LISTEN_PORTS}
        self.boots[instance.instance_id] = None
        if instance.provider == "runpod":  # the entrypoint becomes the pod's supervisord
            entry = folder / "entry"  # a pod's own supervisord, which the script gives -c
            entry.mkdir(exist_ok=True)
            (entry / "supervisord").symlink_to(venv_tool("supervisord"))
            env["PATH"] = f"{entry}{os.pathsep}{env['PATH']}"
            self._spawn(instance.instance_id, ["bash", str(RUNPOD_PROVISION)], env, folder)
            return
        self._spawn(instance.instance_id, [str(folder / "bin" / "supervisord"), "-n"], base,
                    folder)
        wait_supervisor(folder, address)
        threading.Thread(target=self._provision, args=(instance.instance_id, env, folder),
                         daemon=True).start()

    def _spawn(self, instance_id: str, argv: list[str], env: dict[str, str],
               folder: Path) -> None:
        """The box's long-lived process (its supervisord), in a session of its own."""
        with open(folder / "supervisord.out", "ab") as log:
            self.supervisors[instance_id] = subprocess.Popen(
                argv, env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)

    def _provision(self, instance_id: str, env: dict[str, str], folder: Path) -> None:
        self.boots[instance_id] = subprocess.run(
            ["bash", str(PROVISION)], env=env, cwd=folder, capture_output=True, text=True,
            timeout=BOOT_TIMEOUT_S, check=False)

    def stop(self, instance: Instance) -> None:
        """The provider stops the instance: its supervisord and every server under it."""
        process = self.supervisors.pop(instance.instance_id, None)
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_TIMEOUT_S)

    def alive(self, instance_id: str) -> bool:
        """Whether the box's long-lived process (its supervisord) still runs."""
        process = self.supervisors.get(instance_id)
        return process is not None and process.poll() is None

    def stop_all(self) -> None:
        for instance_id in list(self.supervisors):
            self.stop(Instance("vast", instance_id, "", "", {}, "", 0.0, 1))
