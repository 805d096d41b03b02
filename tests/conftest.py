"""Session fixtures shared by every test: the container engine, the box image, box factories.

Docker tests (`@pytest.mark.docker`) ask for `box_factory`. Without dockerd installed they skip
with the reason, except in CI (`CI=true`), which installs it: there a missing engine fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from rig import dockerd
from rig.box_image import ensure_box_image
from rig.boxes import Box, LocalStub, start_box, start_local_stub


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
