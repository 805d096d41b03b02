"""The admin API reconcile uses: read what the server observed, keep the last pass's verdicts.

``GET /admin/api/observations`` gives, for every box in ``fleet.hosts`` or
approved by an admin, the time of its last config fetch and the revision it
reports it applied; the approvals in force (box to model names in port order,
which reconcile adds to the fleet it loads), the
previous reconcile pass's verdicts (which carry the lifecycle memory the next
pass needs) and the server's clock, so that reconcile measures ages against
the clock the fetch times were taken with. ``POST /admin/api/verdicts`` replaces
the stored pass with a new one, its per model and per box loads included, and
adds its load sample to the history; the dashboard and ``/metrics`` show them.
The observations carry every box's latest rollout turn (``turns``);
``POST /admin/api/turns`` moves turns as reconcile sees them progress, and
``POST /admin/api/turns/take`` asks for a box's turn for the push path, by the
same rules as a box's own ``POST /vllm/turn`` (:mod:`.turns`); the push path reports
what it applied (``POST /admin/api/boxes/<name>/applied``) and watches one box's turn
(``GET /admin/api/boxes/<name>/turn``) as the controller, never speaking as the box.
``DELETE /admin/api/boxes/<name>/binding`` releases a box's binding
(docs/box-identity.md).
``/admin/api/pass-lease`` keeps one reconcile pass at a time, fleet-wide: a
pass takes (``POST``), renews and releases an expiring lease in the store; any
other pass is told who holds it (``GET`` reads it without taking it).
Its numbers are checked before anything is kept: JSON's ``NaN`` and ``Infinity`` and overflowing
literals are refused, ``pass_at`` must be near the server's clock (reconcile
takes it from ``now`` in the observations), and each verdict's memory, which
the next pass reads back, must hold the types that pass expects.

Both need ``Authorization: Bearer <admin.token>``, compared in constant time
after the attempt is counted against the admin credentials' one limit
(:mod:`.admin_attempts`, shared with the dashboard's login): 429 over it, 503
when the store cannot count. No admin token configured: 503 whatever the
request carries, as the box API does for the fleet key.
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any, NoReturn

from flask import Blueprint, Response, request

from ansible_collections.llmao.fleet.plugins.module_utils.bearer import is_placeholder
from ansible_collections.llmao.fleet.plugins.module_utils.fleet_load import read_load_document
from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import normalize_host
from ansible_collections.llmao.fleet.plugins.module_utils.intent import BoxAssignment
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import State
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    observations_document,
)
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import (
    MetricsRecordError,
)

from .admin_attempts import AttemptRefused, admin_token_matches
from .api_errors import JSON, RequestRefused
from .applied_report import read_applied_report
from .bearer_header import presented_bearer
from .bindings import binding_record, release_binding
from .redaction import clipped
from .state import ServerState, app_state, approvals_in_force
from .store import AppliedReport, PassLease, ReconcilePass
from .turns import apply_updates, ask_turn, read_ask, read_updates

bp = Blueprint("admin_api", __name__, url_prefix="/admin/api")

VERDICTS_MAX_BYTES = 16 * 2**20
MAX_VERDICTS = 30_000
MAX_DRIFT = 10_000
MAX_ID = 300
STATES = frozenset(state.value for state in State)
# A pass is posted when it ends; it began at the ``now`` it read. A slow pass over a large
# fleet (every LiteLLM call timing out) still ends within hours; another instance's clock
# may run a little ahead.
PASS_MAX_AGE_S = 6 * 3600
CLOCK_SKEW_S = 300
MEMORY_COUNTERS = ("consecutive_failures", "rejected_passes")
MAX_COUNTER = 10**9
# A pass lease lasts this long unless renewed; the holder is a hostname and pid.
PASS_LEASE_MIN_S = 1
PASS_LEASE_MAX_S = 3600
LEASE_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
MAX_HOLDER = 200
# The reason given for releasing a binding, as the audit line shows it.
MAX_WHY = 200


@bp.before_request
def require_admin_token() -> None:
    """503 without a configured token, 401 without a bearer, 403 with the wrong one;
    429 or 503 from the attempt limit before the token is compared."""
    token = app_state().fleet.settings.admin_token
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


def json_answer(document: Any) -> Response:
    return Response(json.dumps(document), 200, mimetype=JSON,
                    headers={"Cache-Control": "no-store"})


@bp.get("/observations")
def observations() -> Response:
    state = app_state()
    fetches = state.store.fetch_times()
    reports = state.store.applied_reports()
    approvals = state.store.approvals()
    approved = approvals_in_force(state.fleet, approvals)
    served = [*state.fleet.assignments, *approved]
    last = state.store.last_pass()
    document = observations_document(
        time.time(),
        {box: fetches.get(box) for box in served},
        {box: applied_record(report) for box, report in reports.items()},
        approved,
        last.verdicts if last else {},
        last.drift if last else (),
        last.pass_at if last else None,
        state.store.turns(),
        {binding.box: binding_record(binding)
         for binding in state.store.bindings_since(0) if binding.bound},
    )
    return json_answer(document)


def applied_record(report: AppliedReport) -> dict[str, Any]:
    """A box's last report for reconcile; ``cards`` (how many it has) only when it said."""
    record: dict[str, Any] = {"revision": report.revision, "applied_at": report.applied_at,
                              "reported_at": report.reported_at}
    if report.cards:
        record["cards"] = len(report.cards)
    return record


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
    assignment = state.served_assignment(box or "")
    if assignment is None:
        raise RequestRefused(404, "unknown_host", f"box {clipped(box or '')!r} is not served")
    return json_answer(ask_turn(state, assignment.box, assignment.revision, revision, names,
                                "admin-api", request.remote_addr))


