"""The fleet page through Flask's test client, and approving a box from its strip."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Phase, Turn
from llmao_server.state import app_state
from llmao_server.store import AppliedCard, AppliedReport, UnknownBox
from tests.dashboard.sessions import approve, csrf_token, flashes, log_in
from tests.server.fleet_pair import (
    KNOWN,
    LEGACY,
    OTHER_KNOWN,
    SECRETS,
    UNKNOWN,
    box_headers,
    config,
)


@pytest.fixture
def admin(client: FlaskClient) -> FlaskClient:
    assert log_in(client).status_code == 302
    return client


def page_of(client: FlaskClient, path: str = "/fleet") -> str:
    answer = client.get(path)
    assert answer.status_code == 200
    return answer.get_data(as_text=True)


def server_rows(html: str) -> list[str]:
    return re.findall(r'<tr class="server".*?</tr>', html, flags=re.S)


def stranger_rows(html: str) -> list[str]:
    return re.findall(r'<tr class="stranger".*?</tr>', html, flags=re.S)


def fetch(client: FlaskClient, host: str) -> tuple[int, dict]:
    answer = client.get("/vllm/config", headers=box_headers(host=host))
    return answer.status_code, answer.get_json()


def settle(app: Flask) -> None:
    """Write the recorder's buffered fetches now (the server does it twice a second)."""
    app_state(app).recorder.flush()


def test_one_row_per_intended_server_awaiting_a_first_pass(admin: FlaskClient) -> None:
    html = page_of(admin)
    rows = server_rows(html)
    assert len(rows) == 4  # KNOWN: 2, OTHER_KNOWN: 1, LEGACY: 1
    for row in rows:
        assert "Awaiting" in row
        assert "no reconcile pass yet" in row
        assert 'class="age stale"' in row and ">never<" in row
    assert "local" in html  # no provider configured: a local fleet, public equals listen
    assert "8001 → 8001" in html
    assert "last reconcile pass: no reconcile pass yet" in re.sub(r"\s+", " ", html)


def test_a_fetch_shows_as_a_fresh_age_and_loading(app: Flask, admin: FlaskClient) -> None:
    assert fetch(admin, KNOWN)[0] == 200
    settle(app)
    rows = [row for row in server_rows(page_of(admin)) if f'data-box="{KNOWN}"' in row]
    assert len(rows) == 2
    for row in rows:
        assert 'class="age fresh"' in row and " s ago<" in row
        assert "Loading" in row


@pytest.mark.parametrize(("hours", "tone"), [(0.5, "fresh"), (3, "aging"), (30, "stale")])
def test_the_age_of_the_last_fetch_is_coloured(app: Flask, admin: FlaskClient, hours: float,
                                               tone: str) -> None:
    app_state(app).store.note_fetches({OTHER_KNOWN: time.time() - hours * 3600})
    (row,) = [row for row in server_rows(page_of(admin)) if f'data-box="{OTHER_KNOWN}"' in row]
    assert f'class="age {tone}"' in row


def test_an_applied_revision_behind_the_intended_one_is_drift(app: Flask,
                                                             admin: FlaskClient) -> None:
    state = app_state(app)
    intended = state.fleet.assignment(KNOWN).revision
    state.store.record_applied(AppliedReport(KNOWN, "0123456789abcdef", "2026-01-01T00:00:00Z",
                                             (), time.time()))
    state.store.record_applied(AppliedReport(OTHER_KNOWN,
                                             state.fleet.assignment(OTHER_KNOWN).revision,
                                             "2026-01-01T00:00:00Z", (), time.time()))
    html = page_of(admin)
    assert "Revision drift" in html
    assert f"applied rev 01234567, intended rev {intended[:8]}" in html
    (other,) = [row for row in server_rows(html) if f'data-box="{OTHER_KNOWN}"' in row]
    assert "✓ " + state.fleet.assignment(OTHER_KNOWN).revision[:8] in other


def test_the_cards_a_box_reported_show_on_its_rows(app: Flask, admin: FlaskClient) -> None:
    cards = (AppliedCard(0, "NVIDIA A100-SXM4-80GB", 81920),
             AppliedCard(1, "NVIDIA A100-SXM4-80GB", 81920))
    app_state(app).store.record_applied(AppliedReport(
        KNOWN, "0123456789abcdef", "2026-01-01T00:00:00Z", (), time.time(), cards,
        (("gemma", (0,)), ("qwen", (1,)))))
    rows = {re.search(r'data-box="([^"]*)".*?</td>\s*<td>([^<]*)</td>', row, re.S).groups():
            row for row in server_rows(page_of(admin))}
    assert "GPU 1 of 2 × NVIDIA A100-SXM4-80GB (80.0 GiB)" in rows[KNOWN, "qwen"]
    assert "GPU 0 of 2 × NVIDIA A100-SXM4-80GB" in rows[KNOWN, "gemma"]
    assert "GPU" not in rows[OTHER_KNOWN, "qwen"]


