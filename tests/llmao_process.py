"""Run the real ``llmao-server`` for reconcile's tests and benchmark, and stop it by its PID."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from rig.boxes import free_port
from rig.processes import ChildService

SERVER = Path(sys.executable).with_name("llmao-server")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
RELOAD_TIMEOUT_S = 30.0


@dataclass
class LlmaoServer(ChildService):
    """A running ``llmao-server``: its base URL, log and process (stopping it by its PID,
    gunicorn's master, stops the workers too)."""

    stop_timeout_s: ClassVar[float] = STOP_TIMEOUT_S

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    context: ssl.SSLContext | None = field(default=None, repr=False)
    workers: int = 2
    _stopped: bool = field(default=False, repr=False)

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2,
                                        context=self.context) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def reload(self, timeout: float = RELOAD_TIMEOUT_S) -> None:
        """SIGHUP to gunicorn's arbiter; back once the log shows the reload's outcome, a full
        set of new workers booted and every old one gone (a gevent worker leaves only after its
        graceful wait, and answers until then): from then on every answer is the new files'."""
        before = self.log()
        reloads, hang_ups = before.count("llmao_server.reload"), before.count("Hang up")
        os.kill(self.process.pid, signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self.log()
            after = log.split("Hang up")[-1] if log.count("Hang up") > hang_ups else ""
            # An old worker logs its exit, or (killed while it was still booting, before its
            # handlers were in place) gunicorn logs the signal that ended it.
            gone = after.count("Worker exiting") + after.count("was sent SIGTERM")
            if (log.count("llmao_server.reload") > reloads
                    and after.count("Booting worker") >= self.workers and gone >= self.workers):
                return
            time.sleep(0.1)
        raise RuntimeError(f"no reload seen in llmao-server's log:\n{self.log()[-3000:]}")


def start_llmao_server(config: Path, models: Path, log_dir: Path, *, host: str = "127.0.0.1",
                       port: int | None = None, workers: int = 2,
                       tls: tuple[Path, Path, Path] | None = None,
                       options: Sequence[str] = (), server: Path = SERVER,
                       env: dict[str, str] | None = None) -> LlmaoServer:
    """Start it on host:port (a free port when None) and wait for ``/healthz``.

    ``tls`` is (CA file, certificate, key): the server serves HTTPS with the pair and this
    side trusts the CA. ``options`` are more ``llmao-server`` flags; ``server`` is the
    program (this environment's by default), run in ``env`` (this process's by default).
    """
    port = port or free_port(host)
    argv = [str(server), "--config", str(config), "--models", str(models),
            "--bind", f"{host}:{port}", "--workers", str(workers), *options]
    context = None
    if tls is not None:
        ca_file, certfile, keyfile = tls
        argv += ["--certfile", str(certfile), "--keyfile", str(keyfile)]
        context = ssl.create_default_context(cafile=str(ca_file))
    log_path = log_dir / f"llmao-server-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, env=env)
    scheme = "https" if tls else "http"
    server = LlmaoServer(f"{scheme}://{host}:{port}", process, log_path, context, workers)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.answers():
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"llmao-server did not start; its log:\n{server.log()[-3000:]}")
        time.sleep(0.1)
    return server
