"""The demo's boxes, booted the way a rented box boots: `provision.sh` runs the box program,
which pulls the assignment from llmao and hands Supervisor one program per vLLM server.

Two kinds, one boot:

- container boxes (a container engine answers): the rig's box image, supervisord as PID 1, the
  vLLM and nvidia-smi doubles where the real tools live, listen ports published on 127.0.0.1;
  the engine's listing is the provider listing;
- local boxes (no engine): each box is a loopback address of its own with its own supervisord,
  config folder and data directory; its `bin/` holds what a box has on PATH (the vLLM and
  nvidia-smi doubles, supervisord and supervisorctl pinned to its config), and VLLM_HOST makes
  its programs bind its address, so three boxes share the listen ports 8001-8003 of one machine.

Secrets reach a box only in its environment (a 0600 env file for containers), never argv.
"""

from __future__ import annotations

import json
import os
import shlex
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from rig import REPO_ROOT
from rig.box_image import ensure_box_image
from rig.boxes import BOX_LABEL, Box, start_box
from rig.dockerd import docker
from rig.web import answers

from .fleet import DemoFleet
from .paths import shown, venv_tool
from .processes import Record, spawn

BOX_FILES = REPO_ROOT / "roles" / "vllm_box" / "files"
PROVISION = BOX_FILES / "provision" / "vast" / "provision.sh"
INSTALL_SET = BOX_FILES / "install_set.py"
STUB_VLLM = REPO_ROOT / "rig" / "stub_vllm.py"
STUB_NVIDIA_SMI = REPO_ROOT / "rig" / "stub_nvidia_smi.py"
CONTAINER_PROGRAM_DIR = "/opt/llmao"
CONTAINER_CA = "/etc/llmao/ca.pem"
BOOT_TIMEOUT_S = 120.0
SERVING_TIMEOUT_S = 90.0
SOCKET_PATH_MAX = 100  # AF_UNIX paths end at 107 bytes
GPU = '{"gpus": [{"total_mib": 24576, "free_mib": 24000, "name": "demo stub GPU"}]}\n'

# (box, listen port) -> the base URL its server answers on, as the provider publishes it.
PublicUrls = dict[tuple[str, int], str]


class BootError(RuntimeError):
    """A box did not boot; the message says which and where its log is."""


@dataclass(frozen=True)
class BoxBoot:
    """What every box is told at boot: where llmao is, the fleet key, the CA to trust."""

    llmao_url: str
    fleet_key: str = field(repr=False)
    ca_file: Path
    # Box TLS: the boxes ask llmao for a certificate, and serve HTTPS with it.
    box_tls: bool = True

    def scheme(self) -> str:
        return "https" if self.box_tls else "http"

    def environment(self, box: str, ca_path: str) -> dict[str, str]:
        return {"LLMAO_URL": self.llmao_url, "FLEET_KEY": self.fleet_key,
                "PUBLIC_IPADDR": box, "SSL_CERT_FILE": ca_path}


def _check_boot(box: str, returncode: int, output: str, log_path: Path) -> None:
    log_path.write_text(output)
    if returncode != 0:
        tail = "\n".join(output.splitlines()[-8:])
        raise BootError(f"box {box}: provision.sh exited with {returncode} "
                        f"(log {shown(log_path)}):\n{tail}")


# --------------------------------------------------------------------------- local boxes


def _wrapper(exports: Mapping[str, str], argv: list[str]) -> str:
    lines = ["#!/bin/sh"] + [f"export {key}={shlex.quote(value)}" for key, value in
                             exports.items()]
    return "\n".join([*lines, "exec " + " ".join(map(shlex.quote, argv)) + ' "$@"', ""])


def supervisord_conf(folder: Path) -> str:
    """A supervisord of the box's own: its socket, log, and the box's program folder."""
    socket = folder / "supervisor.sock"
    if len(str(socket)) > SOCKET_PATH_MAX:
        raise BootError(f"{socket} is too long for a unix socket: move the checkout to a "
                        "shorter path, or set LLMAO_DEMO_DIR to a short folder")
    return (f"[unix_http_server]\nfile={socket}\nchmod=0700\n\n"
            f"[supervisord]\nnodaemon=true\nlogfile={folder / 'supervisord.log'}\n"
            f"pidfile={folder / 'supervisord.pid'}\nchildlogdir={folder / 'data' / 'logs'}\n\n"
            "[rpcinterface:supervisor]\n"
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n\n"
            f"[supervisorctl]\nserverurl=unix://{socket}\n\n"
            f"[include]\nfiles = {folder / 'conf.d'}/*.conf\n")


