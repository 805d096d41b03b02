"""Start and stop test boxes: containers of the box image, and vLLM stubs as host processes.

A container box stands in for a rented GPU box: supervisord is PID 1, the vLLM and nvidia-smi
doubles are where the real tools live, and the listen ports (8001-8003) are published on
127.0.0.1 only, each on a port the engine picks. `docker port` then plays the provider listing
(listen port -> public port), which is why every box carries the label `llmao.box=<name>`.

Secrets given to a box (env) travel in a 0600 env file, never on a command line.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rig import REPO_ROOT, cache_dir
from rig.box_image import ensure_box_image
from rig.dockerd import DockerError, docker
from rig.processes import stop_child

BOX_LABEL = "llmao.box"
RIG_LABEL = "llmao.rig"
LISTEN_PORTS = (8001, 8002, 8003)
STUB_DIR = "/etc/llmao-stub"
SUPERVISOR_SOCKET = "/var/run/supervisor.sock"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
STUB_VLLM = REPO_ROOT / "rig" / "stub_vllm.py"


@contextmanager
def _env_file(env: Mapping[str, str]):
    """A private env file for `docker --env-file`, so values stay off every command line."""
    for key, value in env.items():
        if "\n" in value or "=" in key or not key:
            raise ValueError(f"cannot pass env {key!r} through an env file")
    handle, path = tempfile.mkstemp(prefix="env-", dir=cache_dir())
    try:
        with os.fdopen(handle, "w") as out:
            out.writelines(f"{key}={value}\n" for key, value in env.items())
        yield path
    finally:
        os.unlink(path)


def _file_tar(path: str, data: bytes, mode: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(PurePosixPath(path).relative_to("/").as_posix())
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        info.uid = info.gid = 0
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass
class Box:
    """A running container box, addressed by its container id."""

    name: str
    container: str

    def exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        input: bytes | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run argv inside the box as root; env values go through an env file."""
        stdin = ["--interactive"] if input is not None else []
        with _env_file(env or {}) as env_path:
            return docker(
                "exec", *stdin, "--env-file", env_path, self.container, *argv,
                input=input, check=check, timeout=timeout,
            )  # fmt: skip

    def put_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write a file (absolute path, owned by root) into the box; works before it starts too."""
        raw = data.encode() if isinstance(data, str) else data
        docker("cp", "-", f"{self.container}:/", input=_file_tar(path, raw, mode))

    def read_file(self, path: str) -> bytes:
        return self.exec(["cat", path]).stdout

    def public_port(self, listen_port: int) -> int:
        """The 127.0.0.1 port the engine published listen_port on (the provider's view)."""
        out = docker("port", self.container, f"{listen_port}/tcp").stdout.decode()
        return int(out.split()[0].rsplit(":", 1)[1])

    def url(self, listen_port: int) -> str:
        return f"http://127.0.0.1:{self.public_port(listen_port)}"

    def supervisorctl(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[bytes]:
        return self.exec(["supervisorctl", *args], check=check)

    def wait_supervisor(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until supervisord (PID 1) accepts supervisorctl on its unix socket."""
        deadline = time.monotonic() + timeout
        while True:
            if self.supervisorctl("pid").returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"supervisord in box {self.name} did not answer in {timeout} s")
            time.sleep(0.1)

    def remove(self) -> None:
        docker("rm", "-f", "-v", self.container, check=False)


def container_name(box_name: str) -> str:
    """A unique, docker-safe container name that still shows the box name."""
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", box_name).strip("-.") or "box"
    return f"llmao-box-{safe}-{secrets.token_hex(3)}"


def start_box(
    name: str,
    *,
    env: Mapping[str, str] | None = None,
    gpu: Mapping | None = None,
    behaviour: Mapping | None = None,
    publish: Sequence[int] = LISTEN_PORTS,
    image: str | None = None,
) -> Box:
    """Create and start a box, its stub files in place before PID 1 starts; wait for supervisord.

    gpu goes to the nvidia-smi stub (`{"gpus": [...]}`), behaviour to the vLLM stub (keyed by
    listen port or "*"); both are JSON files under /etc/llmao-stub/.
    """
    image = image or ensure_box_image()
    box_env = {"LLMAO_BOX_NAME": name, **(env or {})}
    ports = [arg for port in publish for arg in ("-p", f"127.0.0.1::{port}")]
    with _env_file(box_env) as env_path:
        container = (
            docker(
                "create",
                "--name",
                container_name(name),
                "--label",
                f"{BOX_LABEL}={name}",
                "--label",
                f"{RIG_LABEL}=1",
                "--env-file",
                env_path,
                *ports,
                image,
            )
            .stdout.decode()
            .strip()
        )
    box = Box(name, container)
    try:
        if gpu is not None:
            box.put_file(f"{STUB_DIR}/gpu.json", json.dumps(gpu))
        if behaviour is not None:
            box.put_file(f"{STUB_DIR}/vllm.json", json.dumps(behaviour))
        docker("start", container)
        box.wait_supervisor()
    except BaseException:
        box.remove()
        raise
    return box


def host_gateway_address(network: str = "bridge") -> str:
    """The host's address on the engine's bridge: a host server bound there is reachable from
    boxes, and the traffic never leaves the bridge."""
    info = json.loads(docker("network", "inspect", network).stdout)[0]
    for config in info.get("IPAM", {}).get("Config") or []:
        if config.get("Gateway"):
            return config["Gateway"]
    # The default bridge leaves Gateway empty on some engines: read the bridge interface instead.
    bridge = info.get("Options", {}).get("com.docker.network.bridge.name", "docker0")
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", bridge],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    if not match:
        raise DockerError(f"no IPv4 address on bridge interface {bridge}")
    return match.group(1)


def list_published(label: str = BOX_LABEL) -> dict[str, dict[int, tuple[str, int]]]:
    """Running boxes by name -> {listen port: (host, public port)}: the local provider listing."""
    ids = docker("ps", "--quiet", "--filter", f"label={label}").stdout.decode().split()
    if not ids:
        return {}
    listing: dict[str, dict[int, tuple[str, int]]] = {}
    for container in json.loads(docker("inspect", *ids).stdout):
        name = container["Config"]["Labels"][label]
        ports = listing.setdefault(name, {})
        for key, bindings in (container["NetworkSettings"]["Ports"] or {}).items():
            listen, _, proto = key.partition("/")
            if proto == "tcp" and bindings:
                ports[int(listen)] = (bindings[0]["HostIp"], int(bindings[0]["HostPort"]))
    return listing


_ports_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel reports free on host and this process has not handed out before.

    The kernel may offer the same free port twice while earlier picks are not bound yet (a
    benchmark picks 300 at once), so ports already given out here are skipped.
    """
    while True:
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
        if port not in _ports_handed_out:
            _ports_handed_out.add(port)
            return port


@dataclass
class LocalStub:
    """A vLLM stub running as a host process (no container), for fast tests and benchmarks."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    workdir: Path
    served_name: str
    _stopped: bool = field(default=False, repr=False)
    # Serves HTTPS (started with --ssl-certfile): the readiness check then speaks TLS too.
    tls: bool = False

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until /health answers (any status): the stub has bound its port."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"stub on port {self.port} exited ({self.process.returncode}): {self.log()}"
                )
            try:
                # Whether it is up, not whom it is: the tests verify the certificate themselves.
                unverified = ssl._create_unverified_context() if self.tls else None
                urllib.request.urlopen(f"{self.url}/health", timeout=2,
                                       context=unverified).close()
                return
            except urllib.error.HTTPError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"stub on port {self.port} not up in {timeout} s") from None
                time.sleep(0.05)

    def log(self) -> str:
        return (self.workdir / "stub.log").read_text(errors="replace")

    def stop(self) -> None:
        """Stop the process by its PID (SIGTERM, then SIGKILL) and remove its files."""
        if self._stopped:
            return
        self._stopped = True
        stop_child(self.process, STOP_TIMEOUT_S)
        for leftover in self.workdir.iterdir():
            leftover.unlink()
        self.workdir.rmdir()

    def __enter__(self) -> LocalStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_local_stub(
    port: int,
    *,
    served_name: str,
    model: str,
    api_key: str,
    behaviour: Mapping | None = None,
    box_name: str = "localhost",
    host: str = "127.0.0.1",
    wait: bool = True,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> LocalStub:
    """Run stub_vllm.py on host:port (port 0: pick a free one) with the key in its environment.

    ``args`` go to `vllm serve` as a box would pass them (`--max-model-len`, the recipe's args);
    ``env`` adds to its environment (`CUDA_VISIBLE_DEVICES`, say).

    With wait (the default) it returns once the port answers; pass wait=False for stubs told
    to load slowly or fail.
    """
    port = port or free_port(host)
    workdir = Path(tempfile.mkdtemp(prefix=f"stub-{port}-", dir=cache_dir()))
    behaviour_path = workdir / "vllm.json"
    behaviour_path.write_text(json.dumps(behaviour or {}))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "VLLM_API_KEY": api_key,
        "STUB_VLLM_BEHAVIOUR": str(behaviour_path),
        "LLMAO_BOX_NAME": box_name,
        **(env or {}),
    }
    # -S: the stub needs no site-packages; skipping them trims its start-up (300 stubs in a bench).
    argv = [sys.executable, "-S", str(STUB_VLLM), "serve", model]
    argv += ["--host", host, "--port", str(port), "--served-model-name", served_name, *args]
    with open(workdir / "stub.log", "wb") as log:
        process = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    stub = LocalStub(process, host, port, workdir, served_name, tls="--ssl-certfile" in args)
    if wait:
        try:
            stub.wait_ready()
        except BaseException:
            stub.stop()
            raise
    return stub
