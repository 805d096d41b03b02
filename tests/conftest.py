"""Fixtures shared by every test: where a fresh store lives (`location`, once over SQLite and
once over PostgreSQL), and the session's container engine, box image, box factories and real
vLLM.

Docker tests (`@pytest.mark.docker`) ask for `box_factory`. Without dockerd installed they skip
with the reason, except in CI (`CI=true`), which installs it: there a missing engine fails.
Real-vLLM tests (`@pytest.mark.vllm`) ask for `real_vllm`, one server shared by the session;
where `make setup-vllm` found no CPU torch wheel they skip with its reason, and in CI an
environment never set up fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rig import dockerd
from rig import real_vllm as real
from rig.box_image import ensure_box_image
from rig.boxes import Box, LocalStub, start_box, start_local_stub
from rig.fleet_files import strong_secret
from rig.postgres import session_cluster


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a fresh, empty store lives: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "state.sqlite3")
    return session_cluster(request.config).new_database()


@pytest.fixture(scope="session")
def container_engine() -> Iterator[None]:
    """A reachable container engine; stopped at the end only if this session started it."""
    try:
        started = dockerd.ensure_engine()
    except dockerd.EngineMissing as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide a container engine: {exc}")
        pytest.skip(str(exc))
    yield
    if started:
        dockerd.stop_engine()


@pytest.fixture(scope="session")
def box_image(container_engine: None) -> str:
    """The tag of the box image, built once (and cached by the engine across sessions)."""
    return ensure_box_image()


@pytest.fixture
def box_factory(box_image: str) -> Iterator[Callable[..., Box]]:
    """start_box(name, **options) that removes every box it started when the test ends."""
    boxes: list[Box] = []

    def start(name: str, **options: object) -> Box:
        box = start_box(name, image=box_image, **options)
        boxes.append(box)
        return box

    yield start
    for box in boxes:
        box.remove()


@pytest.fixture
def local_stub_factory() -> Iterator[Callable[..., LocalStub]]:
    """start_local_stub(port, **options) that stops every stub it started when the test ends."""
    stubs: list[LocalStub] = []

    def start(port: int = 0, **options: object) -> LocalStub:
        stub = start_local_stub(port, **options)
        stubs.append(stub)
        return stub

    yield start
    for stub in stubs:
        stub.stop()


def need_real_vllm() -> None:
    """Skip (or, in CI, fail) with the reason when the real vLLM cannot run here."""
    reason = real.missing()
    if reason is None:
        return
    if os.environ.get("CI") == "true" and not real.said_missing():
        pytest.fail(f"CI must run `make setup-vllm` first: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def real_vllm_installed() -> None:
    """The real vLLM's environment and model are here (else skipped, or failed in CI)."""
    need_real_vllm()


@pytest.fixture(scope="session")
def real_vllm(real_vllm_installed: None,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[real.RealVllm]:
    """One real `vllm serve` of the tiny model for the whole session (a start costs a minute
    or two): tests read it and never change it."""
    server = real.start_real_vllm(tmp_path_factory.mktemp("real-vllm"),
                                  served_name=real.SERVED_NAME,
                                  api_key=strong_secret("vllm-key-"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
