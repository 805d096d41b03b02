"""Admin sessions: log in with ``admin.token``, the gate in front of every page, the audit log.

The session is Flask's signed cookie (HttpOnly, SameSite=Lax, Secure when the
request came over HTTPS). Its signing key is random, made once and kept in the
state store, so every worker and every instance on one store signs alike and a
login outlives a restart. It is never derived from ``admin.token``: a cookie
then gives nobody a way to test guesses of the token offline.

A signed cookie alone cannot be taken back, so a login also opens a session in
the store, named by a random id the cookie carries and tied to the admin token
it was opened under (an HMAC of the token under the signing key). A cookie
opens nothing once its session is gone: logged out, past
``admin.session_lifetime_s``, or opened under another ``admin.token``. A server
that starts under a token other than the last one in force ends every session
ever opened under its token (:meth:`StateStore.note_token_in_force`), so rolling
``admin.token`` back to an old value revives none of that value's old sessions.

Every login attempt draws on the admin credentials' one attempt limit
(:mod:`..admin_attempts`), shared with the admin API's bearer and kept in the
store: once it is reached the address is refused until its window ends, the
right token included, and the token is not compared.

Forms carry Flask-WTF's CSRF token. The check runs in :func:`gate`, after the
login check, for every unsafe request to the dashboard, which is the only part
of the app a cookie authenticates (the box API and the admin API take bearers,
which a browser never sends on its own).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from datetime import timedelta
from typing import Any

from flask import (
    Flask,
    Response,
    abort,
    current_app,
    flash,
    g,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask.sessions import SecureCookieSessionInterface
from flask_wtf.csrf import CSRFProtect

from ansible_collections.llmao.fleet.plugins.module_utils.bearer import is_placeholder

from ..admin_attempts import AttemptRefused, admin_token_matches
from ..audit import audit as write_audit
from ..state import ServerState, app_state

SESSION_COOKIE = "llmao_admin"
SIGNING_KEY_NAME = "dashboard-session-signing-key"
TOKEN_CHECK_LABEL = b"llmao.dashboard.session-token\n"
NAME_LENGTH = 40
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# Reachable without a session: the login form and the stylesheet and script it uses.
PUBLIC_ENDPOINTS = ("dashboard.login", "dashboard.static")

csrf = CSRFProtect()


class SessionOverTls(SecureCookieSessionInterface):
    """Flask's signed cookie session, marked Secure whenever the request came over HTTPS."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return request.is_secure


def configure_sessions(app: Flask, state: ServerState) -> None:
    """Sign cookies with the store's shared key, made now if this is the first server."""
    app.secret_key = bytes.fromhex(state.store.server_secret(SIGNING_KEY_NAME,
                                                             secrets.token_hex(32)))
    admin_token = state.fleet.settings.admin.token
    if not is_placeholder(admin_token):
        state.store.note_token_in_force(token_check_of(app.secret_key, admin_token))
    app.config.update(
        SESSION_COOKIE_NAME=SESSION_COOKIE,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        PERMANENT_SESSION_LIFETIME=timedelta(seconds=state.fleet.settings.admin.session_lifetime_s),
        # The gate calls the check itself, after the login check (see the module's doc).
        WTF_CSRF_CHECK_DEFAULT=False,
        # A page left open overnight keeps working; the session's lifetime bounds the token.
        WTF_CSRF_TIME_LIMIT=None,
    )
    app.session_interface = SessionOverTls()
    csrf.init_app(app)


def token_check() -> str:
    """What ties a session to the admin token in force, without storing the token."""
    return token_check_of(current_app.secret_key, app_state().fleet.settings.admin.token)


def token_check_of(signing_key: bytes, admin_token: str | None) -> str:
    return hmac.new(signing_key, TOKEN_CHECK_LABEL + (admin_token or "").encode("utf-8"),
                    hashlib.sha256).hexdigest()


def current_admin() -> str | None:
    """The admin of this request's session while the store holds it open; else None."""
    if "admin" not in g:
        name, session_id = session.get("admin"), session.get("sid")
        still_open = (isinstance(name, str) and isinstance(session_id, str) and token_configured()
                      and app_state().store.session_open(session_id, token_check(), time.time()))
        g.admin = name if still_open else None
    return g.admin


def client_address() -> str:
    return request.remote_addr or "unknown"


def action_name() -> str:
    """The action a request asks for, as the audit log names it: ``approve``, ``logout``…"""
    return (request.endpoint or request.path).rpartition(".")[2]


def audit(action: str, outcome: str, **details: Any) -> None:
    """One audit line for a dashboard action, by the session's admin (or ``who``)."""
    who = current_admin() or details.pop("who", None) or "-"
    write_audit(app_state().redact, action, outcome, who, client_address(), **details)


def gate() -> Response | None:
    """Before every dashboard request: log in first (redirect for a read, 403 for an action),
    then the CSRF token for anything that changes state."""
    if request.endpoint not in PUBLIC_ENDPOINTS and current_admin() is None:
        if request.method in SAFE_METHODS:
            return redirect(url_for("dashboard.login"))
        audit(action_name(), "refused", why="not logged in")
        abort(403, "Log in first: this action needs an admin session.")
    if request.method not in SAFE_METHODS:
        csrf.protect()
    return None


def token_configured() -> bool:
    return not is_placeholder(app_state().fleet.settings.admin.token)


def display_name(raw: str) -> str:
    """The name an admin gives at login, for the audit log: printable, short, or ``admin``."""
    name = "".join(ch for ch in raw.strip() if ch.isprintable())[:NAME_LENGTH].strip()
    return name or "admin"


def login() -> Response | str | tuple[str, int] | tuple[str, int, dict[str, str]]:
    """``GET``: the form. ``POST``: check the token, within the admin attempt limit."""
    if request.method in SAFE_METHODS:
        if current_admin() is not None:
            return redirect(url_for("dashboard.fleet"))
        return render_login()
    if not token_configured():
        audit("login", "refused", why="admin.token not configured")
        return render_login(), 403
    name = display_name(request.form.get("name", ""))
    try:
        right = admin_token_matches(app_state(), request.form.get("token", ""), client_address(),
                                    "login", name)
    except AttemptRefused as refused:
        flash(f"{refused.message[0].upper()}{refused.message[1:]}.", "error")
        return render_login(), refused.status, refused.headers()
    if not right:
        flash("That is not the admin token (admin.token in config.yaml).", "error")
        return render_login(), 401
    session.clear()
    session.permanent = True
    session_id, now = secrets.token_urlsafe(32), time.time()
    app_state().store.open_session(session_id, token_check(), now,
                               now + app_state().fleet.settings.admin.session_lifetime_s)
    session["sid"], session["admin"], g.admin = session_id, name, name
    audit("login", "ok")
    return redirect(url_for("dashboard.fleet"))


def render_login() -> str:
    return render_template("dashboard/login.html", token_configured=token_configured())


def logout() -> Response:
    audit("logout", "ok")
    app_state().store.end_session(session["sid"])
    session.clear()
    g.admin = None
    flash("Logged out.", "info")
    return redirect(url_for("dashboard.login"))
