"""`make demo` end to end, in the local-process mode (so it runs without a container engine):

- `python -m demo` (what `make demo` runs) reaches "chat answered by <box>", prints the
  dashboard URL, and the commands it prints work as printed (curl through LiteLLM to a box,
  curl for a box's assignment), with no secret on their command line or in any output;
- the services keep running after it returns, a second start starts nothing, and the
  background reconcile loop makes passes of its own;
- `python -m demo roll` (what `make demo-roll` runs) changes a model's max_model_len, reloads
  llmao-server and watches the boxes roll it until its servers are Healthy;
- `python -m demo stop` leaves nothing running: no recorded PID, no process that mentions the
  demo's folder, no port the demo served.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from demo.fleet import template_boxes
from demo.processes import start_time
from rig.litellm_process import LiteLLMMissing, litellm_python
from tests.e2e.demo_commands import check_prometheus_command, printed_commands, run_printed

pytestmark = [pytest.mark.litellm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 240
LOOP_INTERVAL_S = 3


def demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "demo", *args], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=START_TIMEOUT_S, check=False)


def port_open(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((host, port)) == 0


def run_every_printed_command(output: str, env: dict[str, str]) -> str:
    """Runs each command the summary prints, as printed, and checks what it did; returns the
    stop command, for the end. A printed command this does not know fails the test."""
    commands = printed_commands(output)
    stop = [command for command in commands if command == "make demo-stop"]
    assert len(stop) == 1, commands
    for command in commands:
        if command.startswith("curl ") and "/v1/chat/completions" in command:
            answer = json.loads(run_printed(command, env).stdout)
            assert re.fullmatch(r"answered by 127\.0\.0\.[234] port 800[12]",
                                answer["choices"][0]["message"]["content"])
        elif command.startswith("curl ") and command.endswith("/vllm/config"):
            assignment = json.loads(run_printed(command, env).stdout)  # box token in headers
            assert assignment["host"] == "127.0.0.2"
            assert [server["port"] for server in assignment["servers"]] == [8001, 8002]
            assert assignment["rollout"]["follow_s"] > 0, "the boxes follow their assignment"
            assert "tls" in assignment, "box TLS is on"
        elif command.startswith("SSL_CERT_FILE=") and "playbooks/reconcile.yml" in command:
            assert "failed=0" in run_printed(command, env).stdout
        elif command.startswith("kill -HUP "):
            run_printed(command, env)  # llmao-server reads the same files again
        elif command.startswith("prometheus "):
            chat = next(c for c in commands if "/v1/chat/completions" in c)
            servers = int(re.search(r"(\d+) vLLM servers", output).group(1))
            check_prometheus_command(command, env, servers,
                                     ask=lambda chat=chat: run_printed(chat, env))
        else:
            assert command == "make demo-stop", f"a printed command no test runs: {command}"
    return stop[0]


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line or environment mentions text (read from /proc, as root)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            blob = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if text.encode() in blob:
            found.append(int(proc.name))
    return found


def demo_secrets(folder: Path) -> list[str]:
    config = folder / "fleet" / "config.yaml"
    fleet = load_fleet(str(config), str(folder / "fleet" / "models.yaml"))
    settings = yaml.safe_load(config.read_text())
    found = [settings["fleet"]["key"], settings["fleet"]["vllm_api_salt"],
             settings["litellm"]["master_key"], settings["admin"]["token"],
             settings["metrics"]["token"]]
    tokens = [path.read_text().strip() for path in folder.glob("boxes/*/data/llmao/box-token")]
    assert len(tokens) == len(fleet.assignments), "every box keeps its box token"
    return found + [server.api_key for server in fleet.servers()] + tokens


def wait_for_loop_pass(log: Path, passes: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while log.read_text().count("==> reconcile pass at") < passes:
        assert time.monotonic() < deadline, f"the background loop made no pass:\n{log.read_text()}"
        time.sleep(1)


def check_box_tls(folder: Path, printed: str) -> None:
    """Box TLS is on: each box serves HTTPS with a certificate of the demo's fleet CA (its key
    0600, on the box), plain HTTP gets no answer, and LiteLLM routes every server over https."""
    config = yaml.safe_load((folder / "fleet" / "config.yaml").read_text())
    fleet_ca = Path(config["box_tls"]["ca_cert"])
    assert fleet_ca == folder / "fleet-ca" / "ca.pem"
    assert re.search(r"^  box TLS +every box serves HTTPS", printed, re.MULTILINE), printed
    context = ssl.create_default_context(cafile=str(fleet_ca))
    boxes = template_boxes()
    for box in boxes:
        assert (folder / "boxes" / box / "data" / "llmao" / "tls" / "key.pem").stat().st_mode \
            & 0o777 == 0o600
        with urllib.request.urlopen(f"https://{box}:8001/health", timeout=10,
                                    context=context) as answer:
            assert answer.status == 200
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://{box}:8001/health", timeout=10).close()
    request = urllib.request.Request(f"{config['litellm']['url']}/model/info", headers={
        "Authorization": f"Bearer {config['litellm']['master_key']}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        bases = [entry["litellm_params"]["api_base"] for entry in json.load(answer)["data"]
                 if str(entry["model_info"].get("id", "")).startswith("llmao:")]
    assert bases and all(re.fullmatch(r"https://127\.0\.0\.[234]:800[12]/v1", base)
                         for base in bases), bases


@pytest.fixture
def demo_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The demo's environment, its folder under the checkout's .demo/ (git-ignored), so that
    the summary names its files by relative paths, as a user's `make demo` does; removed
    after."""
    try:
        litellm_python()
    except LiteLLMMissing as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(exc))
    busy = [f"{box}:{port}" for box in template_boxes() for port in (8001, 8002)
            if port_open(box, port)]
    if busy:
        pytest.skip(f"the local fleet's addresses are in use ({', '.join(busy)}): is a "
                    "`make demo` running? `make demo-stop` stops it")
    folder = REPO / ".demo" / f"test-{tmp_path.name}"
    yield {**os.environ, "LLMAO_DEMO_BOXES": "local", "LLMAO_DEMO_DIR": str(folder),
           "LLMAO_DEMO_RECONCILE_S": str(LOOP_INTERVAL_S)}
    shutil.rmtree(folder, ignore_errors=True)


