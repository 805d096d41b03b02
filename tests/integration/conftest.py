"""LiteLLM fixtures: at most one proxy of each kind per session, and its master key.

- `litellm_proxy` is parametrized over the contract fake and LiteLLM's real proxy app; the
  "real" case carries the `litellm` marker.
- `fake_litellm` and `real_litellm` give one kind; a test using `real_litellm` marks itself
  `@pytest.mark.litellm`.

All of them share the same processes, started on first use and stopped (by PID) when the
session ends, so the real proxy's start-up (12-25 s) is paid once; a proxy found dead is
started again, with a warning that names its exit status and log. Tests that share them
delete what they register. Without the LiteLLM venv the real kind fails (it never skips, so
CI cannot go green without it) with a message that says to run `make setup`;
`-m "not litellm"` leaves those tests out on purpose.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import pytest

from rig.fleet_files import strong_secret
from rig.litellm_process import Kind, LiteLLMMissing, LiteLLMProcess, start_litellm


@pytest.fixture(scope="session")
def litellm_master_key() -> str:
    """A fresh master key per session, so no test can depend on a known value."""
    return strong_secret("sk-llmao-test-")


@pytest.fixture(scope="session")
def litellm_of_kind(
    litellm_master_key: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[Kind], LiteLLMProcess]]:
    """kind -> the session's running proxy of that kind, started the first time it is asked for."""
    running: dict[str, LiteLLMProcess] = {}

    def get(kind: Kind) -> LiteLLMProcess:
        died = running.get(kind)
        if died is not None and died.process.poll() is not None:
            # One crash of the proxy fails the test it happened in, not every one after it.
            warnings.warn(f"the {kind} LiteLLM proxy had exited ({died.process.returncode}; "
                          f"its log: {died.log_path}): started again", stacklevel=2)
            del running[kind]
        if kind not in running:
            try:
                running[kind] = start_litellm(
                    kind,
                    master_key=litellm_master_key,
                    log_dir=tmp_path_factory.mktemp(f"litellm-{kind}"),
                )
            except LiteLLMMissing as exc:
                pytest.fail(f"{exc} (or deselect these tests with -m 'not litellm')")
        return running[kind]

    yield get
    for proxy in running.values():
        proxy.stop()


@pytest.fixture(
    scope="session",
    params=[pytest.param("fake"), pytest.param("real", marks=pytest.mark.litellm)],
)
def litellm_proxy(
    request: pytest.FixtureRequest, litellm_of_kind: Callable[[Kind], LiteLLMProcess]
) -> LiteLLMProcess:
    """Each kind in turn: tests using it run once against the fake and once against LiteLLM."""
    return litellm_of_kind(request.param)


@pytest.fixture(scope="session")
def fake_litellm(litellm_of_kind: Callable[[Kind], LiteLLMProcess]) -> LiteLLMProcess:
    return litellm_of_kind("fake")


@pytest.fixture
def real_litellm(litellm_of_kind: Callable[[Kind], LiteLLMProcess]) -> LiteLLMProcess:
    """Asked for by each test, so that one whose proxy died gets a live one."""
    return litellm_of_kind("real")
