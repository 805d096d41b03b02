"""The commands `make demo` prints, found in its output and run as a user pastes them: by bash,
from the checkout's root, in the shell `make demo` ran in.

Every line of the summary that starts a command (after its label, or on a line of its own
under one) is collected, so a command added to the summary later is found too and must have a
way to be run here. Prometheus, which runs until stopped, is started as printed, asked the
Grafana dashboard's every query once it has scraped the demo, and stopped by its PID.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from rig.processes import stop_child
from tests.alerts.test_prometheus_scrape import api, query, wait_for
from tests.grafana_queries import empty_queries

REPO = Path(__file__).resolve().parents[2]
# How a printed command begins: what the user would paste into a shell.
COMMAND_STARTS = ("curl ", "SSL_CERT_FILE=", "kill ", "prometheus ", "make ", ".venv/")
LINE = re.compile(r"^  (?:[a-z][a-zA-Z ]*?)? {2,}(\S.*)$")
PROMETHEUS_READY_S = 60.0
# Two scrapes of every vLLM (each 15 s apart in the demo's prometheus.yml) within rate()'s
# minute, and a discovery refresh before them.
SCRAPED_S = 150.0


def printed_commands(output: str) -> list[str]:
    """Every command of the summary, as printed (a comment after three spaces left off)."""
    found = []
    for line in output.splitlines():
        match = LINE.match(line)
        if match and match.group(1).startswith(COMMAND_STARTS):
            found.append(re.split(r" {3,}", match.group(1))[0])
    return found


def run_printed(command: str, env: Mapping[str, str], timeout: float = 300.0
                ) -> subprocess.CompletedProcess[str]:
    """``command`` as pasted into bash at the checkout's root; its status checked."""
    done = subprocess.run(["bash", "-c", command], cwd=REPO, env=dict(env), text=True,
                          capture_output=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"`{command}` failed ({done.returncode}):\n" \
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def check_prometheus_command(command: str, env: Mapping[str, str], servers: int,
                             ask: Callable[[], object]) -> None:
    """The printed Prometheus, run as printed: it finds every vLLM through llmao-server's
    /metrics/targets and scrapes it over HTTPS, and every Grafana query has a series.
    ``ask`` sends requests through the demo (so that the histograms and rates move)."""
    listen = re.search(r"--web\.listen-address=(\S+)", command)
    assert listen, command
    url = f"http://{listen.group(1)}"
    with open(Path(env["LLMAO_DEMO_DIR"]) / "logs" / "prometheus.log", "wb") as log:
        process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=REPO, env=dict(env),
                                   stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: api(url, "/-/ready", raw=True), PROMETHEUS_READY_S)
        wait_for(lambda: len(query(url, 'up{job="vllm"} == 1')) == servers, SCRAPED_S,
                 lambda: json.dumps(api(url, "/api/v1/targets"))[-3000:])
        deadline = time.monotonic() + SCRAPED_S
        while (empty := empty_queries(url)) and time.monotonic() < deadline:
            ask()
            time.sleep(5)
        assert not empty, "Grafana queries without a series:\n" + "\n".join(empty)
    finally:
        stop_child(process, 30.0)
