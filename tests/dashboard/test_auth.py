"""Admin login, the session cookie, the failed-login limit, CSRF, and what a stranger gets."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.config_file import AttemptLimits
from llmao_server.web.auth import SESSION_COOKIE
from rig.fleet_files import strong_secret
from tests.dashboard.sessions import approve, csrf_token, flashes, log_in
from tests.server.fleet_pair import ADMIN_TOKEN, CONFIG, SECRETS, UNKNOWN, box_headers

ADMIN_ACTIONS = ["/fleet/approve", "/logout"]
PEER_LIMIT = AttemptLimits.per_peer


def session_cookie(response) -> str:
    cookies = [c for c in response.headers.getlist("Set-Cookie")
               if c.startswith(SESSION_COOKIE + "=")]
    assert cookies, "no session cookie was set"
    return cookies[-1]


def test_a_stranger_is_sent_to_the_login_and_an_admin_to_the_fleet(
        client: FlaskClient) -> None:
    for path in ("/", "/fleet", "/fleet?q=gemma"):
        answer = client.get(path)
        assert answer.status_code == 302
        assert answer.headers["Location"] == "/login"
    login_page = client.get("/login")
    assert login_page.status_code == 200
    assert 'name="csrf_token"' in login_page.get_data(as_text=True)
    log_in(client)
    assert client.get("/").headers["Location"] == "/fleet"
    assert client.get("/login").headers["Location"] == "/fleet"


@pytest.mark.parametrize("path", ADMIN_ACTIONS)
def test_every_action_is_refused_without_a_session(client: FlaskClient, path: str) -> None:
    token = csrf_token(client)  # a valid token of this (anonymous) session: still refused
    for data in ({}, {"csrf_token": token, "box": UNKNOWN, "model": ["gemma"]}):
        answer = client.post(path, data=data)
        assert answer.status_code == 403
        assert "text/html" in answer.content_type
    assert client.get("/vllm/config", headers=box_headers(host=UNKNOWN)).status_code == 404


def test_the_right_token_opens_a_session_with_safe_cookie_flags(client: FlaskClient) -> None:
    answer = log_in(client)
    assert answer.status_code == 302
    assert answer.headers["Location"] == "/fleet"
    cookie = session_cookie(answer)
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie
    assert "Secure" not in cookie  # plain HTTP (loopback only): a Secure cookie would be lost
    page = client.get("/fleet")
    assert page.status_code == 200
    assert "alice" in page.get_data(as_text=True)


def test_over_https_the_cookie_is_secure(app: Flask) -> None:
    client = app.test_client()
    https = {"base_url": "https://localhost", "headers": {"Referer": "https://localhost/login"}}
    token = client.get("/login", base_url="https://localhost").get_data(as_text=True)
    assert 'name="csrf_token"' in token
    answer = log_in(client, **https)
    assert answer.status_code == 302
    assert "; Secure" in session_cookie(answer)


def test_a_wrong_token_is_refused_and_says_what_to_use(client: FlaskClient) -> None:
    answer = log_in(client, token="not-the-admin-token")
    assert answer.status_code == 401
    assert "admin.token" in answer.get_data(as_text=True)
    assert client.get("/fleet").status_code == 302


def test_a_login_without_the_csrf_token_is_refused(client: FlaskClient) -> None:
    answer = client.post("/login", data={"token": ADMIN_TOKEN, "name": "alice"})
    assert answer.status_code == 403
    assert "CSRF" in answer.get_data(as_text=True)
    assert client.get("/fleet").status_code == 302


def test_failed_logins_are_limited_per_address_across_workers(
        make_app: Callable[..., Flask]) -> None:
    """Two apps on one state file are two workers: the count is shared, per client address."""
    first, second = make_app().test_client(), make_app().test_client()
    attacker = {"environ_base": {"REMOTE_ADDR": "192.0.2.66"}}
    for attempt in range(PEER_LIMIT):
        client = first if attempt % 2 else second
        assert log_in(client, token=f"guess-{attempt}", **attacker).status_code == 401
    refused = log_in(first, **attacker)  # the right token, but too late
    assert refused.status_code == 429
    assert "Too many admin token attempts from this address" in refused.get_data(as_text=True)
    assert 0 < int(refused.headers["Retry-After"]) <= 15 * 60
    assert log_in(second, **attacker).status_code == 429
    # Another address is not locked out.
    assert log_in(first, environ_base={"REMOTE_ADDR": "192.0.2.67"}).status_code == 302


def test_a_good_login_clears_the_address_count(client: FlaskClient) -> None:
    for attempt in range(PEER_LIMIT - 1):
        assert log_in(client, token=f"guess-{attempt}").status_code == 401
    assert log_in(client).status_code == 302
    client.post("/logout", data={"csrf_token": csrf_token(client, "/fleet")})
    for attempt in range(PEER_LIMIT - 1):
        assert log_in(client, token=f"again-{attempt}").status_code == 401
    assert log_in(client).status_code == 302


@pytest.mark.parametrize("token", [None, "", "CHANGE_ME"])
def test_without_an_admin_token_nobody_can_log_in(make_app: Callable[..., Flask],
                                                  token: str | None) -> None:
    document = {**CONFIG, "admin": {"token": token} if token is not None else {}}
    client = make_app(document).test_client()
    page = client.get("/login").get_data(as_text=True)
    assert "Login is disabled" in page
    answer = client.post("/login", data={"token": token or "", "name": "x"})
    assert answer.status_code == 403
    assert client.get("/fleet").status_code == 302


def test_a_session_holds_across_workers_and_instances_with_the_same_token(
        make_app: Callable[..., Flask]) -> None:
    """The signing key and the sessions live in the shared store; a new token ends every
    session opened under the old one."""
    first = make_app().test_client()
    log_in(first)
    cookie = first.get_cookie(SESSION_COOKIE)
    assert cookie is not None
    other_instance = make_app(folder="other").test_client()
    other_instance.set_cookie(SESSION_COOKIE, cookie.value)
    assert other_instance.get("/fleet").status_code == 200
    rotated = make_app({**CONFIG, "admin": {"token": strong_secret("rotated-admin-")}},
                       folder="rotated").test_client()
    rotated.set_cookie(SESSION_COOKIE, cookie.value)
    assert rotated.get("/fleet").status_code == 302


def test_rolling_the_token_back_revives_no_session_opened_under_it(
        make_app: Callable[..., Flask]) -> None:
    """Issue 18 item 12: A, then B, then A again; a cookie of A's first time opens nothing."""
    first = make_app().test_client()
    log_in(first)
    cookie = first.get_cookie(SESSION_COOKIE)
    assert cookie is not None
    rotated_token = {**CONFIG, "admin": {"token": strong_secret("rotated-admin-")}}
    make_app(rotated_token, folder="rotated")
    assert first.get("/fleet").status_code == 200, "an instance still on A keeps it"
    rolled_back = make_app(folder="rolled-back").test_client()
    rolled_back.set_cookie(SESSION_COOKIE, cookie.value)
    assert rolled_back.get("/fleet").status_code == 302
    log_in(rolled_back)  # a session opened under A now holds
    assert rolled_back.get("/fleet").status_code == 200