def test_a_box_not_in_fleet_hosts_shows_in_the_strip_with_its_count(app: Flask,
                                                                     admin: FlaskClient) -> None:
    for _ in range(3):
        assert fetch(admin, UNKNOWN)[0] == 404
    settle(app)
    html = page_of(admin)
    assert "Fleet key from a box not in fleet.hosts" in html
    (row,) = stranger_rows(html)
    assert f'data-box="{UNKNOWN}"' in row
    assert '<td class="num count">3</td>' in row
    # The form offers self-hosted models only, in three port-ordered picks.
    assert row.count('<select name="model"') == 3
    assert 'value="gemma"' in row and 'value="qwen"' in row and 'value="gpt"' not in row


def test_approving_serves_the_picked_models_in_order_and_lists_the_box_as_loading(
        app: Flask, admin: FlaskClient) -> None:
    fetch(admin, UNKNOWN)
    settle(app)
    answer = approve(admin, UNKNOWN, "qwen", "gemma")
    assert answer.status_code == 302
    assert flashes(admin) == [f"Approved {UNKNOWN}: qwen on 8001, gemma on 8002. Its next "
                              "config fetch gets them, until the server restarts."]
    status, body = fetch(admin, UNKNOWN)
    assert status == 200
    assert [(s["name"], s["port"]) for s in body["servers"]] == [("qwen", 8001), ("gemma", 8002)]
    settle(app)
    html = page_of(admin)
    assert stranger_rows(html) == []  # decided: it left the strip
    rows = [row for row in server_rows(html) if f'data-box="{UNKNOWN}"' in row]
    assert len(rows) == 2
    for row in rows:
        assert "Loading" in row and ">approved<" in row and 'class="age fresh"' in row
    assert "Approved boxes" in html
    assert f"&#34;{UNKNOWN}&#34;: [[qwen, 8001], [gemma, 8002]]" in html


@pytest.mark.parametrize(("models", "reason"), [
    ((), "pick at least one model"),
    (("llama",), "'llama' is not in models.yaml"),
    (("gpt",), "'gpt' is a commercial route, not a self-hosted model"),
    (("gemma", "qwen", "gemma"), "each model can be picked once"),
])
def test_a_refused_approval_says_why_and_serves_nothing(admin: FlaskClient,
                                                        models: tuple[str, ...],
                                                        reason: str) -> None:
    assert approve(admin, UNKNOWN, *models).status_code == 302
    assert flashes(admin) == [f"Not approved: {reason}."]
    assert fetch(admin, UNKNOWN)[0] == 404


def test_more_than_three_models_are_refused(admin: FlaskClient) -> None:
    """The form has three picks; a crafted post with four is refused by the core's rule."""
    answer = admin.post("/fleet/approve", data={
        "csrf_token": csrf_token(admin, "/fleet"), "box": UNKNOWN,
        "model": ["gemma", "qwen", "gemma", "qwen"]})
    assert answer.status_code == 302
    assert flashes(admin) == ["Not approved: a box runs at most 3 models, 4 were picked."]
    assert fetch(admin, UNKNOWN)[0] == 404


@pytest.mark.parametrize("box", [KNOWN, f"  ::ffff:{KNOWN} "])
def test_a_box_in_fleet_hosts_cannot_be_approved(admin: FlaskClient, box: str) -> None:
    approve(admin, box, "gemma")
    assert flashes(admin) == [f"Not approved: {KNOWN} is already in fleet.hosts; its rows "
                              "decide what it runs."]
    assert [s["name"] for s in fetch(admin, KNOWN)[1]["servers"]] == ["gemma", "qwen"]


def test_an_overlong_box_name_is_refused(admin: FlaskClient) -> None:
    approve(admin, "x" * 300, "gemma")
    assert flashes(admin) == ["Not approved: a box name has at most 253 characters."]


def test_an_approval_ends_when_the_box_joins_fleet_hosts(make_app: Callable[..., Flask]) -> None:
    """A server started with the box in fleet.hosts serves its rows, not the approval."""
    before = make_app().test_client()
    log_in(before)
    approve(before, UNKNOWN, "qwen")
    assert fetch(before, UNKNOWN)[1]["servers"][0]["name"] == "qwen"
    hosts = {**config()["fleet"]["hosts"], UNKNOWN: [["gemma", 8001]]}
    after = make_app(config(hosts=hosts), folder="joined").test_client()
    log_in(after)
    assert [s["name"] for s in fetch(after, UNKNOWN)[1]["servers"]] == ["gemma"]
    html = page_of(after)
    rows = [row for row in server_rows(html) if f'data-box="{UNKNOWN}"' in row]
    assert len(rows) == 1 and ">approved<" not in rows[0]
    assert "Approved boxes" not in html


