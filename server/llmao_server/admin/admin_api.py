"""The admin API reconcile and the push path use: its routes, each a few lines over the
module that holds its job.

``GET /admin/api/observations`` gives what the server observed (:mod:`.observations`);
``POST /admin/api/verdicts`` replaces the stored pass with a new one, checked
(:mod:`.reconcile_pass`), its per model and per box loads included, and adds its load
sample to the history; the dashboard and ``/metrics`` show them.
``POST /admin/api/turns`` moves rollout turns as reconcile sees them progress, and
``POST /admin/api/turns/take`` asks for a box's turn for the push path, by the
same rules as a box's own ``POST /vllm/turn`` (:mod:`..boxes.turns`); the push path reports
what it applied (``POST /admin/api/boxes/<name>/applied``, :mod:`..boxes.applied_report`),
watches one box's turn (``GET /admin/api/boxes/<name>/turn``) and has the box's certificate
request signed under box TLS (``POST /admin/api/boxes/<name>/cert``, :mod:`..boxes.box_certs`) as
the controller, never speaking as the box. ``DELETE /admin/api/boxes/<name>/binding``
releases a box's binding (docs/box-identity.md). ``/admin/api/pass-lease`` keeps one
reconcile pass at a time, fleet-wide (:mod:`.pass_lease`). ``POST /admin/api/pools`` keeps what
a pool pass left (:mod:`.pool_report`).

Every body is read with finite numbers only (:mod:`.json_body`), and every route
needs ``Authorization: Bearer <admin.token>`` (:mod:`.admin_gate`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from typing import Any

from flask import Blueprint, Response, request

from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import normalize_host
from ansible_collections.llmao.fleet.plugins.module_utils.intent import BoxAssignment
from ansible_collections.llmao.fleet.plugins.module_utils.json_values import is_number
from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import BOX_NAME_RE

from ..api_errors import JSON, RequestRefused
from ..boxes.applied_report import read_applied_report
from ..boxes.bindings import (
    MAX_ENROLL_S,
    MIN_ENROLL_S,
    binding_record,
    claim_for_controller,
    enroll_box,
    release_binding,
    reported_instance,
)
from ..boxes.box_certs import CERT_REQUEST_MAX_BYTES, issue_certificate
from ..boxes.turns import apply_updates, ask_turn, read_ask, read_updates
from ..pool_report import read_pools_report
from ..redaction import clipped
from ..state import ServerState, app_state
from .admin_gate import require_admin_token
from .json_body import read_json_body
from .observations import observations
from .pass_lease import lease_answer, read_lease_claim, read_lease_id
from .reconcile_pass import read_pass

bp = Blueprint("admin_api", __name__, url_prefix="/admin/api")
bp.before_request(require_admin_token)

# The reason given for releasing a binding, as the audit line shows it.
MAX_WHY = 200
# An enrollment lasts an hour unless the admin says otherwise.
DEFAULT_ENROLL_S = 3600


def json_answer(document: Any) -> Response:
    return Response(json.dumps(document), 200, mimetype=JSON,
                    headers={"Cache-Control": "no-store"})


@bp.get("/observations")
def read_observations() -> Response:
    return json_answer(observations(app_state(), time.time()))


@bp.post("/verdicts")
def record_verdicts() -> Response:
    record = read_pass(read_json_body(), time.time())
    app_state().store.record_pass(record)
    return json_answer({"recorded": len(record.verdicts), "pass_at": record.pass_at})


# ------------------------------------------------------------------ rollout turns


@bp.post("/turns")
def update_turns() -> Response:
    """Reconcile's progress: ``{"updates": [{"box", "revision", "phase", "why"}]}``. Answers
    every turn after, and the updates refused (a move the turn may not make)."""
    updates = read_updates(read_json_body())
    return json_answer(apply_updates(app_state(), updates, "admin-api", request.remote_addr))


@bp.post("/turns/take")
def take_turn() -> Response:
    """The push path asks for a box's turn: ``{"box", "revision", "servers": [names]}``,
    answered as ``POST /vllm/turn`` answers the box."""
    state = app_state()
    box, revision, names = read_ask(read_json_body(), with_box=True)
    assignment = pushed_box(state, box or "")
    return json_answer(ask_turn(state, assignment.box, assignment.revision, revision, names,
                                "admin-api", request.remote_addr))


# ------------------------------------------------------- the push path, as the controller


def served_box(state: ServerState, name: str) -> BoxAssignment:
    """The assignment of the served box ``name`` names; 404 when none."""
    assignment = state.served_assignment(name)
    if assignment is None:
        raise RequestRefused(404, "unknown_host", f"box {clipped(name)!r} is not served")
    return assignment


def pushed_box(state: ServerState, name: str) -> BoxAssignment:
    """:func:`served_box` for the push path, which acts as the controller: a name no box has
    confirmed becomes the controller's (docs/box-identity.md)."""
    assignment = served_box(state, name)
    claim_for_controller(state, assignment.box, request.remote_addr)
    return assignment


