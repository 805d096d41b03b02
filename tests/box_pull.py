"""A container box takes its assignment as its provision script makes it do at boot, and a
reconcile pass's plan line for its one server: what the end-to-end tests share."""

from __future__ import annotations

from pathlib import Path

from rig.boxes import Box
from rig.local_fleet import MODEL, LocalFleet
from tests.llmao_process import LlmaoServer
from tests.reconcile_run import REPO, PlaybookRun

INSTALL_SET = REPO / "roles" / "vllm_box" / "files" / "install_set.py"
BOX_PROGRAM = "/opt/llmao/install_set.py"
BOX_CA = "/etc/llmao/ca.pem"
# The one server each box of these fleets runs.
SERVER = f"{MODEL}-8001"


def pull_assignment(box: Box, server: LlmaoServer, local: LocalFleet, ca: Path) -> None:
    """What a box's provision script does at boot: run the box program, which fetches."""
    box.put_file(BOX_PROGRAM, INSTALL_SET.read_bytes(), 0o755)
    box.put_file(BOX_CA, ca.read_bytes())
    box.exec(["python3", BOX_PROGRAM], env={
        "LLMAO_URL": server.url, "FLEET_KEY": local.fleet_key, "LLMAO_HOST": box.name,
        "SSL_CERT_FILE": BOX_CA}, timeout=300)


def plan_line(run: PlaybookRun, box: str) -> str:
    """The plan's line for the one server of ``box``."""
    lines = [line for line in run.output.splitlines() if f'"{box} {SERVER} (' in line]
    assert lines, f"no plan line for {box}:\n{run.output}"
    return lines[0]
