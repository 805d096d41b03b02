"""A screenshot of the dashboard over a mixed fleet, taken in headless Chromium.

Healthy, Loading, Stalled, Rejected and Unlisted servers, a box not in
``fleet.hosts``, revision drift and a LiteLLM route no server matches, an
oversized server and a saturated model with six hours of load: the page must
show each (the charts drawn in the browser, nothing blocked by the page's
policy), and the picture is kept for a person to judge. With
``LLMAO_SCREENSHOT_TO`` set to a path, the picture is also written there (how
``docs/dashboard.png`` is made).
"""

from __future__ import annotations

import os
import re
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
    now = time.time()
    mixed_fleet.seed(store, fleet, now)
    mixed_fleet.seed_load(store, now)
    store.close()

    page = new_page()
    refused: list[str] = []  # what the page's Content-Security-Policy blocked, if anything
    page.on("console", lambda message: refused.append(message.text)
            if "Content Security Policy" in message.text else None)
    log_in(page, server, name="alice")
    counts = page.locator("nav.counts")
    for state_name in ("Healthy", "Loading", "Stalled", "Rejected", "Unlisted"):
        expect(counts).to_contain_text(state_name)
    strip = page.locator("section.attention")
    for title in ("Fleet key from a box not in fleet.hosts", "Stalled", "Rejected",
                  "Unlisted", "Revision drift", "LiteLLM routes matching no intended server",
                  "Oversized", "Saturated models"):
        expect(strip.locator("h3", has_text=title)).to_have_count(1)
    expect(strip.locator("article.problem.oversized li")).to_contain_text(
        "203.0.113.10 gemma :8001")
    expect(strip.locator("article.problem.saturated li")).to_have_text(re.compile(r"^qwen "))
    qwen = page.locator('article.model[data-model="qwen"]')
    expect(qwen.locator("h3")).to_contain_text("saturated")
    expect(qwen.locator("svg.chart polyline.requests_waiting")).not_to_have_count(0)
    expect(qwen.locator("svg.chart polyline.kv_cache_usage_ratio")).not_to_have_count(0)
    chart_box = qwen.locator("svg.chart").first.bounding_box()
    assert chart_box and chart_box["width"] > 300 and chart_box["height"] > 60
    expect(page.locator('article.model[data-model="gemma"] dd.per-million')).to_have_text(
        re.compile(r"^\d+\.\d\d$"))
    expect(page.locator(f'tr.stranger[data-box="{UNKNOWN}"] td.count')).to_have_text("3")
    groups = page.locator("tr.group th")
    expect(groups).to_have_count(3)
    expect(groups.nth(0)).to_contain_text("runpod")
    expect(groups.nth(2)).to_contain_text("vast")
    expect(page.locator('tr.server[data-box="203.0.113.10"] td.port').first).to_have_text(
        "8001 → 40001")

    picture = tmp_path / "dashboard.png"
    page.screenshot(path=str(picture), full_page=True)
    assert refused == []
    width, height = png_size(picture)
    assert width == 1440 and height >= 900
    target = os.environ.get("LLMAO_SCREENSHOT_TO")
    if target:
        shutil.copyfile(picture, target)
