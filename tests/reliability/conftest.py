"""Fixtures of the reliability tests: the server's app, client and state, shared, not copied;
real llmao-server processes for the admin credential tests."""

from tests.reliability.admin_http import servers  # noqa: F401 - shared fixture
from tests.server.conftest import app, client, make_app, state  # noqa: F401 - shared fixtures