def test_logging_out_ends_the_session(client: FlaskClient) -> None:
    log_in(client)
    answer = client.post("/logout", data={"csrf_token": csrf_token(client, "/fleet")})
    assert answer.status_code == 302
    assert answer.headers["Location"] == "/login"
    assert client.get("/fleet").status_code == 302
    answer = client.post("/fleet/approve", data={"csrf_token": csrf_token(client),
                                                 "box": UNKNOWN, "model": ["gemma"]})
    assert answer.status_code == 403


def test_logout_without_the_csrf_token_is_refused(client: FlaskClient) -> None:
    log_in(client)
    assert client.post("/logout").status_code == 403
    assert client.get("/fleet").status_code == 200


@pytest.mark.parametrize("token", [None, "forged-token", "from-another-session"])
def test_an_action_without_this_sessions_csrf_token_is_refused(
        make_app: Callable[..., Flask], token: str | None) -> None:
    app = make_app()
    client = app.test_client()
    log_in(client)
    if token == "from-another-session":
        other = app.test_client()
        log_in(other, name="mallory")
        token = csrf_token(other, "/fleet")
    data = {"box": UNKNOWN, "model": ["gemma"]}
    if token is not None:
        data["csrf_token"] = token
    answer = client.post("/fleet/approve", data=data)
    assert answer.status_code == 403
    assert "CSRF token" in answer.get_data(as_text=True)
    assert client.get("/vllm/config", headers=box_headers(host=UNKNOWN)).status_code == 404
    assert flashes(client) == []


