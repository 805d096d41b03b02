"""Fixtures of the reliability tests: the server's app, client and state, shared, not copied."""

from tests.server.conftest import app, client, make_app, state  # noqa: F401 - shared fixtures