def write_local_box(folder: Path, box: str) -> None:
    """The box's folders, its supervisord config, and the tools on its PATH."""
    conf = folder / "supervisord.conf"
    for sub in ("bin", "conf.d", "data/logs"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    conf.write_text(supervisord_conf(folder))
    (folder / "gpu.json").write_text(GPU)
    (folder / "vllm.json").write_text("{}\n")
    python = sys.executable
    tools = {
        "vllm": _wrapper({"LLMAO_BOX_NAME": box,
                          "STUB_VLLM_BEHAVIOUR": str(folder / "vllm.json")},
                         [python, "-S", str(STUB_VLLM)]),
        "nvidia-smi": _wrapper({"STUB_NVIDIA_SMI": str(folder / "gpu.json")},
                               [python, "-S", str(STUB_NVIDIA_SMI)]),
        "supervisord": _wrapper({}, [str(venv_tool("supervisord")), "-c", str(conf)]),
        "supervisorctl": _wrapper({}, [str(venv_tool("supervisorctl")), "-c", str(conf)]),
    }
    for name, text in tools.items():
        path = folder / "bin" / name
        path.write_text(text)
        path.chmod(0o755)


def box_path(folder: Path) -> str:
    return f"{folder / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"


def wait_supervisor(folder: Path, box: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while subprocess.run([str(folder / "bin" / "supervisorctl"), "pid"], capture_output=True,
                         check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise BootError(f"box {box}: supervisord did not answer within {timeout:.0f} s "
                            f"(log {shown(folder / 'supervisord.log')})")
        time.sleep(0.2)


def local_box_base_env(folder: Path) -> dict[str, str]:
    """What every process of a local box runs with: the box's tools first on PATH."""
    return {"PATH": box_path(folder), "HOME": os.environ.get("HOME", str(folder)),
            "LANG": "C.UTF-8"}


def box_program_env(folder: Path, box: str) -> dict[str, str]:
    """The environment the box program runs with on a local box, at boot and when asked what
    an assignment would change: its folders, its vLLM, its address."""
    return {**local_box_base_env(folder), "DATA_DIRECTORY": str(folder / "data"),
            "SUPERVISOR_CONF_DIR": str(folder / "conf.d"),
            "VLLM_BIN": str(folder / "bin" / "vllm"), "VLLM_HOST": box}


def boot_local_box(box: str, ports: list[int], boot: BoxBoot, record: Record,
                   demo_dir: Path) -> dict[int, str]:
    """Start the box's supervisord (recorded), then run provision.sh as the box would; the
    servers answer on the box's own address (public = listen)."""
    folder, logs = demo_dir / "boxes" / box, demo_dir / "logs"
    write_local_box(folder, box)
    spawn(record, f"supervisord {box}", [str(folder / "bin" / "supervisord"), "-n"],
          logs / f"supervisord-{box}.log", env=local_box_base_env(folder), cwd=folder)
    wait_supervisor(folder, box)
    env = {**box_program_env(folder, box), **boot.environment(box, str(boot.ca_file)),
           "LLMAO_INSTALL_SET": str(INSTALL_SET)}
    done = subprocess.run(["bash", str(PROVISION)], env=env, cwd=folder, capture_output=True,
                          text=True, timeout=BOOT_TIMEOUT_S, check=False)
    _check_boot(box, done.returncode, done.stdout + done.stderr, logs / f"provision-{box}.log")
    for port in ports:
        record.add_endpoint(box, port)
    return {port: f"{boot.scheme()}://{box}:{port}" for port in ports}


def start_container_box(name: str, record: Record, image: str) -> Box:
    """A container of the rig's box image (recorded), started: listed by the engine, before
    it boots."""
    box = start_box(name, image=image)
    record.add_container(box.container)
    return box


def boot_container_box(box: Box, ports: list[int], boot: BoxBoot, record: Record,
                       demo_dir: Path) -> dict[int, str]:
    """provision.sh inside the started container; the servers answer on the ports the engine
    published on 127.0.0.1."""
    name = box.name
    box.put_file(f"{CONTAINER_PROGRAM_DIR}/provision.sh", PROVISION.read_bytes(), 0o755)
    box.put_file(f"{CONTAINER_PROGRAM_DIR}/install_set.py", INSTALL_SET.read_bytes(), 0o755)
    box.put_file(CONTAINER_CA, boot.ca_file.read_bytes())
    done = box.exec(["bash", f"{CONTAINER_PROGRAM_DIR}/provision.sh"],
                    env=boot.environment(name, CONTAINER_CA), check=False,
                    timeout=BOOT_TIMEOUT_S)
    output = (done.stdout + done.stderr).decode(errors="replace")
    _check_boot(name, done.returncode, output, demo_dir / "logs" / f"provision-{name}.log")
    public = {port: box.public_port(port) for port in ports}
    for port in public.values():
        record.add_endpoint("127.0.0.1", port)
    return {port: f"{boot.scheme()}://127.0.0.1:{public[port]}" for port in ports}


def boot_boxes(fleet: DemoFleet, boot: BoxBoot, record: Record, demo_dir: Path,
               containers: bool, say: Callable[[str], None],
               listed: Callable[[], None]) -> PublicUrls:
    """Boot every box of the fleet at once, as rented boxes boot; name each as it is done.

    Container boxes are named by their provider id, not an address: llmao signs a box's
    certificate for the address the provider lists it at, which it learns in a reconcile pass
    (``listed``, run once every container is up and before any boots; a rented box too is
    listed before it boots)."""
    ports = fleet.listen_ports()
    if containers:
        image = ensure_box_image()
        started = {box: start_container_box(box, record, image) for box in fleet.boxes}
        if boot.box_tls:
            listed()

        def boot_one(box: str) -> dict[int, str]:
            return boot_container_box(started[box], ports[box], boot, record, demo_dir)
    else:
        def boot_one(box: str) -> dict[int, str]:
            return boot_local_box(box, ports[box], boot, record, demo_dir)
    urls: PublicUrls = {}
    with ThreadPoolExecutor(max_workers=len(fleet.boxes)) as pool:
        booting = {pool.submit(boot_one, box): box for box in fleet.boxes}
        for done in as_completed(booting):
            box = booting[done]
            urls.update({(box, port): url for port, url in done.result().items()})
            say(box)
    return urls


def box_token(box: str, demo_dir: Path, containers: list[str] | None) -> str:
    """The box token a booted box keeps (docs/box-identity.md): llmao bound the box's name to
    it at its first fetch, so a fetch for that name must present it. ``containers``: the
    demo's containers, for container boxes."""
    if containers is not None:
        done = docker("exec", boxes_in(containers)[box], "cat", "/data/llmao/box-token")
        return done.stdout.decode().strip()
    return (demo_dir / "boxes" / box / "data" / "llmao" / "box-token").read_text().strip()


def boxes_in(containers: list[str]) -> dict[str, str]:
    """Box name (its label) -> container, for the demo's containers."""
    found = {}
    for container in containers:
        done = docker("inspect", "--format", f'{{{{index .Config.Labels "{BOX_LABEL}"}}}}',
                      container)
        found[done.stdout.decode().strip()] = container
    return found


def write_reach_inventory(path: Path, containers: list[str]) -> Path:
    """An inventory source that tells Ansible how to reach each container box (the engine's
    connection, by container), named by its box label: with the fleet's own inventory it lets
    `playbooks/provision.yml` push to the demo's boxes."""
    hosts = {box: {"ansible_connection": "community.docker.docker", "ansible_host": container}
             for box, container in boxes_in(containers).items()}
    path.write_text(json.dumps({"all": {"hosts": hosts}}, indent=2) + "\n")
    return path


def remove_container(container: str) -> None:
    docker("rm", "--force", "--volumes", container, check=False)


def container_running(container: str) -> bool:
    done = docker("inspect", "--format", "{{.State.Running}}", container, check=False)
    return done.returncode == 0 and done.stdout.strip() == b"true"


# --------------------------------------------------------------------------- serving


def wait_serving(urls: PublicUrls, fleet_ca: Path | None,
                 timeout: float = SERVING_TIMEOUT_S) -> None:
    """Wait until every server's /health answers 200 at its public address (over HTTPS,
    verified against ``fleet_ca``, under box TLS)."""
    context = ssl.create_default_context(cafile=str(fleet_ca)) if fleet_ca else None
    waiting = dict(urls)
    deadline = time.monotonic() + timeout
    while waiting:
        waiting = {key: url for key, url in waiting.items()
                   if not answers(f"{url}/health", context)}
        if waiting and time.monotonic() > deadline:
            names = ", ".join(f"{box}:{port}" for box, port in waiting)
            raise BootError(f"not serving after {timeout:.0f} s: {names} (see the box logs "
                            "under .demo/boxes/ or `docker logs`)")
        if waiting:
            time.sleep(0.3)