@bp.post("/boxes/<path:name>/applied")
def report_box_applied(name: str) -> Response:
    """The push path reports what it applied on a box, as the controller (never as the box):
    the body of ``POST /vllm/applied``. Its servers restarted, so their Loading window starts
    now, as a pull box's fetch starts it. A revision llmao does not intend is refused (409)."""
    state = app_state()
    assignment = pushed_box(state, name)
    now = time.time()
    report = read_applied_report(read_json_body(), assignment.box, now)
    if report.revision != assignment.revision:
        raise RequestRefused(409, "not_intended",
                             f"llmao serves {assignment.box} revision {assignment.revision}, "
                             f"not {clipped(report.revision)}: reload llmao (SIGHUP) with the "
                             "same config.yaml and models.yaml")
    # Written through, before the record: a pass that reads this revision as applied must
    # also read the Loading window it starts, or a restarting server reads as a Healthy one
    # failing (the recorder would hold the time for up to a flush interval).
    state.store.note_fetches({assignment.box: now})
    state.store.record_applied(report)
    return json_answer({"host": assignment.box, "revision": report.revision,
                        "intended_revision": assignment.revision, "current": True})


@bp.post("/boxes/<path:name>/cert")
def sign_box_certificate(name: str) -> Response:
    """The push path has a box's certificate request signed, as the controller: the box made
    its key and the request (``{"csr": PEM}``), and the answer is ``POST /vllm/cert``'s. The
    same rules hold (the box's attributed addresses only, the allowed keys, the size, the
    box's hourly budget); the audit line names the admin API as the caller."""
    state = app_state()
    assignment = pushed_box(state, name)
    body = read_json_body(CERT_REQUEST_MAX_BYTES)
    return Response(issue_certificate(state, assignment.box, request.remote_addr, body,
                                      "admin-api"),
                    200, mimetype=JSON, headers={"Cache-Control": "no-store"})


@bp.get("/boxes/<path:name>/turn")
def read_box_turn(name: str) -> Response:
    """One box's latest rollout turn (null without one), and the revision llmao intends."""
    state = app_state()
    assignment = served_box(state, name)
    turn = next((turn for turn in state.store.turns() if turn.box == assignment.box), None)
    return json_answer({"box": assignment.box, "revision": assignment.revision,
                        "turn": turn.record() if turn else None})


# ------------------------------------------------------------------ box bindings


@bp.delete("/boxes/<path:name>/binding")
def release_box_binding(name: str) -> Response:
    """Release a box's binding (docs/box-identity.md). ``?why=`` says why in the audit line
    (reconcile names the listing it read); ``?next_instance=`` names the provider instance
    that alone may bind the name next (the one a listing now gives it)."""
    state = app_state()
    assignment = state.served_assignment(name)
    box = assignment.box if assignment is not None else normalize_host(name)
    why = clipped(request.args.get("why", "admin"), MAX_WHY)
    next_instance = request.args.get("next_instance")
    if next_instance is not None and reported_instance(next_instance) is None:
        raise RequestRefused(400, "bad_instance", "next_instance must be a provider instance "
                                                  "id: printable ASCII, at most 128 characters")
    released = release_binding(state, box, "admin-api", request.remote_addr, why,
                               next_instance)
    return json_answer({"box": box, "released": released is not None,
                        "binding": binding_record(released) if released else None})


