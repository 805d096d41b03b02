"""A screenshot of the dashboard over a mixed fleet, taken in headless Chromium.

Healthy, Loading, Stalled, Rejected and Unlisted servers, a box not in
``fleet.hosts``, revision drift and a LiteLLM route no server matches: the page
must show each, and the picture is kept for a person to judge. With
``LLMAO_SCREENSHOT_TO`` set to a path, the picture is also written there (how
``docs/dashboard.png`` is made).
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from llmao_server.store import open_store
from tests.dashboard import mixed_fleet
from tests.dashboard.browsing import log_in
from tests.llmao_process import LlmaoServer
from tests.server.fleet_pair import UNKNOWN, write_pair

pytestmark = pytest.mark.browser


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def test_a_mixed_fleet_is_readable_at_a_glance(live_servers: Callable[..., LlmaoServer],
                                               new_page: Callable[[], Page],
                                               tmp_path: Path) -> None:
    document = mixed_fleet.config_document()
    state = str(tmp_path / "mixed.sqlite3")
    server = live_servers("mixed", document, state)
    fleet = load_fleet(*write_pair(tmp_path / "mixed-copy", document))
    store = open_store(state)
    mixed_fleet.seed(store, fleet, time.time())
    store.close()

    page = new_page()
    log_in(page, server, name="alice")
    counts = page.locator("nav.counts")
    for state_name in ("Healthy", "Loading", "Stalled", "Rejected", "Unlisted"):
        expect(counts).to_contain_text(state_name)
    strip = page.locator("section.attention")
    for title in ("Fleet key from a box not in fleet.hosts", "Stalled", "Rejected",
                  "Unlisted", "Revision drift", "LiteLLM routes matching no intended server"):
        expect(strip.locator("h3", has_text=title)).to_have_count(1)
    expect(page.locator(f'tr.stranger[data-box="{UNKNOWN}"] td.count')).to_have_text("3")
    groups = page.locator("tr.group th")
    expect(groups).to_have_count(3)
    expect(groups.nth(0)).to_contain_text("runpod")
    expect(groups.nth(2)).to_contain_text("vast")
    expect(page.locator('tr.server[data-box="203.0.113.10"] td.port').first).to_have_text(
        "8001 → 40001")

    picture = tmp_path / "dashboard.png"
    page.screenshot(path=str(picture), full_page=True)
    width, height = png_size(picture)
    assert width == 1440 and height >= 900
    target = os.environ.get("LLMAO_SCREENSHOT_TO")
    if target:
        shutil.copyfile(picture, target)
