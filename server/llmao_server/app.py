"""The Flask app of the config server, built by :func:`create_app` (nothing runs at import).

Configuration comes from ``test_config`` or the environment: ``LLMAO_CONFIG``
and ``LLMAO_MODELS`` (the two fleet files), ``LLMAO_STATE`` (overrides
``server.state``). ``llmao-server`` passes the fleet it has already loaded and
checked as ``LLMAO_FLEET``, so a large fleet is read once, and
``LLMAO_ACCESS_LOG`` false for ``--no-access-log`` (the access log is on by default).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from flask import Flask

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet

from . import health
from .access_log import AccessLog
from .admin import admin_api
from .api_errors import flask_error_handler
from .boxes.box_api import ROUTES, BoxApi
from .logs import SERVER_LOGGER, ensure_server_logging
from .metrics import fleet_metrics, scrape_targets
from .state import ServerState, attach_state
from .store import open_store
from .tls.hsts import StrictTransport
from .web import init_dashboard

log = logging.getLogger(__name__)

SETTINGS_FROM_ENVIRONMENT = ("LLMAO_CONFIG", "LLMAO_MODELS", "LLMAO_STATE")


def create_app(test_config: Mapping[str, Any] | None = None) -> Flask:
    app = Flask(SERVER_LOGGER)
    if test_config is not None:
        app.config.from_mapping(test_config)
    for key in SETTINGS_FROM_ENVIRONMENT:
        app.config.setdefault(key, os.environ.get(key))
    fleet = app.config.get("LLMAO_FLEET") or fleet_from_files(app.config)
    store = open_store(app.config["LLMAO_STATE"] or fleet.settings.server.state)
    state = ServerState(fleet, store)
    state.forget_joined_unknowns()
    attach_state(app, state)
    ensure_server_logging()
    warn_of_weak_secrets(fleet)
    app.register_blueprint(health.bp)
    app.register_blueprint(admin_api.bp)
    app.register_blueprint(fleet_metrics.bp)
    app.register_blueprint(scrape_targets.bp)
    init_dashboard(app)
    store.close()  # a worker forked from this process opens its own connection
    # Flask's routes answer errors in the box API's JSON shape.
    app.register_error_handler(Exception, flask_error_handler)
    # The box API in front: its requests pass through no other layer (it writes their
    # access lines and HSTS itself); the rest go through the access log and HSTS.
    inner = StrictTransport(app.wsgi_app)
    access_log = None
    if app.config.get("LLMAO_ACCESS_LOG", True):
        inner = access_log = AccessLog(inner, state.redact, ROUTES, fleet.assignments)
    app.wsgi_app = BoxApi(state, inner, access_log)
    return app


def warn_of_weak_secrets(fleet: Fleet) -> None:
    """A weak fleet.key or salt loads (changing it means re-provisioning) but never quietly:
    one warning per secret in the log of every server that starts on it."""
    for key, why in fleet.settings.weak_secrets:
        log.warning("%s: %s %s: weak secrets are easier to guess; see the dashboard and "
                    "docs/rotating-secrets.md", fleet.config_path, key, why)


def fleet_from_files(config: Mapping[str, Any]) -> Fleet:
    if not config.get("LLMAO_CONFIG") or not config.get("LLMAO_MODELS"):
        raise ConfigError(["LLMAO_CONFIG and LLMAO_MODELS must name config.yaml and models.yaml"])
    return load_fleet(config["LLMAO_CONFIG"], config["LLMAO_MODELS"], signer=True)