@bp.post("/boxes/<path:name>/enroll")
def enroll(name: str) -> Response:
    """Mint a one-time bootstrap token for a box: ``{"ttl_s": 3600, "pool": "<pool>"}`` (pool
    optional) answers ``{"box", "bootstrap_token", "expires_at", "pool"}``. The name must be
    served (``fleet.hosts`` or approved), or join the pool named."""
    state = app_state()
    ttl_s, pool = read_enrollment(state, read_json_body())
    assignment = state.served_assignment(name)
    if assignment is None and pool is None:
        raise RequestRefused(404, "unknown_host",
                             f"box {clipped(name)!r} is not served: add it to fleet.hosts or "
                             "approve it first, or name the pool it joins")
    box = assignment.box if assignment is not None else enrolled_name(name)
    token, expires_at = enroll_box(state, box, ttl_s, pool, "admin-api", request.remote_addr)
    return json_answer({"box": box, "bootstrap_token": token,
                        "expires_at": iso_time(expires_at), "pool": pool})


def read_enrollment(state: ServerState, doc: Any) -> tuple[float, str | None]:
    """``ttl_s`` (a minute to thirty days) and the optional ``pool`` of an enroll body."""
    if not isinstance(doc, dict) or not set(doc) <= {"ttl_s", "pool"}:
        raise RequestRefused(400, "bad_enrollment", 'send {"ttl_s": seconds, "pool": name}, '
                                                    "pool optional")
    ttl_s = doc.get("ttl_s", DEFAULT_ENROLL_S)
    if not is_number(ttl_s) or not MIN_ENROLL_S <= ttl_s <= MAX_ENROLL_S:
        raise RequestRefused(400, "bad_enrollment", f"ttl_s must be a number of seconds from "
                                                    f"{MIN_ENROLL_S} to {MAX_ENROLL_S}")
    pool = doc.get("pool")
    if pool is not None and pool not in configured_pools(state):
        raise RequestRefused(400, "unknown_pool", f"pool {clipped(str(pool))!r} is not in "
                                                  "config.yaml's pools")
    return float(ttl_s), pool


def enrolled_name(name: str) -> str:
    """A name an enrollment makes a box of: normalised, and one a box can have."""
    box = normalize_host(name)
    if not BOX_NAME_RE.match(box):
        raise RequestRefused(400, "bad_box_name", "a box name is printable ASCII, at most 253 "
                                                  "characters")
    return box


def configured_pools(state: ServerState) -> Collection[str]:
    """The pools config.yaml names (none before pools are configured)."""
    return getattr(state.fleet.settings, "pools", None) or {}


def iso_time(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


# ------------------------------------------------------------------ pools


@bp.post("/pools")
def record_pools() -> Response:
    """What a pool pass left (docs/pools.md): each pool's boxes, bounds, spend and the
    budget, and its decisions with why, for ``/metrics`` and the dashboard. A report not
    newer than the last one kept (a post sent twice) is answered and counts nothing."""
    state = app_state()
    report = read_pools_report(read_json_body(), configured_pools(state), time.time(),
                               state.redact)
    return json_answer({"recorded": state.store.record_pools(report),
                        "pools": len(report.states)})


# ------------------------------------------------ the fleet-wide reconcile pass lease


@bp.get("/pass-lease")
def read_pass_lease() -> Response:
    """Who holds the pass lease now, if anyone (what a checked pass reports)."""
    now = time.time()
    return json_answer(lease_answer(app_state().store.pass_lease(now), None, now))


@bp.post("/pass-lease")
def claim_pass_lease() -> Response:
    """Take or renew the lease: ``{"lease_id", "holder", "ttl_s"}``. The answer says whether
    it is this pass's now and, when it is not, who holds it and until when."""
    lease_id, holder, ttl_s = read_lease_claim(read_json_body())
    now = time.time()
    lease = app_state().store.claim_pass_lease(lease_id, holder, now, ttl_s)
    return json_answer(lease_answer(lease, lease_id, now))


@bp.post("/pass-lease/release")
def release_pass_lease() -> Response:
    """Give the lease back at the end of a pass: ``{"lease_id"}``; another pass's is left."""
    doc = read_json_body()
    lease_id = read_lease_id(doc.get("lease_id") if isinstance(doc, dict) else None)
    return json_answer({"released": app_state().store.release_pass_lease(lease_id)})
