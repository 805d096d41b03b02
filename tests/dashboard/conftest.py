"""Fixtures of the dashboard's tests.

Flask's test client over an app per test; for the browser tests, Debian's
Chromium driven by Playwright and real ``llmao-server`` processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from tests.dashboard.live_server import start_server
from tests.llmao_process import LlmaoServer
from tests.server.conftest import app, client, make_app  # noqa: F401 - shared fixtures
from tests.server.fleet_pair import SECRETS

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    """Debian's Chromium under Playwright (never a downloaded browser), one per session.

    Without it the browser tests skip, except in CI (``CI=true``), which installs it.
    """
    if not os.access(CHROMIUM, os.X_OK):
        message = f"{CHROMIUM} is not installed (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def new_page(chromium: Browser) -> Iterator[Callable[[], Page]]:
    """new_page(): a page in a fresh browser context (its own cookies), closed at the end."""
    contexts: list[BrowserContext] = []

    def make() -> Page:
        context = chromium.new_context(viewport={"width": 1440, "height": 900})
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def live_servers(tmp_path: Path) -> Iterator[Callable[..., LlmaoServer]]:
    """live_servers(name, config_document=None, state=None): real llmao-server processes,
    stopped at the end; their logs must hold no secret."""
    started: list[LlmaoServer] = []

    def start(name: str = "llmao", config_document: dict[str, Any] | None = None,
              state: str | None = None) -> LlmaoServer:
        server = start_server(tmp_path, name, config_document,
                              state or str(tmp_path / "state.sqlite3"))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
    for server in started:
        log = server.log()
        assert not [secret for secret in SECRETS if secret in log], "a secret reached the log"
        assert "sk-vllm-" not in log
