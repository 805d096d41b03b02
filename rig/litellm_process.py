"""Start and stop a LiteLLM proxy for tests, the demo and reconcile runs.

Two kinds answer the same contract (tests/integration/test_litellm_contract.py):
"real" is LiteLLM's own proxy app (rig/litellm_harness.py, run by the python of
the separate LiteLLM virtual environment that `make setup` creates), "fake" is
rig/fake_litellm.py on the current python. Either runs as a child process with
the master key in its environment (never on its command line), logs to a file,
is waited for until it answers, and is stopped by its PID.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from rig import REPO_ROOT, cache_dir
from rig.boxes import free_port
from rig.processes import ChildService

Kind = Literal["real", "fake"]

VENV_ENV = "LLMAO_LITELLM_VENV"
DEFAULT_VENV = REPO_ROOT / ".venv-litellm"
READY_TIMEOUT_S: dict[str, float] = {"real": 120.0, "fake": 15.0}
STOP_TIMEOUT_S = 15.0
READY_PATH = "/health/liveliness"


class LiteLLMMissing(RuntimeError):
    """The LiteLLM virtual environment is not there, so the real proxy cannot start."""


class LiteLLMStartError(RuntimeError):
    """The proxy exited or never answered; the message carries the end of its log."""


def litellm_python() -> Path:
    """The python of the LiteLLM venv (`.venv-litellm`, or $LLMAO_LITELLM_VENV)."""
    venv = Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)
    python = venv / "bin" / "python"
    if not python.exists():
        raise LiteLLMMissing(
            f"the LiteLLM virtual environment {venv} is missing: run `make setup` "
            "(or rig/litellm_venv.sh) to create it"
        )
    return python


def command_for(kind: Kind, host: str, port: int) -> list[str]:
    """The argv of each kind: only the address, since the key travels in the environment."""
    if kind == "real":
        script, python = REPO_ROOT / "rig" / "litellm_harness.py", litellm_python()
    elif kind == "fake":
        script, python = REPO_ROOT / "rig" / "fake_litellm.py", Path(sys.executable)
    else:
        raise ValueError(f"kind must be 'real' or 'fake', not {kind!r}")
    return [str(python), str(script), "--host", host, "--port", str(port)]


@dataclass
class LiteLLMProcess(ChildService):
    """A running proxy: where it answers, its log, how long it took to start, how to stop it."""

    stop_timeout_s: ClassVar[float] = STOP_TIMEOUT_S

    kind: Kind
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    started_in_s: float = 0.0
    _stopped: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid



def answers(url: str) -> bool:
    """True once the proxy's liveness route answers 200."""
    try:
        with urllib.request.urlopen(url + READY_PATH, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(proxy: LiteLLMProcess, timeout: float) -> None:
    """Poll until the proxy answers while its process lives; fail, with its log, if it exits."""
    started = time.monotonic()
    while not answers(proxy.url) or proxy.process.poll() is not None:
        if proxy.process.poll() is not None:
            raise LiteLLMStartError(
                f"{proxy.kind} LiteLLM exited with {proxy.process.returncode}; "
                f"log {proxy.log_path}:\n{tail(proxy.log())}"
            )
        if time.monotonic() - started > timeout:
            proxy.stop()
            raise LiteLLMStartError(
                f"{proxy.kind} LiteLLM did not answer within {timeout:.0f} s; "
                f"log {proxy.log_path}:\n{tail(proxy.log())}"
            )
        time.sleep(0.1)


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def start_litellm(
    kind: Kind = "real",
    port: int | None = None,
    *,
    master_key: str,
    host: str = "127.0.0.1",
    log_dir: Path | None = None,
    timeout: float | None = None,
) -> LiteLLMProcess:
    """Start a proxy of the given kind on host:port (a free port when None) and wait for it.

    Raises LiteLLMMissing when the real kind's venv is absent, LiteLLMStartError when the
    proxy exits or does not answer in time (the process is stopped before raising).
    """
    if not master_key:
        raise ValueError("a LiteLLM master key is required")
    port = port or free_port(host)
    argv = command_for(kind, host, port)
    if answers(f"http://{host}:{port}"):
        # Readiness would be read from whoever holds the port, not from our process.
        raise LiteLLMStartError(f"{host}:{port} is already served by another process")
    log_path = (log_dir or cache_dir()) / f"litellm-{kind}-{port}.log"
    env = {**os.environ, "LITELLM_MASTER_KEY": master_key}
    began = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            argv, env=env, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT,
        )
    proxy = LiteLLMProcess(kind, f"http://{host}:{port}", process, log_path)
    wait_ready(proxy, READY_TIMEOUT_S[kind] if timeout is None else timeout)
    proxy.started_in_s = time.monotonic() - began
    return proxy
