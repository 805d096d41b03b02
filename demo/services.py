"""The demo's two services: llmao-server over HTTPS, and the real LiteLLM proxy.

Both run detached and recorded (demo/processes.py). LiteLLM is launched first and waited for
last, because importing it takes 15-25 s that the boxes can use to boot.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import time
from pathlib import Path

from rig import REPO_ROOT
from rig.boxes import free_port
from rig.litellm_process import READY_TIMEOUT_S, LiteLLMProcess, command_for, wait_ready
from rig.tls import ServerTls
from rig.web import answers, call

from .fleet import DemoFleet
from .paths import shown, venv_tool
from .processes import Record, spawn

LLMAO_START_TIMEOUT_S = 60.0
LLMAO_WORKERS = 2
CHAT_TIMEOUT_S = 60.0


class ServiceError(RuntimeError):
    """A service did not start or answer; the message says where its log is."""


def pick_port(host: str, preferred: int) -> int:
    """The preferred port when it is free on host, else any free one."""
    with socket.socket() as probe:
        # As the servers bind: a port an earlier run left in TIME_WAIT is free to them.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, preferred))
        except OSError:
            return free_port(host)
    return preferred


def start_llmao(record: Record, fleet: DemoFleet, tls: ServerTls, host: str, port: int,
                logs: Path) -> str:
    """llmao-server on host:port over HTTPS, SQLite in .demo/; returns its URL once up."""
    argv = [str(venv_tool("llmao-server")), "--config", str(fleet.config_path),
            "--models", str(fleet.models_path), "--bind", f"{host}:{port}",
            "--workers", str(LLMAO_WORKERS), "--certfile", str(tls.certfile),
            "--keyfile", str(tls.keyfile)]
    log_path = logs / "llmao-server.log"
    process = spawn(record, "llmao-server", argv, log_path, env=os.environ)
    record.add_endpoint(host, port)
    url = f"https://{host}:{port}"
    context = ssl.create_default_context(cafile=str(tls.ca_file))
    deadline = time.monotonic() + LLMAO_START_TIMEOUT_S
    while not answers(f"{url}/healthz", context):
        if process.poll() is not None or time.monotonic() > deadline:
            raise ServiceError(f"llmao-server did not start (log {shown(log_path)}):\n"
                               + "\n".join(log_path.read_text().splitlines()[-8:]))
        time.sleep(0.2)
    return url


def launch_litellm(record: Record, master_key: str, port: int, logs: Path) -> LiteLLMProcess:
    """Start the real proxy (the `.venv-litellm` python) on 127.0.0.1:port; do not wait."""
    argv = command_for("real", "127.0.0.1", port)
    log_path = logs / "litellm.log"
    env = {**os.environ, "LITELLM_MASTER_KEY": master_key}
    process = spawn(record, "litellm", argv, log_path, env=env, cwd=REPO_ROOT)
    record.add_endpoint("127.0.0.1", port)
    return LiteLLMProcess("real", f"http://127.0.0.1:{port}", process, log_path)


def wait_litellm(proxy: LiteLLMProcess) -> None:
    wait_ready(proxy, READY_TIMEOUT_S["real"])


def owned_routes(litellm_url: str, master_key: str) -> list[str]:
    """The ids of the deployments reconcile registered (llmao's own, `llmao:` ids)."""
    status, body = call(f"{litellm_url}/model/info",
                        headers={"Authorization": f"Bearer {master_key}"}, timeout=30)
    if status != 200:
        raise ServiceError(f"LiteLLM /model/info answered {status}")
    return [str(entry["model_info"].get("id")) for entry in json.loads(body)["data"]
            if str(entry.get("model_info", {}).get("id", "")).startswith("llmao:")]


def chat(litellm_url: str, master_key: str, model: str) -> str:
    """Send one chat completion through LiteLLM and return the answer's text; retried while
    LiteLLM is still taking the fresh routes in."""
    body = {"model": model, "messages": [{"role": "user", "content": "Who answers?"}]}
    deadline = time.monotonic() + CHAT_TIMEOUT_S
    while True:
        status, answer = call(f"{litellm_url}/v1/chat/completions", body=body,
                              headers={"Authorization": f"Bearer {master_key}"}, timeout=30)
        if status == 200:
            return json.loads(answer)["choices"][0]["message"]["content"]
        if time.monotonic() > deadline:
            raise ServiceError(f"no chat answer through LiteLLM for {model}: HTTP {status}")
        time.sleep(1.0)
