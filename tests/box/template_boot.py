"""A container box booted as a Vast template boots a real one: the template's environment,
the CA the image would trust, and Vast's provision.sh running the box program."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rig.boxes import Box

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "roles" / "vllm_box" / "files"
BOX_DIR = "/opt/llmao"
CA_IN_BOX = "/etc/llmao-test/ca.pem"


def template_env(fleet_key: str, llmao_url: str, box: str) -> dict[str, str]:
    """What the template carries (FLEET_KEY, LLMAO_URL), what Vast sets (PUBLIC_IPADDR, the
    box's name in fleet.hosts), and where the test's CA is."""
    return {"FLEET_KEY": fleet_key, "LLMAO_URL": llmao_url, "PUBLIC_IPADDR": box,
            "SSL_CERT_FILE": CA_IN_BOX}


def boot(box: Box, ca_file: Path) -> subprocess.CompletedProcess[bytes]:
    """What Vast does at boot: the CA in the image, then the template's PROVISIONING_SCRIPT."""
    box.put_file(CA_IN_BOX, ca_file.read_bytes())
    box.put_file(f"{BOX_DIR}/provision.sh", (FILES / "provision" / "vast" / "provision.sh")
                 .read_bytes(), 0o755)
    box.put_file(f"{BOX_DIR}/install_set.py", (FILES / "install_set.py").read_bytes(), 0o755)
    return box.exec(["bash", f"{BOX_DIR}/provision.sh"], check=False)
