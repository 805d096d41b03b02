"""`make demo-roll`'s parts that need no running demo: the models.yaml edit, and the message
when no demo runs (the roll itself is in test_demo.py, against a started demo)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from demo import roll
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
