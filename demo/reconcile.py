"""Reconcile for the demo: `ansible-playbook playbooks/reconcile.yml` as an operator runs it,
once in the foreground when the boxes serve, then on an interval by a small background loop.

The loop is `python -m demo reconcile-loop`, a process of its own (recorded, stopped by
`make demo-stop`); its playbook runs are its children, in its process group, so stopping the
loop stops a pass in flight too. Every pass appends to `.demo/logs/reconcile.log`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rig import REPO_ROOT

from .paths import venv_tool
from .processes import Record, spawn

PLAYBOOK = REPO_ROOT / "playbooks" / "reconcile.yml"
PASS_TIMEOUT_S = 300.0
DEFAULT_INTERVAL_S = 30.0
INTERVAL_ENV = "LLMAO_DEMO_RECONCILE_S"


def interval_s() -> float:
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    try:
        return max(float(raw), 1.0) if raw else DEFAULT_INTERVAL_S
    except ValueError:
        raise ValueError(f"{INTERVAL_ENV}={raw!r} is not a number of seconds") from None


def run_pass(inventory: Path, ca_file: Path, log_path: Path) -> int:
    """One reconcile pass, its output appended to log_path; returns the playbook's status."""
    env = {**os.environ, "SSL_CERT_FILE": str(ca_file), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0"}
    argv = [str(venv_tool("ansible-playbook")), str(PLAYBOOK), "-i", str(inventory)]
    with open(log_path, "a") as log:
        log.write(f"==> reconcile pass at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        log.flush()
        try:
            done = subprocess.run(argv, env=env, cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                  stdout=log, stderr=subprocess.STDOUT, timeout=PASS_TIMEOUT_S,
                                  check=False)
        except subprocess.TimeoutExpired:
            log.write(f"==> the pass took more than {PASS_TIMEOUT_S:.0f} s and was stopped\n")
            return 124
    return done.returncode


def start_loop(record: Record, inventory: Path, ca_file: Path, log_path: Path,
               every_s: float) -> None:
    argv = [sys.executable, "-m", "demo", "reconcile-loop", "--inventory", str(inventory),
            "--ca", str(ca_file), "--every", str(every_s)]
    spawn(record, "reconcile loop", argv, log_path.with_name("reconcile-loop.log"),
          env=os.environ, cwd=REPO_ROOT)


def loop(inventory: Path, ca_file: Path, log_path: Path, every_s: float) -> int:
    """Run a pass every ``every_s`` seconds until SIGTERM (the first pass was the demo's)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(every_s)
        status = run_pass(inventory, ca_file, log_path)
        print(f"reconcile pass finished with status {status}", flush=True)
