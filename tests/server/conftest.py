"""Fixtures of the server's tests, flaskr style: an app per test, its client, its state.

Every log record of the session is also kept (formatted as the server writes
it) so that ``test_no_secret_in_logs.py`` can scan the whole run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from llmao_server.app import create_app
from llmao_server.logs import LOG_FORMAT
from llmao_server.state import ServerState, app_state
from tests.server.fleet_pair import SECRETS, write_pair


class LineCollector(logging.Handler):
    """Keeps every formatted record, tracebacks included."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter(LOG_FORMAT))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="session", autouse=True)
def session_log() -> Iterator[list[str]]:
    """Every log line any server test produced, in order; scanned for secrets at the end."""
    collector = LineCollector()
    root = logging.getLogger()
    root.addHandler(collector)
    yield collector.lines
    root.removeHandler(collector)
    leaked = [line for line in collector.lines
              if any(secret in line for secret in SECRETS) or "sk-vllm-" in line]
    assert leaked == [], "a server log line holds a secret"


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[Callable[..., Flask]]:
    """make_app(config_document=None, folder="fleet", state=None): apps share one state file
    unless told otherwise, as the workers of one server do."""
    apps: list[Flask] = []

    def make(config_document: dict[str, Any] | None = None, folder: str = "fleet",
             state: str | None = None) -> Flask:
        config_path, models_path = write_pair(tmp_path / folder, config_document)
        app = create_app({"TESTING": True, "LLMAO_CONFIG": config_path,
                          "LLMAO_MODELS": models_path,
                          "LLMAO_STATE": state or str(tmp_path / "state.sqlite3")})
        apps.append(app)
        return app

    yield make
    for app in apps:
        app_state(app).close()


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    return make_app()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def state(app: Flask) -> ServerState:
    return app_state(app)
