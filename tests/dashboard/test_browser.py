"""The dashboard in headless Chromium against the real ``llmao-server`` (two workers).

An operator logs in, sees a box that presented the fleet key from outside
``fleet.hosts``, approves it with two models, and the box's next fetch gets
them; forms without their CSRF token and a browser without a session are
refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, Route, expect

from ansible_collections.llmao.fleet.plugins.module_utils.http_json import JsonService
from tests.dashboard.browsing import log_in, reload_until, server_rows, stranger
from tests.dashboard.live_server import fetch_config
from tests.llmao_process import LlmaoServer
from tests.server.fleet_pair import ADMIN_TOKEN, KNOWN, UNKNOWN

pytestmark = pytest.mark.browser

SignedIn = tuple[LlmaoServer, Page]


@pytest.fixture
def signed_in(live_servers: Callable[..., LlmaoServer],
              new_page: Callable[[], Page]) -> SignedIn:
    """A fresh llmao-server, and a page logged in to its dashboard as the admin."""
    server = live_servers()
    page = new_page()
    log_in(page, server)
    return server, page

def test_an_admin_approves_a_new_box_and_its_next_fetch_gets_the_models_until_a_restart(
        signed_in: SignedIn, live_servers: Callable[..., LlmaoServer]) -> None:
    server, page = signed_in
    assert [fetch_config(server, UNKNOWN)[0] for _ in range(2)] == [404, 404]

    reload_until(page, stranger(page, UNKNOWN))
    row = stranger(page, UNKNOWN)
    expect(row.locator("td.count")).to_have_text("2")
    selects = row.locator("select")
    selects.nth(0).select_option("qwen")
    selects.nth(1).select_option("gemma")
    row.get_by_role("button", name="Approve").click()
    expect(page.locator(".flash.info")).to_contain_text(
        f"Approved {UNKNOWN}: qwen on 8001, gemma on 8002")

    status, body = fetch_config(server, UNKNOWN)
    assert status == 200
    assert [(s["name"], s["port"]) for s in json.loads(body)["servers"]] == \
        [("qwen", 8001), ("gemma", 8002)]

    loading = server_rows(page, UNKNOWN).filter(has_text="Loading")
    reload_until(page, loading)
    expect(server_rows(page, UNKNOWN)).to_have_count(2)
    expect(loading).to_have_count(2)
    expect(stranger(page, UNKNOWN)).to_have_count(0)
    assert "admin action=approve outcome=ok who='alice'" in server.log()

    # The approval lasts until the server restarts.
    server.stop()
    restarted = live_servers("restarted")
    assert fetch_config(restarted, UNKNOWN)[0] == 404


def test_the_filter_box_narrows_the_table_as_you_type(signed_in: SignedIn) -> None:
    server, page = signed_in
    rows = page.locator("tr.server")
    expect(rows).to_have_count(4)
    page.get_by_label("Filter servers").fill("qwen")
    expect(page.locator("tr.server:visible")).to_have_count(2)
    page.get_by_label("Filter servers").fill(KNOWN)
    expect(page.locator("tr.server:visible")).to_have_count(2)
    page.get_by_label("Filter servers").fill("")
    expect(page.locator("tr.server:visible")).to_have_count(4)


def test_what_was_typed_before_the_script_ran_filters_the_table(signed_in: SignedIn) -> None:
    """On a slow page the operator types before the script runs: it filters when it starts."""
    server, page = signed_in
    held: list[Route] = []
    page.route("**/dashboard.js", lambda route: held.append(route))
    page.reload(wait_until="commit")
    page.get_by_label("Filter servers").fill("qwen")
    expect(page.locator("tr.server")).to_have_count(4)
    expect(page.locator("tr.server:visible")).to_have_count(4)  # no script yet
    while not held:
        page.wait_for_timeout(50)
    held[0].continue_()
    expect(page.locator("tr.server:visible")).to_have_count(2)


def test_a_form_posted_without_its_csrf_token_is_refused(signed_in: SignedIn) -> None:
    server, page = signed_in
    fetch_config(server, UNKNOWN)
    reload_until(page, stranger(page, UNKNOWN))
    row = stranger(page, UNKNOWN)
    row.locator('input[name="csrf_token"]').evaluate("field => field.remove()")
    row.locator("select").nth(0).select_option("gemma")
    with page.expect_response(f"{server.url}/fleet/approve") as answer:
        row.get_by_role("button", name="Approve").click()
    assert answer.value.status == 403
    expect(page.locator("main")).to_contain_text("CSRF token is missing")
    assert fetch_config(server, UNKNOWN)[0] == 404


def test_logged_out_the_page_and_every_action_are_refused(
        signed_in: SignedIn, new_page: Callable[[], Page]) -> None:
    server, page = signed_in
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(f"{server.url}/login")
    page.goto(f"{server.url}/fleet")
    expect(page).to_have_url(f"{server.url}/login")

    stranger_page = new_page()  # a browser that never logged in
    stranger_page.goto(f"{server.url}/fleet")
    expect(stranger_page).to_have_url(f"{server.url}/login")
    for current in (page, stranger_page):
        for path, form in (("/fleet/approve", {"box": UNKNOWN, "model": "gemma"}),
                           ("/logout", {})):
            answer = current.request.post(f"{server.url}{path}", form=form)
            assert answer.status == 403, path
    assert fetch_config(server, UNKNOWN)[0] == 404


def test_a_failed_turn_shows_the_rollout_panel_and_the_paused_item(signed_in: SignedIn) -> None:
    """The push path's ask (``/admin/api/turns/take``) and reconcile's move to failed, through
    the admin API; the page shows the model paused, with the box and why."""
    server, page = signed_in
    admin = JsonService(server.url, ADMIN_TOKEN)
    revision = json.loads(fetch_config(server, KNOWN)[1])["revision"]
    taken = admin.call("POST", "/admin/api/turns/take",
                       {"box": KNOWN, "revision": revision, "servers": ["qwen"]})
    assert taken["phase"] == "draining"
    admin.call("POST", "/admin/api/turns", {"updates": [
        {"box": KNOWN, "revision": revision, "phase": "failed",
         "why": f"llmao:{KNOWN}:8002:qwen is Stalled: not answering"}]})
    page.reload()
    row = page.locator('table.rollout tr[data-model="qwen"]')
    expect(row).to_contain_text(f"{KNOWN} llmao:{KNOWN}:8002:qwen is Stalled: not answering")
    expect(page.locator("article.problem.paused")).to_contain_text(
        f"box {KNOWN}, rev {revision[:8]}: llmao:{KNOWN}:8002:qwen is Stalled")


def test_an_empty_paused_cell_is_not_red_and_the_page_asks_for_nothing_missing(
        live_servers: Callable[..., LlmaoServer], new_page: Callable[[], Page]) -> None:
    """A draining turn: the model's row has no pause, so its Paused cell is a quiet dash
    (red only once the turn fails); no request of the page (its icon too) answers 404."""
    server, page = live_servers(), new_page()
    missing: list[str] = []
    page.on("response", lambda answer: missing.append(answer.url) if answer.status == 404
            else None)
    log_in(page, server)
    admin = JsonService(server.url, ADMIN_TOKEN)
    revision = json.loads(fetch_config(server, KNOWN)[1])["revision"]
    admin.call("POST", "/admin/api/turns/take",
               {"box": KNOWN, "revision": revision, "servers": ["qwen"]})
    page.reload()
    cell = page.locator('table.rollout tr[data-model="qwen"] td.why')
    expect(cell).to_have_text("—")
    bad = page.evaluate("getComputedStyle(document.documentElement)"
                        ".getPropertyValue('--bad').trim()")
    quiet = cell.evaluate("cell => getComputedStyle(cell).color")
    admin.call("POST", "/admin/api/turns", {"updates": [
        {"box": KNOWN, "revision": revision, "phase": "failed", "why": "qwen is Stalled"}]})
    page.reload()
    red = cell.evaluate("cell => getComputedStyle(cell).color")
    assert red != quiet
    assert red == page.evaluate(f"(() => {{ const probe = document.createElement('i');"
                                f" probe.style.color = '{bad}'; document.body.append(probe);"
                                f" return getComputedStyle(probe).color; }})()")
    page.wait_for_load_state("networkidle")
    assert missing == []
