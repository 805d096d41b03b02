"""Every tag of a box on the server table (binding, TLS days, cards) is shown whole at 1,280 px
and wider, in headless Chromium with the dashboard's own template and stylesheet.

The page is the real /fleet answer (Flask's test client) over a fleet under box TLS whose
first box has a confirmed binding, a certificate served and two kinds of cards (what the
store would hold is handed to the view directly); its stylesheet is put inline, so the
browser lays out exactly what llmao serves. An operator once saw "TLS 7.0 d" and the GPU
line cut to "…" at 1,400 and 1,920 px, with nothing on hover.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from playwright.sync_api import Page

from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id
from llmao_server.store import AppliedCard, AppliedReport, BoxBinding
from llmao_server.web import views
from llmao_server.web.fleet_view import Observed
from tests.dashboard.sessions import log_in
from tests.server.fleet_pair import CONFIG, KNOWN, OTHER_KNOWN
from tests.tls_files import make_test_ca

pytestmark = pytest.mark.browser

CSS = Path(views.__file__).parent / "static" / "dashboard.css"
WIDTHS = (1280, 1400, 1920)
DAY = 86400.0
# Each box cell's tags, measured in the page: a tag cut by its cell or by its own box.
CLIPPED = """() => [...document.querySelectorAll('table.servers td.box')].flatMap(cell => {
  const edge = cell.getBoundingClientRect();
  return [...cell.querySelectorAll('.tag, .cards, .box-name')].filter(tag => {
    const r = tag.getBoundingClientRect();
    return r.left < edge.left - 0.5 || r.right > edge.right + 0.5
      || tag.scrollWidth > tag.clientWidth + 1 && getComputedStyle(tag).overflow !== 'visible'
      || getComputedStyle(tag).textOverflow === 'ellipsis' && tag.scrollWidth > tag.clientWidth;
  }).map(tag => tag.textContent);
})"""


def observed(now: float) -> Observed:
    verdicts = {}
    for box, port, name in ((KNOWN, 8001, "gemma"), (KNOWN, 8002, "qwen"),
                            (OTHER_KNOWN, 8001, "qwen")):
        key = deployment_id(box, port, name)
        verdicts[key] = {"id": key, "box": box, "state": "Healthy", "reason": "serving",
                         "in_litellm": True, "public": f"{box}:{port}",
                         "cert_not_after": now + 7 * DAY}
    cards = (AppliedCard(0, "NVIDIA GeForce RTX 4090", 24564),
             AppliedCard(1, "NVIDIA H100 80GB HBM3", 81559))
    report = AppliedReport(KNOWN, "r", "2026-01-01T00:00:00Z", (), now, cards,
                           (("gemma", (0,)), ("qwen", (1,))))
    binding = BoxBinding(KNOWN, "0" * 64, True, now - 3600, "198.51.100.7", "vast-12345678", 1)
    return Observed(verdicts=verdicts, pass_at=now, cards={KNOWN: report},
                    bindings={KNOWN: binding})


@pytest.fixture
def page_html(make_app: Callable[..., Flask], tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> str:
    ca = make_test_ca(tmp_path / "ca")
    document = copy.deepcopy(CONFIG)
    document["box_tls"] = {"ca_cert": str(ca.cert), "ca_key": str(ca.key), "leaf_days": 7}
    app = make_app(document)
    monkeypatch.setattr(views, "observe", lambda store, now, span_s: observed(now))
    client = app.test_client()
    assert log_in(client).status_code == 302
    html = client.get("/fleet").get_data(as_text=True)
    link = '<link rel="stylesheet" href="/static/dashboard/dashboard.css">'
    assert link in html or 'dashboard.css">' in html
    head, tail = html.split("<link rel=\"stylesheet\"", 1)
    return f"{head}<style>{CSS.read_text()}</style>{tail.split('>', 1)[1]}"


@pytest.mark.parametrize("width", WIDTHS)
def test_every_tag_of_a_box_is_shown_whole(page_html: str, new_page: Callable[[], Page],
                                           width: int) -> None:
    page = new_page()
    page.set_viewport_size({"width": width, "height": 900})
    page.set_content(page_html)
    cell = page.locator(f'tr.server[data-box="{KNOWN}"] td.box').first
    for shown in ("confirmed", "TLS 7.0 d", "NVIDIA H100", "NVIDIA GeForce RTX 4090"):
        assert shown in cell.inner_text(), cell.inner_text()
    assert page.evaluate(CLIPPED) == []
