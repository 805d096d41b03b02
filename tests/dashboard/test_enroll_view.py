"""Enrolling a box from the dashboard (docs/box-identity.md): the Enroll form on an unbound box's
row and the approve form mint a bootstrap token by the same rule as the admin API, shown once
on the page answering the POST: never in a URL, a flash, the audit log or a later page."""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from llmao_server.boxes.bindings import BOOTSTRAP_HEADER, TOKEN_HEADER
from llmao_server.state import app_state
from tests.dashboard.sessions import csrf_token, flashes, log_in
from tests.server.fleet_pair import KNOWN, SECRETS, UNKNOWN, box_headers, config

TOKEN_FIELD = re.compile(r'id="bootstrap-token"[^>]*value="([^"]+)"', flags=re.S)


@pytest.fixture
def admin(client: FlaskClient) -> FlaskClient:
    assert log_in(client).status_code == 302
    return client


def enroll(client: FlaskClient, box: str = KNOWN, ttl: str = "15m") -> TestResponse:
    return client.post("/fleet/enroll", data={"csrf_token": csrf_token(client, "/fleet"),
                                              "box": box, "ttl": ttl})


def shown_token(answer: TestResponse) -> str:
    """The token the page shows, after checking how it is shown."""
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert answer.headers["Cache-Control"] == "no-store"
    assert "Location" not in answer.headers
    page = answer.get_data(as_text=True)
    assert "LLMAO_BOOTSTRAP_TOKEN" in page and "Shown once" in page
    found = TOKEN_FIELD.search(page)
    assert found, page
    return html.unescape(found.group(1))


def first_fetch(client: FlaskClient, box: str, token: str) -> TestResponse:
    return client.get("/vllm/config", headers={**box_headers(box), BOOTSTRAP_HEADER: token},
                      environ_base={"REMOTE_ADDR": "192.0.2.10"})


def test_enroll_shows_the_token_once_and_it_binds_the_box(
        admin: FlaskClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="llmao_server")
    row = admin.get("/fleet").get_data(as_text=True)
    assert 'action="/fleet/enroll"' in row and 'value="15m"' in row and 'value="24h"' in row
    answer = enroll(admin)
    token = shown_token(answer)
    assert "within 15 min" in answer.get_data(as_text=True)
    assert token not in admin.get("/fleet").get_data(as_text=True)
    assert not [text for text in flashes(admin) if token in text]
    assert token not in caplog.text
    assert [r for r in caplog.records if "box_enroll" in r.getMessage()
            and "who='alice'" in r.getMessage()], caplog.text
    bound = first_fetch(admin, KNOWN, token)
    assert bound.status_code == 200 and bound.headers.get(TOKEN_HEADER)
    assert token not in caplog.text
    assert not [s for s in SECRETS if s in caplog.text]


def test_enroll_without_the_csrf_token_is_refused_and_mints_nothing(
        admin: FlaskClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="llmao_server")
    answer = admin.post("/fleet/enroll", data={"box": KNOWN, "ttl": "1h"})
    assert answer.status_code == 403
    assert "CSRF token" in answer.get_data(as_text=True)
    assert not TOKEN_FIELD.search(answer.get_data(as_text=True))
    assert "box_enroll" not in caplog.text


def test_enroll_needs_a_session(client: FlaskClient) -> None:
    answer = client.post("/fleet/enroll", data={"box": KNOWN, "ttl": "1h"})
    assert answer.status_code == 403
    assert not TOKEN_FIELD.search(answer.get_data(as_text=True))


@pytest.mark.parametrize(("box", "ttl", "why"), [
    (UNKNOWN, "1h", f"Not enrolled: {UNKNOWN} is not served"),
    (KNOWN, "7d", "Not enrolled: pick a token lifetime the form offers"),
])
def test_enroll_refuses_a_box_not_served_and_a_lifetime_not_offered(
        admin: FlaskClient, caplog: pytest.LogCaptureFixture, box: str, ttl: str,
        why: str) -> None:
    caplog.set_level(logging.INFO, logger="llmao_server")
    answer = enroll(admin, box, ttl)
    assert answer.status_code == 302
    assert [text for text in flashes(admin) if text.startswith(why)]
    assert "action=enroll outcome=refused" in caplog.text and "box_enroll" not in caplog.text


def test_a_bound_box_shows_release_not_enroll(admin: FlaskClient) -> None:
    assert first_fetch(admin, KNOWN, shown_token(enroll(admin))).status_code == 200
    page = admin.get("/fleet").get_data(as_text=True)
    rows = [row for row in re.findall(r'<tr class="server".*?</tr>', page, flags=re.S)
            if f'data-box="{KNOWN}"' in row]
    assert rows and all("/fleet/release" in row and "/fleet/enroll" not in row for row in rows)


def stranger(client: FlaskClient) -> None:
    """An unknown box presents the fleet key: it waits on the strip for an approval."""
    assert client.get("/vllm/config", headers=box_headers(UNKNOWN)).status_code == 404
    app_state(client.application).recorder.flush()


def approve_form(client: FlaskClient) -> str:
    page = client.get("/fleet").get_data(as_text=True)
    return re.search(r'<form class="approve".*?</form>', page, flags=re.S).group(0)


def test_under_enrolled_approving_offers_the_token_at_once(
        make_app: Callable[..., Flask]) -> None:
    client = make_app(config(binding="enrolled")).test_client()
    stranger(client)
    assert log_in(client).status_code == 302
    form = approve_form(client)
    assert re.search(r'<option value="1h" selected>', form), form
    answer = client.post("/fleet/approve", data={
        "csrf_token": csrf_token(client, "/fleet"), "box": UNKNOWN,
        "model": ["qwen", "", ""], "enroll": "1h"})
    token = shown_token(answer)
    assert f"Approved {UNKNOWN}" in answer.get_data(as_text=True)
    assert first_fetch(client, UNKNOWN, token).status_code == 200


def test_under_first_fetch_approving_mints_no_token_unless_asked(admin: FlaskClient) -> None:
    stranger(admin)
    form = approve_form(admin)
    assert re.search(r'<option value="" selected>no bootstrap token', form), form
    answer = admin.post("/fleet/approve", data={
        "csrf_token": csrf_token(admin, "/fleet"), "box": UNKNOWN, "model": ["qwen", "", ""],
        "enroll": ""})
    assert answer.status_code == 302


def test_without_binding_there_is_nothing_to_enroll(make_app: Callable[..., Flask]) -> None:
    client = make_app(config(binding="off")).test_client()
    stranger(client)
    assert log_in(client).status_code == 302
    page = client.get("/fleet").get_data(as_text=True)
    assert "/fleet/enroll" not in page and 'name="enroll"' not in page
