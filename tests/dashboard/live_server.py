"""The real ``llmao-server`` (gunicorn, two workers) for the browser and PostgreSQL tests.

Started from the installed entry point on a free loopback port, with HOME in
the test's folder; stopped by its PID. Its log is kept so a test can read the
audit lines and check that no secret reached them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rig.boxes import free_port
from tests.server.fleet_pair import box_headers

SERVER = Path(sys.executable).with_name("llmao-server")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


@dataclass
class LiveServer:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def fetch_config(self, host: str) -> tuple[int, bytes]:
        """``GET /vllm/config`` as a box claiming ``host`` makes it: (status, body)."""
        request = urllib.request.Request(f"{self.url}/vllm/config",
                                         headers=box_headers(host=host))
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read()

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start_server(folder: Path, name: str, config: str, models: str, state: str) -> LiveServer:
    """Run ``llmao-server`` for these files on a free port and wait until it answers."""
    port = free_port()
    log_path = folder / f"{name}.log"
    environment = {key: value for key, value in os.environ.items() if key != "XDG_RUNTIME_DIR"}
    environment["HOME"] = str(folder / "home")
    with open(log_path, "wb") as sink:
        process = subprocess.Popen(
            [str(SERVER), "--config", config, "--models", models, "--bind", f"127.0.0.1:{port}",
             "--workers", "2", "--state", state],
            stdout=sink, stderr=subprocess.STDOUT, env=environment)
    server = LiveServer(process, port, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.answers():
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"llmao-server did not start:\n{server.log()}")
        time.sleep(0.1)
    return server
