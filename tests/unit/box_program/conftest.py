"""Fixtures for the box program's tests (helpers.py says what each double stands for)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from rig.tls import ServerTls, make_server_tls

from .follow_llmao import ContractLlmao
from .helpers import BOX, FLEET_KEY, Box, FakeLlmao, load_install_set


@pytest.fixture(scope="session")
def install_set() -> ModuleType:
    return load_install_set()


@pytest.fixture(scope="session")
def local_ca(tmp_path_factory: pytest.TempPathFactory) -> ServerTls:
    return make_server_tls(tmp_path_factory.mktemp("ca"), ["127.0.0.1", "localhost"])


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Box:
    """A fresh box; the process environment is the box's, with nothing of ours inherited."""
    the_box = Box(tmp_path)
    for name in ("LLMAO_URL", "FLEET_KEY", "LLMAO_HOST", "VLLM_BIN", "SSL_CERT_FILE",
                 "SSL_CERT_DIR", "LLMAO_TOKEN_FILE", "CONTAINER_ID", "RUNPOD_POD_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in the_box.env().items():
        monkeypatch.setenv(name, value)
    return the_box


def point_box_at(fake: FakeLlmao, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMAO_URL", fake.url)
    monkeypatch.setenv("FLEET_KEY", FLEET_KEY)
    monkeypatch.setenv("LLMAO_HOST", BOX)


@pytest.fixture
def llmao(box: Box, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLlmao]:
    """llmao over plain HTTP on loopback, with the box's env pointing at it."""
    with FakeLlmao().serve() as fake:
        point_box_at(fake, monkeypatch)
        yield fake


@pytest.fixture
def llmao_tls(box: Box, local_ca: ServerTls,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLlmao]:
    """llmao over HTTPS with a certificate from the test CA (not trusted unless told)."""
    with FakeLlmao(tls=local_ca.server_context()).serve() as fake:
        point_box_at(fake, monkeypatch)
        yield fake


@pytest.fixture
def contract(box: Box, monkeypatch: pytest.MonkeyPatch) -> Iterator[ContractLlmao]:
    """llmao speaking the rollout contract (follow_llmao.py), with the box's env pointing at it."""
    with ContractLlmao().serve() as fake:
        point_box_at(fake, monkeypatch)
        yield fake


@dataclass
class Outcome:
    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err

    def json(self) -> dict:
        return json.loads(self.out)


@pytest.fixture
def run_main(install_set: ModuleType, capsys: pytest.CaptureFixture[str]):
    """Run the program in-process (main(argv)) and capture what it printed."""

    def run(*argv: str) -> Outcome:
        rc = install_set.main(list(argv))
        captured = capsys.readouterr()
        return Outcome(rc, captured.out, captured.err)

    return run
