"""The operators' dashboard: the fleet page, admin login, and approving a new box.

Server-rendered HTML with its own stylesheet and script, served by the app
(nothing loads from elsewhere). Every route of the blueprint sits behind
:func:`auth.gate`, and its errors are HTML pages: the app-wide handler answers
JSON, which is right for the APIs and wrong for a browser.
"""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Blueprint, Flask, Response, render_template
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException

from ..api_errors import error_answer
from ..state import app_state
from . import auth, views

STATIC_PATH = "/dashboard/static"
# Only what the app itself serves; no inline script or style, no frames.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


def create_blueprint() -> Blueprint:
    bp = Blueprint("dashboard", __name__, template_folder="templates",
                   static_folder="static", static_url_path=STATIC_PATH)
    bp.add_url_rule("/", "index", views.index)
    bp.add_url_rule("/fleet", "fleet", views.fleet)
    bp.add_url_rule("/fleet/approve", "approve", views.approve, methods=["POST"])
    bp.add_url_rule("/fleet/enroll", "enroll", views.enroll, methods=["POST"])
    bp.add_url_rule("/fleet/release", "release", views.release, methods=["POST"])
    bp.add_url_rule("/login", "login", auth.login, methods=["GET", "POST"])
    bp.add_url_rule("/logout", "logout", auth.logout, methods=["POST"])
    bp.before_request(auth.gate)
    bp.after_request(secure_headers)
    bp.register_error_handler(Exception, error_page)
    return bp


def init_dashboard(app: Flask) -> None:
    """Sessions, CSRF and the blueprint, on an app whose ``llmao`` state is set."""
    auth.configure_sessions(app, app_state(app))
    app.add_template_filter(utc_time, "utc")
    app.add_template_filter(known, "known")
    app.add_template_filter(duration, "duration")
    app.register_blueprint(create_blueprint())


def secure_headers(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    if response.mimetype == "text/html":
        response.headers["Cache-Control"] = "no-store"
    return response


def error_page(exc: Exception) -> tuple[str, int]:
    """Refusals and faults as a page; a fault is logged (redacted) exactly as the API logs it."""
    if isinstance(exc, CSRFError):
        auth.audit(auth.action_name(), "refused", why=f"CSRF: {exc.description}")
        status, message = 403, ("The form's CSRF token is missing or does not match this "
                                "session. Reload the page and try again.")
    elif isinstance(exc, HTTPException) and exc.code is not None and exc.code < 500:
        status, message = exc.code, exc.description or exc.name
    else:
        status, _ = error_answer(exc, app_state().redact)
        message = "Internal error; the server log has the details."
    return render_template("dashboard/error.html", status=status, message=message), status


def known(value: float | None, spec: str = "{:g}") -> str:
    """A figure as ``spec`` formats it; an unknown one (None) as a dash, never as 0."""
    return "—" if value is None else spec.format(value)


def duration(seconds: float | None) -> str:
    """A latency: milliseconds below a second, else seconds; unknown as a dash."""
    if seconds is None:
        return "—"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def utc_time(at: float | None) -> str:
    """An epoch time as ISO 8601 UTC, for tooltips."""
    if at is None:
        return ""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