# ------------------------------------------------------- the push path, as the controller


def served_box(state: ServerState, name: str) -> BoxAssignment:
    """The assignment of the served box ``name`` names; 404 when none."""
    assignment = state.served_assignment(name)
    if assignment is None:
        raise RequestRefused(404, "unknown_host", f"box {clipped(name)!r} is not served")
    return assignment


@bp.post("/boxes/<path:name>/applied")
def report_box_applied(name: str) -> Response:
    """The push path reports what it applied on a box, as the controller (never as the box):
    the body of ``POST /vllm/applied``. Its servers restarted, so their Loading window starts
    now, as a pull box's fetch starts it. A revision llmao does not intend is refused (409)."""
    state = app_state()
    assignment = served_box(state, name)
    now = time.time()
    report = read_applied_report(read_json_body(), assignment.box, now)
    if report.revision != assignment.revision:
        raise RequestRefused(409, "not_intended",
                             f"llmao serves {assignment.box} revision {assignment.revision}, "
                             f"not {clipped(report.revision)}: reload llmao (SIGHUP) with the "
                             "same config.yaml and models.yaml")
    state.note_fetch(assignment.box, now)
    state.store.record_applied(report)
    return json_answer({"host": assignment.box, "revision": report.revision,
                        "intended_revision": assignment.revision, "current": True})


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
    """Release a box's binding (docs/box-identity.md): the next box to fetch the name binds
    it. ``?why=`` says why in the audit line (reconcile names the listing it read)."""
    state = app_state()
    assignment = state.served_assignment(name)
    box = assignment.box if assignment is not None else normalize_host(name)
    why = clipped(request.args.get("why", "admin"), MAX_WHY)
    released = release_binding(state, box, "admin-api", request.remote_addr, why)
    return json_answer({"box": box, "released": released is not None,
                        "binding": binding_record(released) if released else None})


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


def read_lease_claim(doc: Any) -> tuple[str, str, float]:
    if not isinstance(doc, dict):
        bad_lease("the body must be a JSON object with lease_id, holder and ttl_s")
    lease_id, holder, ttl_s = read_lease_id(doc.get("lease_id")), doc.get("holder"), \
        doc.get("ttl_s")
    if not isinstance(holder, str) or not 0 < len(holder) <= MAX_HOLDER \
            or not holder.isprintable():
        bad_lease(f"holder must be 1 to {MAX_HOLDER} printable characters (hostname and pid)")
    if not is_number(ttl_s) or not PASS_LEASE_MIN_S <= ttl_s <= PASS_LEASE_MAX_S:
        bad_lease(f"ttl_s must be from {PASS_LEASE_MIN_S} to {PASS_LEASE_MAX_S} seconds")
    return lease_id, holder, float(ttl_s)


def read_lease_id(lease_id: Any) -> str:
    if not isinstance(lease_id, str) or not LEASE_ID.fullmatch(lease_id):
        bad_lease("lease_id must be 16 to 64 letters, digits, '-' or '_'")
    return lease_id


def lease_answer(lease: PassLease | None, lease_id: str | None, now: float) -> dict[str, Any]:
    """The lease as the admin API shows it: never its id, which only its pass knows."""
    return {"now": now, "granted": lease is not None and lease.lease_id == lease_id,
            "holder": lease.holder if lease else None,
            "taken_at": lease.taken_at if lease else None,
            "expires_at": lease.expires_at if lease else None}


