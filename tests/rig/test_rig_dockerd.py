"""Engine ownership rules: use an engine that answers, never stop one the rig did not start."""

from __future__ import annotations

import os

import pytest

from rig import dockerd


@pytest.fixture
def no_dockerd(monkeypatch, tmp_path):
    monkeypatch.setattr(dockerd, "DOCKERD", tmp_path / "no-such-dockerd")


def test_engine_that_answers_is_used_and_not_ours(monkeypatch, no_dockerd):
    monkeypatch.setattr(dockerd, "engine_answers", lambda: True)
    assert dockerd.ensure_engine() is False


def test_missing_dockerd_says_how_to_install_it(monkeypatch, no_dockerd):
    monkeypatch.setattr(dockerd, "engine_answers", lambda: False)
    with pytest.raises(dockerd.EngineMissing, match="apt-get install docker.io"):
        dockerd.ensure_engine()


@pytest.mark.parametrize("content", [str(os.getpid()), "not a pid", None])
def test_pidfile_naming_no_dockerd_is_never_stopped(monkeypatch, tmp_path, content):
    # A stale pidfile whose PID now belongs to another process (here: this test) must not be
    # signalled.
    pidfile = tmp_path / "dockerd.pid"
    if content is not None:
        pidfile.write_text(content)
    monkeypatch.setattr(dockerd, "pidfile", lambda: pidfile)
    assert dockerd.our_pid() is None
    assert dockerd.stop_engine() is False
