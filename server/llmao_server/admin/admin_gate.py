"""The admin API's gate: ``Authorization: Bearer <admin.token>`` on every route.

The token is compared in constant time after the attempt is counted against the
admin credentials' one limit (:mod:`..admin_attempts`, shared with the
dashboard's login): 429 over it, 503 when the store cannot count. No admin
token configured: 503 whatever the request carries, as the box API does for
the fleet key.
"""

from __future__ import annotations

from flask import request

from ansible_collections.llmao.fleet.plugins.module_utils.bearer import is_placeholder

from ..admin_attempts import AttemptRefused, admin_token_matches
from ..api_errors import RequestRefused
from ..bearer_header import presented_bearer
from ..state import app_state


def require_admin_token() -> None:
    """503 without a configured token, 401 without a bearer, 403 with the wrong one;
    429 or 503 from the attempt limit before the token is compared."""
    token = app_state().fleet.settings.admin.token
    if is_placeholder(token):
        raise RequestRefused(503, "admin_token_not_configured",
                             "this server has no admin token (admin.token in config.yaml is "
                             "missing, empty or CHANGE_ME); the admin API is closed until it is "
                             "set")
    presented = presented_bearer(request.headers.get("Authorization", ""))
    if presented is None:
        raise RequestRefused(401, "admin_token_required",
                             "present the admin token as 'Authorization: Bearer <admin.token>'")
    try:
        right = admin_token_matches(app_state(), presented, request.remote_addr, "admin-api")
    except AttemptRefused as refused:
        code = "too_many_attempts" if refused.status == 429 else "attempts_not_counted"
        raise RequestRefused(refused.status, code, refused.message, refused.headers()) from None
    if not right:
        raise RequestRefused(403, "admin_token_wrong", "the admin token is not this server's")
