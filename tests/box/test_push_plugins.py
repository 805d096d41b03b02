"""The two plugins of the push path, without a container.

``llmao.fleet.box_assignment`` must hand the role the very bytes the config server
answers; ``llmao.fleet.box_program`` runs the real box program (in folders of the
test's own) and turns its report into Ansible's result: changed, program names,
diffs with the bearer masked, and the program's own message when it refuses.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleError
from ansible.module_utils.testing import patch_module_args
from ansible.plugins.loader import init_plugin_loader, lookup_loader

from ansible_collections.llmao.fleet.plugins.modules import box_program

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "roles" / "vllm_box" / "files" / "install_set.py"
BOX = "pod-push-1"
ROWS = {BOX: [["tiny-chat", 8001], ["tiny-code", 8002]], "pod-push-2": [["tiny-chat", 8001]]}


@pytest.fixture(scope="module")
def lookup():
    """The lookup as ansible-playbook loads it. The collection's packages were imported as
    plain packages (by the imports above): dropped, so Ansible's loader imports them its way.
    So are the doc fragments, which another test module imports plainly when the session
    collects it: Ansible's loader cannot read a fragment under a plain namespace package."""
    fragments = "ansible_collections.llmao.fleet.plugins.doc_fragments"
    for name in [name for name in sys.modules if name.startswith(fragments)]:
        del sys.modules[name]
    for name in ("ansible_collections.llmao.fleet", "ansible_collections.llmao",
                 "ansible_collections"):
        sys.modules.pop(name, None)
    init_plugin_loader([str(ROOT / "collections")])
    return lookup_loader.get("llmao.fleet.box_assignment")


@pytest.fixture
def box_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The box's folders in the test's own; no supervisord runs here, so no handover. The
    rig's stub nvidia-smi (one 24 GiB card) is on PATH: a box without one is refused."""
    tools = tmp_path / "bin"
    tools.mkdir()
    stub = tools / "nvidia-smi"
    script = ROOT / "rig" / "stub_nvidia_smi.py"
    stub.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    monkeypatch.setenv("STUB_NVIDIA_SMI", str(tmp_path / "no-such-gpu.json"))
    return {"supervisor_conf_dir": str(tmp_path / "conf.d"),
            "data_directory": str(tmp_path / "data"), "handover": False}


def run_module(capsys, check: bool = False, diff: bool = False, **args: Any) -> dict[str, Any]:
    with patch_module_args({**args, "_ansible_check_mode": check, "_ansible_diff": diff}), \
            pytest.raises(SystemExit):
        box_program.main()
    return json.loads(capsys.readouterr().out)


def deliver(fleet, tmp_path: Path, box: str = BOX) -> str:
    payload = tmp_path / f"{box}.json"
    payload.write_bytes(fleet.fleet.assignment(box).body)
    return str(payload)


def test_lookup_gives_the_config_servers_exact_bytes(lookup, write_fleet):
    fleet = write_fleet(ROWS)
    texts = lookup.run([BOX, "pod-push-2"], config=str(fleet.config), models=str(fleet.models))
    assert [text.encode() for text in texts] == [fleet.fleet.assignment(BOX).body,
                                                 fleet.fleet.assignment("pod-push-2").body]


def test_lookup_names_the_file_for_an_unknown_box(lookup, write_fleet):
    fleet = write_fleet(ROWS)
    with pytest.raises(AnsibleError, match=r"'pod-unknown' is not a fleet.hosts key of .*"
                                           r"config.yaml"):
        lookup.run(["pod-unknown"], config=str(fleet.config), models=str(fleet.models))


def test_lookup_refuses_a_bad_fleet_with_the_cores_message_and_no_secret(lookup, write_fleet):
    fleet = write_fleet(ROWS)
    config = fleet.config.read_text().replace("tiny-code", "no-such-model")
    fleet.config.write_text(config)
    with pytest.raises(AnsibleError) as refused:
        lookup.run([BOX], config=str(fleet.config), models=str(fleet.models))
    message = str(refused.value)
    assert f"fleet.hosts.{BOX}[1]: model 'no-such-model' is not in models.yaml" in message
    assert not any(secret in message for secret in fleet.secrets())


def test_module_writes_the_programs_then_reports_no_change(capsys, write_fleet, tmp_path,
                                                           box_dirs):
    fleet = write_fleet(ROWS)
    args = {"program": str(PROGRAM), "payload": deliver(fleet, tmp_path),
            "python": sys.executable, **box_dirs}
    first = run_module(capsys, **args)
    assert first["changed"] is True
    assert first["programs"] == first["added"] == ["tiny-chat", "tiny-code"]
    assert first["updated"] == first["removed"] == []
    assert first["revision"] == fleet.fleet.assignment(BOX).revision
    assert first["applied"]["revision"] == first["revision"]
    conf = Path(box_dirs["supervisor_conf_dir"])
    assert sorted(path.name for path in conf.iterdir()) == ["llmao-tiny-chat.conf",
                                                          "llmao-tiny-code.conf"]
    again = run_module(capsys, **args)
    assert again["changed"] is False
    assert again["programs"] == ["tiny-chat", "tiny-code"]
    assert again["added"] == again["updated"] == again["removed"] == []


def test_module_names_rewritten_and_stale_programs(capsys, write_fleet, tmp_path, box_dirs):
    fleet = write_fleet(ROWS)
    args = {"program": str(PROGRAM), "python": sys.executable, **box_dirs}
    run_module(capsys, payload=deliver(fleet, tmp_path), **args)
    moved = write_fleet({BOX: [["tiny-chat", 8001], ["tiny-code", 8003, "tiny-code-b"]]})
    result = run_module(capsys, payload=deliver(moved, tmp_path), **args)
    assert result["added"] == ["tiny-code-b"]
    assert result["removed"] == ["tiny-code"]
    assert result["updated"] == []
    assert result["programs"] == ["tiny-chat", "tiny-code-b"]


def test_check_mode_writes_nothing_and_diffs_hide_the_bearer(capsys, write_fleet, tmp_path,
                                                             box_dirs):
    fleet = write_fleet(ROWS)
    result = run_module(capsys, check=True, diff=True, program=str(PROGRAM),
                        payload=deliver(fleet, tmp_path), python=sys.executable, **box_dirs)
    assert result["changed"] is True
    assert result["added"] == ["tiny-chat", "tiny-code"]
    assert not Path(box_dirs["supervisor_conf_dir"]).exists()
    assert not Path(box_dirs["data_directory"]).exists()
    headers = [(d["before_header"], d["after_header"]) for d in result["diff"]]
    conf = box_dirs["supervisor_conf_dir"]
    assert ("/dev/null", f"{conf}/llmao-tiny-chat.conf") in headers
    assert 'VLLM_API_KEY="***"' in result["diff"][0]["after"]
    printed = json.dumps(result)
    assert not any(secret in printed for secret in fleet.secrets())


def test_a_refusal_fails_with_the_programs_message(capsys, write_fleet, tmp_path, box_dirs):
    fleet = write_fleet(ROWS)
    broken = json.loads(fleet.fleet.assignment(BOX).body)
    broken["servers"][1]["port"] = broken["servers"][0]["port"]
    payload = tmp_path / "broken.json"
    payload.write_text(json.dumps(broken))
    result = run_module(capsys, program=str(PROGRAM), payload=str(payload),
                        python=sys.executable, **box_dirs)
    assert result["failed"] is True
    assert result["rc"] == 2
    assert result["msg"] == "servers[1].port: 8001 appears twice"
    assert not Path(box_dirs["supervisor_conf_dir"]).exists()