def bad_lease(message: str) -> NoReturn:
    raise RequestRefused(400, "bad_lease", message)


def read_json_body() -> Any:
    if request.content_length is not None and request.content_length > VERDICTS_MAX_BYTES:
        raise RequestRefused(413, "too_large", f"the body is over {VERDICTS_MAX_BYTES} bytes")
    data = request.stream.read(VERDICTS_MAX_BYTES + 1)
    if len(data) > VERDICTS_MAX_BYTES:
        raise RequestRefused(413, "too_large", f"the body is over {VERDICTS_MAX_BYTES} bytes")
    try:
        return json.loads(data, parse_constant=refuse_constant, parse_float=finite_float)
    except NotFinite as exc:
        bad(f"numbers must be finite, not {exc}")
    except ValueError:
        bad("the body must be JSON (Content-Type: application/json)")


class NotFinite(ValueError):
    """A JSON number that is not a finite float: ``NaN``, ``Infinity``, ``1e999``."""


def refuse_constant(name: str) -> NoReturn:
    raise NotFinite(name)


def finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotFinite(text[:40])
    return value


def read_pass(doc: Any, now: float) -> ReconcilePass:
    """A pass as reconcile posts it: ``{"pass_at", "verdicts": {id: {...}}, "drift": [...]}``."""
    if not isinstance(doc, dict):
        bad("the body must be a JSON object with pass_at, verdicts and drift")
    pass_at = doc.get("pass_at")
    if not is_number(pass_at):
        bad("pass_at must be a time in seconds since the epoch")
    if not now - PASS_MAX_AGE_S <= pass_at <= now + CLOCK_SKEW_S:
        bad(f"pass_at must be within {PASS_MAX_AGE_S} s before and {CLOCK_SKEW_S} s after "
            f"the server's clock ({now:.0f}); reconcile takes it from the observations' now")
    verdicts = doc.get("verdicts")
    if not isinstance(verdicts, dict) or len(verdicts) > MAX_VERDICTS:
        bad(f"verdicts must be an object of at most {MAX_VERDICTS} server ids")
    drift = doc.get("drift")
    if not isinstance(drift, list) or len(drift) > MAX_DRIFT:
        bad(f"drift must be a list of at most {MAX_DRIFT} items")
    for key, verdict in verdicts.items():
        check_verdict(key, verdict, now)
    if not all(isinstance(item, dict) for item in drift):
        bad("every drift item must be an object")
    models, boxes = doc.get("models", {}), doc.get("boxes", {})
    for part, value in (("models", models), ("boxes", boxes)):
        if not isinstance(value, dict) or len(value) > MAX_VERDICTS:
            bad(f"{part} must be an object of at most {MAX_VERDICTS} names")
    try:
        read_load_document(doc)
    except MetricsRecordError as exc:
        bad(f"the pass's loads (docs/metrics.md): {exc}")
    return ReconcilePass(float(pass_at), verdicts, drift, now, models, boxes)


def is_number(value: Any) -> bool:
    """A finite int or float (JSON's true and false are not numbers)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def check_verdict(key: str, verdict: Any, now: float) -> None:
    where = f"verdicts[{key[:MAX_ID]!r}]"
    if not key or len(key) > MAX_ID:
        bad(f"a server id must be 1 to {MAX_ID} characters")
    if not isinstance(verdict, dict):
        bad(f"{where} must be an object")
    if verdict.get("state") not in STATES:
        bad(f"{where}.state must be one of {', '.join(sorted(STATES))}")
    memory = verdict.get("memory", {})
    if not isinstance(memory, dict):
        bad(f"{where}.memory must be an object")
    check_memory(memory, f"{where}.memory", now)


def check_memory(memory: dict, where: str, now: float) -> None:
    """What the next pass reads back into its classifier: counters, a state, a past time."""
    if memory.get("state") not in (None, *STATES):
        bad(f"{where}.state must be empty or one of {', '.join(sorted(STATES))}")
    for counter in MEMORY_COUNTERS:
        value = memory.get(counter)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool)
                                      and 0 <= value <= MAX_COUNTER):
            bad(f"{where}.{counter} must be an integer from 0 to {MAX_COUNTER}")
    healthy_at = memory.get("last_healthy_at")
    if healthy_at is not None and not (is_number(healthy_at)
                                       and 0 <= healthy_at <= now + CLOCK_SKEW_S):
        bad(f"{where}.last_healthy_at must be a past time in seconds since the epoch")


def bad(message: str) -> NoReturn:
    raise RequestRefused(400, "bad_verdicts", message)
