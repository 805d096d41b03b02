"""Boxes the fake providers (rig/rent_api.py) start when a pool rents: local boxes that boot as
a rented Vast box does, by running the provider's provision script with the instance's env.

Each instance gets a loopback address of its own (127.0.77.N), its own supervisord, config
folder and data directory (the demo's local box layout, demo/boxes.py), and the vLLM and
nvidia-smi doubles on its PATH. The provision script runs in a thread, as a real box boots
after the create has answered; its output is kept per instance. Destroying or interrupting the
instance stops its supervisord (and with it the servers) by its PID.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from demo.boxes import INSTALL_SET, PROVISION, box_path, wait_supervisor, write_local_box
from rig.rent_api import Instance

LISTEN_PORTS = (8001, 8002, 8003)
BOOT_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0


@dataclass
class RentedBoxes:
    """The starter and stopper of a :class:`rig.rent_api.RentApi`: boxes under ``folder``."""

    folder: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    supervisors: dict[str, subprocess.Popen] = field(default_factory=dict)
    boots: dict[str, subprocess.CompletedProcess | None] = field(default_factory=dict)
    _addresses: itertools.count = field(default_factory=lambda: itertools.count(10))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, instance: Instance) -> None:
        """Give the instance an address and its ports, start its supervisord, and run the
        provision script in the background with the env the create gave."""
        with self.lock:
            address = f"127.0.77.{next(self._addresses)}"
        folder = self.folder / instance.instance_id
        write_local_box(folder, address)
        base = {"PATH": box_path(folder), "HOME": str(folder), "LANG": "C.UTF-8"}
        log = open(folder / "supervisord.out", "ab")  # noqa: SIM115 (the child keeps it)
        self.supervisors[instance.instance_id] = subprocess.Popen(
            [str(folder / "bin" / "supervisord"), "-n"], env=base, cwd=folder,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_supervisor(folder, address)
        instance.address = address
        instance.ports = {port: port for port in LISTEN_PORTS}
        env = {**base, **instance.env, **self.extra_env,
               "PUBLIC_IPADDR": address, "CONTAINER_ID": instance.instance_id,
               "DATA_DIRECTORY": str(folder / "data"),
               "SUPERVISOR_CONF_DIR": str(folder / "conf.d"),
               "VLLM_BIN": str(folder / "bin" / "vllm"), "VLLM_HOST": address,
               "LLMAO_INSTALL_SET": str(INSTALL_SET)}
        self.boots[instance.instance_id] = None
        threading.Thread(target=self._provision, args=(instance.instance_id, env, folder),
                         daemon=True).start()

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

    def stop_all(self) -> None:
        for instance_id in list(self.supervisors):
            self.stop(Instance("vast", instance_id, "", "", {}, "", 0.0, 1))