def test_every_admin_action_is_logged_with_who_and_what_and_no_secret(
        client: FlaskClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="llmao_server")
    log_in(client, token="wrong-" + ADMIN_TOKEN)
    log_in(client, name="alice")
    approve(client, UNKNOWN, "qwen", "gemma")
    approve(client, UNKNOWN + "1", "gpt")
    client.post("/fleet/approve", data={"box": UNKNOWN})
    client.post("/logout", data={"csrf_token": csrf_token(client, "/fleet")})
    client.post("/fleet/approve", data={"box": UNKNOWN})
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("admin action")]
    expected = [
        ("action=login outcome=refused", "wrong token"),
        ("action=login outcome=ok who='alice' peer='127.0.0.1'", ""),
        ("action=approve outcome=ok who='alice'", f"box='{UNKNOWN}' models=['qwen', 'gemma']"),
        ("action=approve outcome=refused who='alice'", "commercial route"),
        ("action=approve outcome=refused who='alice'", "CSRF"),
        ("action=logout outcome=ok who='alice'", ""),
        ("action=approve outcome=refused who='-'", "not logged in"),
    ]
    assert len(lines) == len(expected), lines
    for line, (start, detail) in zip(lines, expected, strict=True):
        assert line.startswith("admin " + start), line
        assert detail in line, line
    assert not [s for s in SECRETS if s in caplog.text]
    assert "wrong-" not in caplog.text  # a mistyped token is not logged either


def test_a_cookie_saved_before_logout_opens_nothing_after(client: FlaskClient) -> None:
    log_in(client)
    saved = client.get_cookie(SESSION_COOKIE)
    assert saved is not None
    client.post("/logout", data={"csrf_token": csrf_token(client, "/fleet")})
    client.set_cookie(SESSION_COOKIE, saved.value)
    assert client.get("/fleet").status_code == 302
    answer = client.post("/fleet/approve", data={"csrf_token": csrf_token(client),
                                                 "box": UNKNOWN, "model": ["gemma"]})
    assert answer.status_code == 403


def test_the_signing_key_is_random_per_store_not_derived_from_the_token(
        make_app: Callable[..., Flask], tmp_path) -> None:
    first = make_app()
    again = make_app(folder="again")
    elsewhere = make_app(folder="elsewhere", state=str(tmp_path / "other.sqlite3"))
    assert first.secret_key == again.secret_key  # one key per store, shared
    assert first.secret_key != elsewhere.secret_key  # same admin.token, another key
    assert ADMIN_TOKEN.encode() not in first.secret_key
    client = first.test_client()
    log_in(client)
    stranger = elsewhere.test_client()
    stranger.set_cookie(SESSION_COOKIE, client.get_cookie(SESSION_COOKIE).value)
    assert stranger.get("/fleet").status_code == 302


def test_a_session_ends_with_its_configured_lifetime(
        make_app: Callable[..., Flask], monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app({**CONFIG, "admin": {"token": ADMIN_TOKEN, "session_lifetime_s": 60}})
    client = app.test_client()
    answer = log_in(client)
    assert "Max-Age=60" in session_cookie(answer) or "Expires=" in session_cookie(answer)
    assert client.get("/fleet").status_code == 200
    later = time.time() + 61
    monkeypatch.setattr("llmao_server.web.auth.time.time", lambda: later)
    assert client.get("/fleet").status_code == 302


@pytest.mark.parametrize("lifetime", [0, -5, "12h", 31 * 24 * 3600])
def test_a_session_lifetime_out_of_bounds_is_refused_at_load(
        make_app: Callable[..., Flask], lifetime: object) -> None:
    document = {**CONFIG, "admin": {"token": ADMIN_TOKEN, "session_lifetime_s": lifetime}}
    with pytest.raises(ConfigError, match="admin.session_lifetime_s"):
        make_app(document)
