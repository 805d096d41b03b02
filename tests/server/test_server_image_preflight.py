"""`python -m rig.server_image` on a machine without a container engine says what to install,
at once and without a traceback, instead of running debootstrap for most of a minute and then
failing (docs/running-the-server.md, "Container image")."""

from __future__ import annotations

import subprocess
import sys
import time

from rig import REPO_ROOT


def test_without_an_engine_it_says_what_to_install() -> None:
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "rig.server_image"], cwd=REPO_ROOT,
                          env={"PATH": "/nonexistent", "HOME": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "apt-get install docker.io" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert time.monotonic() - began < 30


def test_the_docs_say_an_engine_is_needed() -> None:
    text = (REPO_ROOT / "docs" / "running-the-server.md").read_text()
    section = " ".join(text.split("## Container image", 1)[1].split("\n## ", 1)[0].split())
    assert "needs a container engine" in section and "apt-get install docker.io" in section


def test_the_docs_say_how_the_controller_trusts_the_server_and_sets_up_litellm() -> None:
    """How reconcile trusts llmao-server's certificate from a private CA (an absolute
    SSL_CERT_FILE: Ansible runs modules from a folder of its own) and what LiteLLM needs."""
    text = (REPO_ROOT / "docs" / "running-the-server.md").read_text()
    section = " ".join(text.split("## The controller that runs reconcile", 1)[1]
                       .split("\n## ", 1)[0].split())
    for said in ("update-ca-certificates", "`SSL_CERT_FILE`", "absolute path",
                 "CERTIFICATE_VERIFY_FAILED", "store_model_in_db", "`litellm.master_key`"):
        assert said in section, said
