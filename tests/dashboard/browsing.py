"""Driving the dashboard in the browser: logging in, waiting for the shared state, finding rows."""

from __future__ import annotations

import time

from playwright.sync_api import Locator, Page, expect

from tests.llmao_process import LlmaoServer
from tests.server.fleet_pair import ADMIN_TOKEN

RECORDED_WITHIN_S = 5.0


def log_in(page: Page, server: LlmaoServer, name: str = "alice") -> None:
    page.goto(f"{server.url}/fleet")
    expect(page).to_have_url(f"{server.url}/login")
    page.get_by_label("Your name").fill(name)
    page.get_by_label("Admin token").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{server.url}/fleet")


def reload_until(page: Page, locator: Locator, seconds: float = RECORDED_WITHIN_S) -> None:
    """Reload until ``locator`` shows: fetches reach the shared store within about a second."""
    deadline = time.monotonic() + seconds
    while locator.count() == 0 and time.monotonic() < deadline:
        time.sleep(0.25)
        page.reload()
    expect(locator.first).to_be_visible()


def stranger(page: Page, box: str) -> Locator:
    return page.locator(f'tr.stranger[data-box="{box}"]')


def server_rows(page: Page, box: str) -> Locator:
    return page.locator(f'tr.server[data-box="{box}"]')
