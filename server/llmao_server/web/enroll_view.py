"""Enrolling a box from the dashboard (docs/box-identity.md): a one-time bootstrap token minted
by the same rule as ``llmao-server enroll`` and ``POST /admin/api/boxes/<name>/enroll``, shown
once on the page that answers the form's POST.

The token is never in a URL (it answers a POST, not a redirect), a flash, the audit log (the
rule audits the enrollment without it) or any later page; the answer tells the browser not to
keep it.
"""

from __future__ import annotations

from flask import Response, make_response, render_template

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import BOOTSTRAP_ENV
from ansible_collections.llmao.fleet.plugins.module_utils.config_file import BINDING_ENROLLED

from ..boxes.bindings import enroll_box
from ..state import app_state
from .auth import client_address, current_admin

# The lifetimes an operator picks from, by form value: long enough to boot a box, short
# enough that a token left in a template is soon worthless.
ENROLL_TTLS = {"15m": ("15 min", 900.0), "1h": ("1 h", 3600.0), "24h": ("24 h", 86400.0)}
DEFAULT_TTL = "1h"


def enrollment_offered() -> str:
    """The approve form's preselected token lifetime: under ``fleet.binding: enrolled`` an
    approved box binds only with a token, so one is offered at once; else none ("")."""
    return DEFAULT_TTL if app_state().fleet.settings.fleet.binding == BINDING_ENROLLED else ""


def token_page(box: str, ttl: str) -> Response:
    """Mint ``box``'s bootstrap token for the lifetime ``ttl`` (a key of :data:`ENROLL_TTLS`)
    and answer the page that shows it, once."""
    token, expires_at = enroll_box(app_state(), box, ENROLL_TTLS[ttl][1], None,
                                   current_admin() or "admin", client_address())
    answer = make_response(render_template(
        "dashboard/enrolled.html", box=box, token=token, expires_at=expires_at,
        lifetime=ENROLL_TTLS[ttl][0], variable=BOOTSTRAP_ENV, admin=current_admin()))
    answer.headers["Cache-Control"] = "no-store"
    return answer
