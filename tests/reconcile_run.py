"""Run ``playbooks/reconcile.yml`` as an operator does, and read its outcome from the output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM

REPO = Path(__file__).resolve().parent.parent
PLAYBOOK = REPO / "playbooks" / "reconcile.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
RECAP = re.compile(r"^localhost\s+:\s+(?P<counts>.*)$", re.MULTILINE)


@dataclass
class PlaybookRun:
    """One ``ansible-playbook`` run: exit status, output, and the recap's counts."""

    returncode: int
    output: str

    @property
    def recap(self) -> dict[str, int]:
        match = RECAP.search(self.output)
        if match is None:
            return {}
        return {key: int(value) for key, value in
                (item.split("=") for item in match.group("counts").split())}

    @property
    def changed(self) -> int:
        return self.recap.get("changed", -1)

    @property
    def failed(self) -> int:
        return self.recap.get("failed", -1)


def run_reconcile(inventory: Path, *flags: str, env: Mapping[str, str] | None = None,
                  timeout: float = 300.0) -> PlaybookRun:
    """``ansible-playbook playbooks/reconcile.yml -i INVENTORY FLAGS`` from the repository root
    (where ansible.cfg finds the collection), without colour so the output is plain text."""
    # Unbuffered, so that a pass killed at its time limit has printed the task it was in.
    environment = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                   "PYTHONUNBUFFERED": "1", **(env or {})}
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), str(PLAYBOOK), "-i", str(inventory), *flags],
                          cwd=REPO, env=environment, capture_output=True, text=True,
                          timeout=timeout)
    return PlaybookRun(done.returncode, done.stdout + done.stderr)


def forget_routes(fleet: Fleet) -> None:
    """The session's LiteLLM (the fake or the proxy) is shared: a test's deployments go with
    it, the other tests' stay."""
    client = LiteLLM.from_settings(fleet.settings)
    ours = tuple(f"llmao:{box}:" for box in fleet.assignments)
    for route in client.routes():
        if route.id.startswith(ours):
            client.delete(route.id)
