"""Driving the dashboard with Flask's test client: CSRF tokens, logging in, approving."""

from __future__ import annotations

import html
import re

from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from tests.server.fleet_pair import ADMIN_TOKEN

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_token(client: FlaskClient, path: str = "/login") -> str:
    """The CSRF token of this client's session, read from a form the page renders."""
    page = client.get(path)
    found = CSRF_FIELD.search(page.get_data(as_text=True))
    assert found, f"no CSRF field on {path} ({page.status_code})"
    return found.group(1)


def log_in(client: FlaskClient, token: str = ADMIN_TOKEN, name: str = "alice",
           **request: object) -> TestResponse:
    data = {"csrf_token": csrf_token(client), "token": token, "name": name}
    return client.post("/login", data=data, **request)


def approve(client: FlaskClient, box: str, *models: str) -> TestResponse:
    """Post the approve form as the page does (three selects; empty ones send "")."""
    picked = list(models) + [""] * max(0, 3 - len(models))
    return client.post("/fleet/approve", data={"csrf_token": csrf_token(client, "/fleet"),
                                               "box": box, "model": picked})


def flashes(client: FlaskClient) -> list[str]:
    """The flash messages the next page shows."""
    page = client.get("/fleet").get_data(as_text=True)
    return [html.unescape(re.sub(r"\s+", " ", text).strip())
            for text in re.findall(r'<p class="flash [a-z]+" role="status">(.*?)</p>', page,
                                   flags=re.S)]
