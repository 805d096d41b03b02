"""`make demo` picks the kind of box it can run before it starts anything, says why, and stops at
once with the command to run when a forced kind cannot run here. The engine and the box image
are asked through the demo's own calls, replaced here, so this runs anywhere in a second."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo import run
from demo.processes import Record
from rig.dockerd import EngineMissing


@pytest.fixture
def record(tmp_path: Path) -> Record:
    return Record(tmp_path / "pids.json")


def engine(monkeypatch: pytest.MonkeyPatch, *, answers: bool, base_image: bool,
           debootstrap: bool) -> list[str]:
    """What choose_layout will find; returns the list of engine stops it asks for."""
    stops: list[str] = []

    def ensure_engine() -> bool:
        if not answers:
            raise EngineMissing("dockerd is not installed")
        return False

    monkeypatch.setattr(run, "ensure_engine", ensure_engine)
    monkeypatch.setattr(run, "image_exists", lambda tag: base_image)
    monkeypatch.setattr(run.shutil, "which",
                        lambda name: f"/usr/sbin/{name}" if debootstrap else None)
    monkeypatch.setattr(run, "stop_engine", lambda: stops.append("stop"))
    return stops


@pytest.mark.parametrize(("base_image", "debootstrap"), [(True, False), (False, True)])
def test_container_boxes_when_the_box_image_can_be_had(
        monkeypatch: pytest.MonkeyPatch, record: Record, base_image: bool,
        debootstrap: bool) -> None:
    monkeypatch.delenv(run.MODE_ENV, raising=False)
    engine(monkeypatch, answers=True, base_image=base_image, debootstrap=debootstrap)
    layout, _ = run.choose_layout(record)
    assert layout.mode == "container"


def test_without_debootstrap_or_image_auto_runs_local_boxes_and_says_why(
        monkeypatch: pytest.MonkeyPatch, record: Record) -> None:
    monkeypatch.delenv(run.MODE_ENV, raising=False)
    engine(monkeypatch, answers=True, base_image=False, debootstrap=False)
    layout, why = run.choose_layout(record)
    assert layout.mode == "local"
    assert "apt-get install debootstrap" in why


@pytest.mark.parametrize(("answers", "command"), [(True, "apt-get install debootstrap"),
                                                  (False, "apt-get install docker.io")])
def test_forced_container_boxes_that_cannot_run_stop_at_once_with_the_command(
        monkeypatch: pytest.MonkeyPatch, record: Record, answers: bool, command: str) -> None:
    monkeypatch.setenv(run.MODE_ENV, "container")
    engine(monkeypatch, answers=answers, base_image=False, debootstrap=False)
    with pytest.raises(run.CannotStart, match=command) as refused:
        run.choose_layout(record)
    assert "LLMAO_DEMO_BOXES=local make demo" in str(refused.value)


def test_a_dockerd_started_only_to_find_no_image_is_stopped_again(
        monkeypatch: pytest.MonkeyPatch, record: Record) -> None:
    monkeypatch.delenv(run.MODE_ENV, raising=False)
    stops = engine(monkeypatch, answers=True, base_image=False, debootstrap=False)
    monkeypatch.setattr(run, "ensure_engine", lambda: True)
    monkeypatch.setattr(run, "our_pid", lambda: 4242)
    layout, _ = run.choose_layout(record)
    assert layout.mode == "local" and stops == ["stop"] and record.dockerd_pid is None


def test_a_missing_tool_stops_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMAO_LITELLM_VENV", "/nonexistent/venv-litellm")
    with pytest.raises(run.CannotStart, match="make setup"):
        run.check_common_needs()
