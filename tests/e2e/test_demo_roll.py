"""`make demo-roll`'s parts that need no running demo: the models.yaml edit, what it says
restarts (each box a local box of the demo's kind), and the message when no demo runs (the roll
itself is in test_demo.py, against a started demo)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet
from demo import restarts, roll
from demo.boxes import INSTALL_SET, box_program_env, write_local_box
from demo.fleet import TEMPLATE
from demo.processes import Record


def test_the_edit_halves_then_doubles_back_and_keeps_the_rest_of_the_file() -> None:
    text = (TEMPLATE / "models.yaml").read_text()
    halved, name, old, new = roll.changed_max_model_len(text, None)
    assert (name, old, new) == ("tiny-chat", 8192, 4096)
    assert halved.replace("max_model_len: 4096", "max_model_len: 8192", 1) == text
    back, _, old, new = roll.changed_max_model_len(halved, "tiny-chat")
    assert (old, new, back) == (4096, 8192, text)
    other, name, old, new = roll.changed_max_model_len(text, "small-chat")
    assert (name, old, new) == ("small-chat", 16384, 8192)
    assert "max_model_len: 8192\n" in other.split("small-chat", 1)[0]  # tiny-chat untouched


def test_the_edited_file_loads_to_new_revisions_for_the_models_boxes(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text((TEMPLATE / "config.yaml").read_text())
    models = tmp_path / "models.yaml"
    models.write_text((TEMPLATE / "models.yaml").read_text())
    before = load_fleet(str(config), str(models))
    models.write_text(roll.changed_max_model_len(models.read_text(), "small-chat")[0])
    after = load_fleet(str(config), str(models))
    changed = roll.model_boxes(after, "small-chat")
    assert changed and all(before.assignment(box).revision != revision
                           for box, revision in changed.items())


def test_an_unknown_model_is_refused() -> None:
    with pytest.raises(roll.NoChange, match="no model no-such-model"):
        roll.changed_max_model_len((TEMPLATE / "models.yaml").read_text(), "no-such-model")


def test_without_a_running_demo_it_says_so_and_changes_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LLMAO_DEMO_DIR", str(tmp_path))
    assert roll.roll() == 2
    stopped = Record(tmp_path / "pids.json", phase="stopped")
    stopped.save()
    assert roll.roll("tiny-chat") == 2
    assert capsys.readouterr().err.count("no llmao demo is running: start one with `make "
                                         "demo`") == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pids.json"]


def template_fleet(folder: Path, models_text: str | None = None) -> Fleet:
    """The committed local fleet, its models.yaml as ``models_text``, loaded from ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    config, models = folder / "config.yaml", folder / "models.yaml"
    config.write_text((TEMPLATE / "config.yaml").read_text())
    models.write_text(models_text or (TEMPLATE / "models.yaml").read_text())
    return load_fleet(str(config), str(models))


def applied_local_boxes(folder: Path) -> Fleet:
    """The committed local fleet, each box a local box of the demo's kind under ``folder``
    that applied its assignment (no supervisord: the box program writes the programs and
    hands nothing over)."""
    fleet = template_fleet(folder)
    for box, assignment in fleet.assignments.items():
        write_local_box(folder / box, box)
        done = subprocess.run(["python3", str(INSTALL_SET), "--payload", "-", "--no-handover"],
                              input=assignment.body, env=box_program_env(folder / box, box),
                              capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr.decode()
    return fleet


def tiny_chat_halved(folder: Path) -> Fleet:
    text = (TEMPLATE / "models.yaml").read_text()
    return template_fleet(folder / "after", roll.changed_max_model_len(text, "tiny-chat")[0])


def test_the_roll_names_every_server_that_restarts_and_why(tmp_path: Path) -> None:
    """127.0.0.2 runs tiny-chat and small-chat on one card, whose memory is divided by their
    max_model_len: halving tiny-chat's restarts small-chat there too, and the roll says so
    before it changes anything; 127.0.0.4 (small-chat alone) keeps running."""
    before = applied_local_boxes(tmp_path)
    lines = restarts.what_restarts(before, tiny_chat_halved(tmp_path),
                                   restarts.ask_local_box(tmp_path))
    assert lines[0] == ("box 127.0.0.2: tiny-chat :8001 restarts (its recipe changed: "
                        "max_model_len 8192 -> 4096)")
    assert re.fullmatch(r"box 127\.0\.0\.2: small-chat :8002 restarts \(it shares the box's "
                        r"card with tiny-chat, whose recipe changed: its "
                        r"--gpu-memory-utilization (0\.\d+) -> (0\.\d+)\)", lines[1]), lines
    assert lines[2:] == ["box 127.0.0.3: tiny-chat :8001 restarts (its recipe changed: "
                         "max_model_len 8192 -> 4096)"]
    assert not [line for line in lines if "sk-" in line or "api_key" in line]


def test_a_box_whose_program_fails_is_named_with_its_reason(tmp_path: Path) -> None:
    before = applied_local_boxes(tmp_path)
    (tmp_path / "127.0.0.3" / "conf.d" / "llmao-tiny-chat.conf").write_text("not ours\n")
    lines = restarts.what_restarts(before, tiny_chat_halved(tmp_path),
                                   restarts.ask_local_box(tmp_path))
    assert lines[-1].startswith("box 127.0.0.3: its program could not say what restarts: ")
    assert "was not written by install_set.py" in lines[-1]
