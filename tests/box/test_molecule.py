"""The Molecule scenarios of the push path, one test each, on the rig's container engine.

``molecule test`` runs from the repository root (where it finds the shared base
config ``.config/molecule/config.yml``) with this virtual environment's tools on
PATH. Besides the scenario's own verdict, every line it printed is scanned for the
fleet's secrets: a bearer in a diff, a task result or an error would be a leak.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet

REPO = Path(__file__).resolve().parents[2]
FLEET_DIR = REPO / "molecule" / "shared" / "fleet"
BASE_CONFIG = REPO / ".config" / "molecule" / "config.yml"
SCENARIO_TIMEOUT_S = 600
FAILURE = re.compile(r"fatal:|FAILED|^E |Error|failed=[1-9]|changed=[1-9].*idempotence")

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def fleet_secrets() -> list[str]:
    fleet = load_fleet(str(FLEET_DIR / "config.yaml"), str(FLEET_DIR / "models.yaml"))
    bearers = [server.api_key for server in fleet.servers()]
    return [fleet.settings.fleet.key, fleet.settings.fleet.vllm_api_salt, *bearers]


def run_scenario(name: str) -> str:
    """``molecule test -s NAME``; its whole output, or a failure that shows what went wrong."""
    env = {**os.environ,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "NO_COLOR": "1", "PY_COLORS": "0", "ANSIBLE_FORCE_COLOR": "0"}
    done = subprocess.run(["molecule", "--base-config", str(BASE_CONFIG), "test", "-s", name],
                          cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=SCENARIO_TIMEOUT_S, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"molecule test -s {name} failed:\n{failure_lines(output)}"
    return output


def failure_lines(output: str) -> str:
    """The lines that say what went wrong (the scenario's end is only its clean-up)."""
    lines = output.splitlines()
    marked = [i for i, line in enumerate(lines) if FAILURE.search(line)]
    keep = sorted({j for i in marked for j in range(max(i - 3, 0), min(i + 12, len(lines)))})
    return "\n".join(lines[j] for j in keep[:300]) or output[-6000:]


def assert_no_secret(output: str) -> None:
    for secret in fleet_secrets():
        assert secret not in output, "a fleet secret reached Molecule's output"


def test_default_scenario_converges_idempotently_and_verifies(box_image):
    output = run_scenario("default")
    assert re.search(r"idempotence\W+Executed: Successful", output), "idempotence did not run"
    assert re.search(r"=+ \d+ passed in", output), "the testinfra verifier did not run"
    assert_no_secret(output)


def test_check_scenario_reports_changes_and_leaves_the_box_untouched(box_image):
    output = run_scenario("check")
    assert "+command=vllm serve example/tiny-chat-1b" in output, "no program diff shown"
    assert '+environment=VLLM_API_KEY="***"' in output, "the diff must show the masked bearer"
    assert re.search(r"=+ \d+ passed in", output), "the testinfra verifier did not run"
    assert_no_secret(output)
