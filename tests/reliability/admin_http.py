"""Real ``llmao-server`` processes for the admin credential tests, and an admin's requests.

Each request goes on its own connection from a chosen loopback address: the
server sees 127.0.0.2 and 127.0.0.1 as two TCP peers, which is how the tests
play several callers without leaving the machine.
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from tests.llmao_process import LlmaoServer, start_llmao_server
from tests.server.fleet_pair import ADMIN_TOKEN, CONFIG, write_pair

WORKERS = 3
OBSERVATIONS = "/admin/api/observations"
CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass(frozen=True)
class Answer:
    status: int
    headers: http.client.HTTPMessage
    text: str

    def cookie(self) -> str | None:
        """The ``name=value`` of the cookie this answer sets, if any."""
        header = self.headers.get("Set-Cookie")
        return header.split(";", 1)[0] if header else None


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., LlmaoServer]]:
    """servers(name, state, **sections): a real llmao-server (:data:`WORKERS` gunicorn
    workers) on the test fleet with this state store, config.yaml's sections replaced by
    those given (``admin={...}``)."""
    started: list[LlmaoServer] = []

    def start(name: str, state: str, **sections: dict[str, Any]) -> LlmaoServer:
        document = {**CONFIG, "server": {"state": state}, **sections}
        config, models = write_pair(tmp_path / name, document)
        started.append(start_llmao_server(Path(config), Path(models), tmp_path / name,
                                          workers=WORKERS))
        return started[-1]

    yield start
    for server in started:
        server.stop()
    for server in started:
        assert ADMIN_TOKEN not in server.log()


def request(server: LlmaoServer, method: str, path: str, peer: str = "127.0.0.1",
            headers: dict[str, str] | None = None, body: str | None = None) -> Answer:
    """One request on its own connection from ``peer`` (a loopback address)."""
    place = urlsplit(server.url)
    connection = http.client.HTTPConnection(place.hostname, place.port, timeout=30,
                                            source_address=(peer, 0))
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        return Answer(answer.status, answer.headers, answer.read().decode("utf-8", "replace"))
    finally:
        connection.close()


def bearer(server: LlmaoServer, token: str, peer: str = "127.0.0.1") -> int:
    """The admin API's status for this bearer."""
    return request(server, "GET", OBSERVATIONS, peer, {"Authorization": f"Bearer {token}"}).status


def login(server: LlmaoServer, token: str, peer: str = "127.0.0.1") -> Answer:
    """The login form as a browser posts it: its session cookie and CSRF token first."""
    form = request(server, "GET", "/login", peer)
    csrf = CSRF_FIELD.search(form.text)
    assert csrf, f"no CSRF field on the login page ({form.status})"
    return request(server, "POST", "/login", peer,
                   {"Cookie": form.cookie() or "", "Referer": f"{server.url}/login",
                    "Content-Type": "application/x-www-form-urlencoded"},
                   urlencode({"csrf_token": csrf.group(1), "token": token, "name": "alice"}))


def log_in(server: LlmaoServer, token: str, peer: str = "127.0.0.1") -> int:
    return login(server, token, peer).status


def page(server: LlmaoServer, cookie: str, path: str = "/fleet") -> int:
    """The dashboard's status for a request carrying this session cookie."""
    return request(server, "GET", path, headers={"Cookie": cookie}).status
