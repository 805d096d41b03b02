"""LiteLLM fixtures: one proxy of each kind per session, and its master key.

`litellm_proxy` is parametrized over the contract fake and LiteLLM's real proxy
app; the "real" case carries the `litellm` marker. Without the LiteLLM venv the
real case fails (it never skips, so CI cannot go green without it) with a message
that says to run `make setup`; `-m "not litellm"` leaves it out on purpose.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from rig.litellm_process import LiteLLMMissing, LiteLLMProcess, start_litellm


@pytest.fixture(scope="session")
def litellm_master_key() -> str:
    """A fresh master key per session, so no test can depend on a known value."""
    return "sk-llmao-test-" + secrets.token_urlsafe(24)


@pytest.fixture(
    scope="session",
    params=[pytest.param("fake"), pytest.param("real", marks=pytest.mark.litellm)],
)
def litellm_proxy(
    request: pytest.FixtureRequest,
    litellm_master_key: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiteLLMProcess]:
    """A running proxy of the parametrized kind, started once per session, stopped by PID."""
    kind = request.param
    try:
        proxy = start_litellm(
            kind,
            master_key=litellm_master_key,
            log_dir=tmp_path_factory.mktemp(f"litellm-{kind}"),
        )
    except LiteLLMMissing as exc:
        pytest.fail(f"{exc} (or deselect these tests with -m 'not litellm')")
    with proxy:
        yield proxy