def test_demo_starts_answers_a_chat_and_stops_without_a_trace(demo_env):
    folder = Path(demo_env["LLMAO_DEMO_DIR"])
    outputs: list[str] = []
    stopped = None
    try:
        first = demo(demo_env)
        outputs.append(first.stdout + first.stderr)
        assert first.returncode == 0, outputs[-1]
        assert re.search(r"^chat answered by 127\.0\.0\.[234]$", first.stdout, re.MULTILINE)
        assert re.search(r"^  dashboard +https://127\.0\.0\.1:\d+/fleet", first.stdout,
                         re.MULTILINE), first.stdout
        for step in range(1, 6):
            assert f"[{step}/5] " in first.stdout
        record = json.loads((folder / "pids.json").read_text())
        assert record["phase"] == "up" and record["mode"] == "local"
        roles = sorted(entry["role"] for entry in record["processes"])
        assert roles == ["litellm", "llmao-server", "reconcile loop", "supervisord 127.0.0.2",
                         "supervisord 127.0.0.3", "supervisord 127.0.0.4"]
        assert all(start_time(entry["pid"]) == entry["started"]
                   for entry in record["processes"]), "every service outlives `make demo`"

        # Every printed command works as printed, its secrets read from 0600 files.
        stop_command = run_every_printed_command(first.stdout, demo_env)
        check_box_tls(folder, first.stdout)
        for name in ("admin-token", "litellm.headers", "box.headers", "metrics-token",
                     "fleet/config.yaml"):
            assert (folder / name).stat().st_mode & 0o077 == 0, name

        # The whole job: how to roll a change and to push, a price per box, Prometheus.
        assert re.search(r"^  roll +edit \S+models\.yaml .*\n +kill -HUP \d+ ", first.stdout,
                         re.MULTILINE), first.stdout
        assert re.search(r"^  push +provision\.yml reaches container boxes", first.stdout,
                         re.MULTILINE), first.stdout
        config = yaml.safe_load((folder / "fleet" / "config.yaml").read_text())
        assert set(config["fleet"]["cost_per_hour"]) == set(template_boxes())
        prometheus = re.search(r"^  prometheus +prometheus --config\.file=(\S+) ",
                               first.stdout, re.MULTILINE)
        assert prometheus and Path(REPO, prometheus.group(1)).resolve() == \
            folder / "prometheus.yml"
        if shutil.which("promtool"):
            subprocess.run(["promtool", "check", "config", str(folder / "prometheus.yml")],
                           capture_output=True, timeout=60, check=True)
        scrape = yaml.safe_load((folder / "prometheus.yml").read_text())["scrape_configs"][0]
        token = (folder / "metrics-token").read_text().strip()
        with urllib.request.urlopen(urllib.request.Request(
                f"https://{scrape['static_configs'][0]['targets'][0]}/metrics",
                headers={"Authorization": f"Bearer {token}"}), timeout=30,
                context=ssl.create_default_context(
                    cafile=scrape["tls_config"]["ca_file"])) as answer:
            assert "llmao_box_cost_usd_per_hour" in answer.read().decode()

        # Idempotent: a second start finds it running and starts nothing.
        second = demo(demo_env)
        outputs.append(second.stdout + second.stderr)
        assert second.returncode == 0, outputs[-1]
        assert "already running: nothing started" in second.stdout
        assert json.loads((folder / "pids.json").read_text())["processes"] == \
            record["processes"]

        wait_for_loop_pass(folder / "logs" / "reconcile.log", passes=2)

        # `make demo-roll`: the change reaches every box of the model, one turn at a time,
        # and the progress is printed until the model's servers are Healthy on it.
        rolled = demo(demo_env, "roll")
        outputs.append(rolled.stdout + rolled.stderr)
        assert rolled.returncode == 0, outputs[-1]
        assert "tiny-chat: max_model_len 8192 -> 4096 in " in rolled.stdout
        # Before the change: every server that restarts, and why. The first box shares its
        # card between tiny-chat and small-chat, so small-chat restarts there too.
        told = re.findall(r"^  box \S+: (.*)$", rolled.stdout, re.MULTILINE)
        assert told.count("tiny-chat :8001 restarts (its recipe changed: max_model_len 8192 "
                          "-> 4096)") == 2, rolled.stdout
        assert [line for line in told if line.startswith(
            "small-chat :8002 restarts (it shares the box's card with tiny-chat, whose recipe "
            "changed: its --gpu-memory-utilization ")], rolled.stdout
        assert len(told) == 3, rolled.stdout
        assert re.search(r"^\[ *\d+ s\] tiny-chat: .*(draining|restarting)", rolled.stdout,
                         re.MULTILINE), rolled.stdout
        assert re.search(r"^rolled: \d box\(es\) of tiny-chat on the new revision and Healthy",
                         rolled.stdout, re.MULTILINE), rolled.stdout
        assert "max_model_len: 4096" in (folder / "fleet" / "models.yaml").read_text()
        running = processes_mentioning(str(folder))
        assert len(running) >= 10, "the vLLM stubs, supervisords, servers and loop are seen"
        stopped = run_printed(stop_command, demo_env)  # `make demo-stop` as printed
    finally:
        if stopped is None:
            stopped = demo(demo_env, "stop")
        outputs.append(stopped.stdout + stopped.stderr)
    assert stopped.returncode == 0, outputs[-1]
    assert "llmao demo stopped" in stopped.stdout

    for entry in record["processes"]:
        assert start_time(entry["pid"]) != entry["started"], f"{entry['role']} still runs"
    assert processes_mentioning(str(folder)) == []
    open_ports = [(host, port) for host, port in record["endpoints"] if port_open(host, port)]
    assert open_ports == []

    logs = [path.read_text(errors="replace") for path in folder.rglob("*.log")]
    for secret in demo_secrets(folder):
        assert not any(secret in text for text in outputs + logs)
