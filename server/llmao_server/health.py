"""``/healthz``: the process answers. No auth, no state touched, for load balancers."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify(status="ok")
