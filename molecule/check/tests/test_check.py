"""After ``--check`` on a fresh box nothing of the push path may be on it."""

from __future__ import annotations

import os

import pytest
import testinfra

BOX = "llmao-molecule-check"


@pytest.fixture(scope="module")
def box() -> testinfra.host.Host:
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    return testinfra.get_host(f"ansible://{BOX}?ansible_inventory={inventory}")


@pytest.mark.parametrize("path", [
    "/usr/local/lib/llmao",
    "/etc/supervisor/conf.d/llmao-tiny-chat.conf",
    "/etc/supervisor/conf.d/llmao-tiny-code.conf",
    "/data",
])
def test_nothing_was_written(box, path):
    assert not box.file(path).exists


def test_no_staging_folder_is_left(box):
    assert box.check_output("find /tmp -maxdepth 1 -name 'llmao-stage-*'") == ""


def test_supervisord_runs_no_program(box):
    assert box.run("supervisorctl status").stdout.strip() == ""
