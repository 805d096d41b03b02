"""Sessions an attacker cannot forge or keep, across real gunicorn workers and instances.

The cookie signing key is random and shared through the store; logging out and
a changed ``admin.token`` end sessions in the store, so a cookie saved before
opens nothing after, whichever worker or instance it is shown to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

import pytest

from rig.fleet_files import strong_secret
from rig.postgres import session_cluster
from tests.llmao_process import LlmaoServer
from tests.reliability.admin_http import CSRF_FIELD, WORKERS, login, page, request
from tests.server.fleet_pair import ADMIN_TOKEN

NEW_TOKEN = strong_secret("rotated-admin-")
# Enough requests that every worker answers some of them.
ROUNDS = 8 * WORKERS

pytestmark = pytest.mark.slow


def logged_in(server: LlmaoServer) -> str:
    answer = login(server, ADMIN_TOKEN)
    assert answer.status == 302 and answer.headers["Location"] == "/fleet"
    cookie = answer.cookie()
    assert cookie
    return cookie


def log_out(server: LlmaoServer, cookie: str) -> None:
    """Post the fleet page's logout form; the page's cookie carries its CSRF token."""
    fleet = request(server, "GET", "/fleet", headers={"Cookie": cookie})
    token = CSRF_FIELD.search(fleet.text)
    assert token
    answer = request(server, "POST", "/logout",
                     headers={"Cookie": fleet.cookie() or cookie,
                              "Referer": f"{server.url}/fleet",
                              "Content-Type": "application/x-www-form-urlencoded"},
                     body=urlencode({"csrf_token": token.group(1)}))
    assert answer.status == 302 and answer.headers["Location"] == "/login"


def test_every_worker_honours_a_session_and_none_after_logout(
        servers: Callable[..., LlmaoServer], tmp_path: Path) -> None:
    server = servers("one", str(tmp_path / "state.sqlite3"))
    cookie = logged_in(server)
    assert [page(server, cookie) for _ in range(ROUNDS)] == [200] * ROUNDS
    log_out(server, cookie)
    assert [page(server, cookie) for _ in range(ROUNDS)] == [302] * ROUNDS


def test_two_instances_share_sessions_and_their_end(
        servers: Callable[..., LlmaoServer], request: pytest.FixtureRequest) -> None:
    database = session_cluster(request.config).new_database()
    first, second = servers("one", database), servers("two", database)
    cookie = logged_in(first)
    assert page(second, cookie) == 200
    log_out(second, cookie)
    assert page(first, cookie) == 302

    kept = logged_in(first)
    first.stop()
    rotated = servers("rotated", database, admin={"token": NEW_TOKEN})
    assert page(rotated, kept) == 302, "a new admin.token ends sessions opened under the old"
    assert page(second, kept) == 200, "an instance still on the old token keeps them"


def test_a_key_is_made_per_store_never_from_the_token(
        servers: Callable[..., LlmaoServer], tmp_path: Path) -> None:
    """Two servers with one admin.token but their own stores: a cookie of one is noise
    to the other, so the token alone never lets anyone make or check a cookie."""
    one = servers("one", str(tmp_path / "one.sqlite3"))
    other = servers("other", str(tmp_path / "other.sqlite3"))
    cookie = logged_in(one)
    assert page(one, cookie) == 200
    assert page(other, cookie) == 302


def test_a_session_ends_with_its_lifetime(
        servers: Callable[..., LlmaoServer], tmp_path: Path) -> None:
    server = servers("one", str(tmp_path / "state.sqlite3"),
                     admin={"token": ADMIN_TOKEN, "session_lifetime_s": 2})
    cookie = logged_in(server)
    assert page(server, cookie) == 200
    time.sleep(2.5)
    assert page(server, cookie) == 302
