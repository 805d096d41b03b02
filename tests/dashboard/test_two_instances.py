"""Two ``llmao-server`` instances on one PostgreSQL, as behind a load balancer: one dashboard.

A box's fetch answered by one instance shows on the other's dashboard; an
approval given on that dashboard is served by the first. The database is a
fresh one on the session's throwaway cluster (``rig.postgres``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, expect

from rig.postgres import session_cluster
from tests.dashboard.browsing import log_in, reload_until, server_rows, stranger
from tests.dashboard.live_server import fetch_config
from tests.llmao_process import LlmaoServer
from tests.server.fleet_pair import KNOWN, UNKNOWN

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_fetch_answered_by_one_instance_shows_on_the_others_dashboard(
        live_servers: Callable[..., LlmaoServer], new_page: Callable[[], Page],
        request: pytest.FixtureRequest) -> None:
    database = session_cluster(request.config).new_database()
    first = live_servers("one", state=database)
    second = live_servers("two", state=database)
    assert fetch_config(first, KNOWN)[0] == 200
    assert fetch_config(first, UNKNOWN)[0] == 404

    page = new_page()
    log_in(page, second)
    reload_until(page, server_rows(page, KNOWN).filter(has_text="Loading"))
    expect(server_rows(page, KNOWN).filter(has_text="Loading")).to_have_count(2)
    reload_until(page, stranger(page, UNKNOWN))

    row = stranger(page, UNKNOWN)
    row.locator("select").nth(0).select_option("gemma")
    row.get_by_role("button", name="Approve").click()
    expect(page.locator(".flash.info")).to_contain_text(f"Approved {UNKNOWN}: gemma on 8001")
    status, body = fetch_config(first, UNKNOWN)
    assert status == 200
    assert [(s["name"], s["port"]) for s in json.loads(body)["servers"]] == [("gemma", 8001)]
    reload_until(page, server_rows(page, UNKNOWN).filter(has_text="Loading"))

    password = urlsplit(database).password
    assert password and password not in first.log() + second.log()