def test_the_filter_keeps_matching_rows(admin: FlaskClient) -> None:
    assert len(server_rows(page_of(admin, "/fleet?q=qwen"))) == 2
    assert len(server_rows(page_of(admin, f"/fleet?q={LEGACY}"))) == 1
    html = page_of(admin, "/fleet?q=nothing-like-this")
    assert server_rows(html) == [] and "No server matches" in html


def test_an_attacker_chosen_box_name_is_shown_as_text(app: Flask, admin: FlaskClient) -> None:
    name = '<script>alert("x")</script>'
    app_state(app).store.note_unknown([UnknownBox(name, 1.0, 2.0, 1)])
    html = page_of(admin)
    assert name not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html


def test_pages_carry_a_strict_content_security_policy(admin: FlaskClient) -> None:
    answer = admin.get("/fleet")
    policy = answer.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert answer.headers["Cache-Control"] == "no-store"
    html = answer.get_data(as_text=True)
    assert "<script>" not in html and "style=" not in html  # nothing inline, nothing remote
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_every_page_has_its_icon_inline_so_no_favicon_request_is_made(
        client: FlaskClient) -> None:
    """A page without a ``rel=icon`` makes the browser ask ``/favicon.ico``: a 404 in its
    console. The icon is a data URI, which the policy's ``img-src`` allows."""
    answer = client.get("/login")
    icon = re.search(r'<link rel="icon" href="([^"]+)">', answer.get_data(as_text=True))
    assert icon and icon.group(1).startswith("data:image/svg+xml,")
    assert "img-src 'self' data:" in answer.headers["Content-Security-Policy"]


def test_the_stylesheet_and_script_are_served_without_a_session(client: FlaskClient) -> None:
    for name, kind in (("dashboard.css", "text/css"), ("dashboard.js", "javascript")):
        answer = client.get(f"/dashboard/static/{name}")
        assert answer.status_code == 200
        assert kind in answer.content_type


def test_a_missing_page_is_an_html_404(client: FlaskClient) -> None:
    answer = client.get("/dashboard/static/nothing.css")
    assert answer.status_code == 404
    assert "text/html" in answer.content_type


def test_a_fault_is_a_generic_page_and_a_redacted_trace(app: Flask, admin: FlaskClient,
                                                        caplog: pytest.LogCaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = app_state(app).store

    def broken() -> dict:
        raise RuntimeError(f"store exploded near {SECRETS[0]}")

    monkeypatch.setattr(store, "fetch_times", broken)
    answer = admin.get("/fleet")
    assert answer.status_code == 500
    body = answer.get_data(as_text=True)
    assert "Internal error" in body and "exploded" not in body
    assert "store exploded near <redacted>" in caplog.text
    assert SECRETS[0] not in caplog.text


def test_the_box_api_still_answers_json(client: FlaskClient) -> None:
    answer = client.get("/vllm/config")
    assert answer.status_code == 403
    assert json.loads(answer.get_data())["error"]["code"] == "fleet_key_required"


def test_a_failed_turn_shows_the_rollout_panel_and_a_paused_item(app: Flask,
                                                                 admin: FlaskClient) -> None:
    state = app_state(app)
    assert "Rollout" not in page_of(admin)
    revision = state.fleet.assignment(KNOWN).revision
    qwen = f"llmao:{KNOWN}:8002:qwen"
    now = time.time()
    state.store.grant_turn(lambda turns: Turn(KNOWN, revision, (qwen,), Phase.DRAINING,
                                              now, now + 600))
    state.store.update_turn(KNOWN, revision, Phase.FAILED, f"{qwen} is Stalled: <silent>", now)
    state.store.record_applied(AppliedReport(OTHER_KNOWN, "0123456789abcdef",
                                             "2026-01-01T00:00:00Z", (), now))
    html = page_of(admin)
    (row,) = re.findall(r'<tr data-model="qwen" class="paused">.*?</tr>', html, flags=re.S)
    assert f'<td class="waiting">{OTHER_KNOWN}</td>' in row
    assert f"{qwen} is Stalled: &lt;silent&gt;" in row
    assert "Rollout paused" in html
    assert f"box {KNOWN}, rev {revision[:8]}: {qwen} is Stalled: &lt;silent&gt;" in html
