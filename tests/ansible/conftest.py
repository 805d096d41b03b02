"""Fixtures for tests that drive the ansible command-line tools on this checkout.

Every command runs from the repository root with its ``ansible.cfg``, the way an
operator runs them, and with Ansible's temporary files kept under the test's folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def ansible(tmp_path_factory: pytest.TempPathFactory) -> Callable[...,
                                                                 subprocess.CompletedProcess]:
    """``ansible("ansible-inventory", "-i", src, "--list")``: run a tool, capture its output."""
    tmp_path = tmp_path_factory.mktemp("ansible")
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_REMOTE_TEMP": str(tmp_path / "ansible-remote"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }

    def run(tool: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / tool), *args], cwd=ROOT, env=env, text=True,
                              capture_output=True, timeout=300, check=False)

    return run


@pytest.fixture(scope="session")
def example_fleet() -> Fleet:
    return load_fleet(str(EXAMPLE / "config.yaml"), str(EXAMPLE / "models.yaml"))


@pytest.fixture(scope="session")
def example_secrets(example_fleet: Fleet) -> set[str]:
    """Every secret the example's files hold or derive: none may show in any output."""
    settings = example_fleet.settings
    found = {settings.fleet.key, settings.fleet.vllm_api_salt, settings.fleet.selfhost_api_key,
             settings.litellm.master_key, settings.admin.token}
    found.update(provider.api_key for provider in settings.providers.values())
    found.update(server.api_key for server in example_fleet.servers())
    return {secret for secret in found if secret}


@pytest.fixture(scope="session")
def assert_no_secret(example_secrets: set[str]) -> Callable[[str], None]:
    """``assert_no_secret(text)`` fails when any example secret is in ``text``."""

    def check(text: str) -> None:
        leaked = sum(1 for secret in example_secrets if secret in text)
        assert not leaked, f"{leaked} secret(s) in the output"  # never the values themselves

    return check
