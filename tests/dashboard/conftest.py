"""Fixtures of the dashboard's tests: an app per test over its own state, and its client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from llmao_server.app import create_app
from tests.server.fleet_pair import write_pair


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
        app.extensions["llmao"].close()


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    return make_app()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
