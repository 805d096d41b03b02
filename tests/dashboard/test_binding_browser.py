"""Releasing a box's binding from the dashboard in headless Chromium, against the real
``llmao-server`` (two workers): the button asks first, and only a yes releases it."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from playwright.sync_api import Dialog, Page, expect

from tests.dashboard.browsing import log_in, reload_until, server_rows
from tests.llmao_process import LlmaoServer
from tests.server.fleet_pair import KNOWN, box_headers

pytestmark = pytest.mark.browser

TOKEN_HEADER = "X-LLMAO-Box-Token"


def fetch(server: LlmaoServer, token: str | None = None) -> tuple[int, str | None]:
    headers = box_headers(host=KNOWN)
    if token:
        headers[TOKEN_HEADER] = token
    request = urllib.request.Request(f"{server.url}/vllm/config", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers.get(TOKEN_HEADER)
    except urllib.error.HTTPError as refused:
        return refused.code, None


def test_the_release_button_asks_and_then_frees_the_name(
        live_servers: Callable[..., LlmaoServer], new_page: Callable[[], Page]) -> None:
    server = live_servers()
    _, token = fetch(server)
    assert fetch(server, token)[0] == 200
    assert fetch(server)[0] == 403
    page = new_page()
    log_in(page, server)
    confirmed = server_rows(page, KNOWN).locator(".tag.binding.confirmed")
    reload_until(page, confirmed)
    release = server_rows(page, KNOWN).first.get_by_role("button", name="Release")

    asked: list[str] = []

    def say_no(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", say_no)
    release.click()
    expect(confirmed.first).to_be_visible()
    assert asked and KNOWN in asked[0]
    assert fetch(server)[0] == 403

    page.once("dialog", lambda dialog: dialog.accept())
    release.click()
    expect(page.locator(".flash.info")).to_contain_text(f"Released the binding of {KNOWN}")
    assert fetch(server)[0] == 200
    assert "box_binding outcome=released who='alice'" in server.log()
    assert token not in server.log()


def test_the_enroll_button_shows_a_token_once_that_binds_the_box(
        live_servers: Callable[..., LlmaoServer], new_page: Callable[[], Page]) -> None:
    server = live_servers()
    page = new_page()
    log_in(page, server)
    row = server_rows(page, KNOWN).first
    row.get_by_label(f"bootstrap token lifetime for {KNOWN}").select_option("15m")
    row.get_by_role("button", name="Enroll").click()
    expect(page.locator("h1")).to_contain_text(f"Bootstrap token for {KNOWN}")
    token = page.locator("#bootstrap-token").input_value()
    assert len(token) >= 32 and token not in page.url
    page.goto(f"{server.url}/fleet")
    assert token not in page.content()
    headers = {**box_headers(host=KNOWN), "X-LLMAO-Bootstrap-Token": token}
    request = urllib.request.Request(f"{server.url}/vllm/config", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200 and answer.headers.get(TOKEN_HEADER)
    assert "box_enroll outcome=issued who='alice'" in server.log()
    assert token not in server.log()
