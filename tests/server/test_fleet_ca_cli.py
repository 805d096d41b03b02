"""``llmao-fleet-ca init``: a CA that box_tls loads, a key only its owner reads, and an
existing CA never overwritten."""

from __future__ import annotations

import stat

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.tests.unit.fleets import base_config, write_pair
from llmao_server.fleet_ca_cli import main


def test_init_writes_a_ca_that_box_tls_loads(tmp_path, capsys):
    folder = tmp_path / "ca"
    assert main(["init", "--dir", str(folder)]) == 0
    assert stat.S_IMODE((folder / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert "box_tls:" in capsys.readouterr().out
    config = base_config()
    config["box_tls"] = {"ca_cert": str(folder / "ca.pem"), "ca_key": str(folder / "ca.key")}
    config["rollout"] = {"follow_s": 30}
    fleet = load_fleet(*write_pair(tmp_path, config), signer=True)
    assert fleet.settings.box_tls.ca_not_after > 0 and fleet.warnings == ()


def test_init_never_overwrites_a_ca(tmp_path, capsys):
    assert main(["init", "--dir", str(tmp_path)]) == 0
    key = (tmp_path / "ca.key").read_bytes()
    assert main(["init", "--dir", str(tmp_path)]) == 2
    assert "exists; a CA is never overwritten" in capsys.readouterr().err
    assert (tmp_path / "ca.key").read_bytes() == key
