"""The fleet page and its actions: approving a box that is not in ``fleet.hosts``, enrolling
a box (its bootstrap token) and releasing a box's binding (docs/box-identity.md)."""

from __future__ import annotations

import time

from flask import Response, flash, redirect, render_template, request, url_for

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import LISTEN_PORTS
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import ApprovalError

from ..boxes.bindings import release_binding
from ..state import app_state
from ..store import StateStore
from .auth import audit, client_address, current_admin
from .enroll_view import DEFAULT_TTL, ENROLL_TTLS, enrollment_offered, token_page
from .fleet_view import CHART_SPAN_S, CHART_WINDOWS, ROLLOUT_COLUMNS, Observed, build_page
from .pool_view import pool_panels

QUERY_LENGTH = 100
BOX_NAME_LENGTH = 253  # a DNS name's limit; addresses and pod ids are far shorter


def observe(store: StateStore, now: float, span_s: float = CHART_SPAN_S) -> Observed:
    """Everything the page shows from the shared store, read once (the load history of the
    last ``span_s``)."""
    last_pass = store.last_pass()
    reports = store.applied_reports()
    return Observed(
        fetch_times=store.fetch_times(),
        applied={box: report.revision for box, report in reports.items()},
        cards={box: report for box, report in reports.items() if report.cards},
        started={box: frozenset((server.name, server.port) for server in report.servers)
                 for box, report in reports.items()},
        verdicts=last_pass.verdicts if last_pass else {},
        drift=last_pass.drift if last_pass else (),
        pass_at=last_pass.pass_at if last_pass else None,
        unknown=store.unknown_boxes(),
        approvals=store.approvals(),
        models=last_pass.models if last_pass else {},
        history=store.load_history(now - span_s, servers=False),
        turns=store.turns(),
        bindings={binding.box: binding for binding in store.bindings_since(0)
                  if binding.bound},
        conflicts=store.binding_conflicts(),
    )


def index() -> Response:
    return redirect(url_for("dashboard.fleet"))


def fleet() -> str:
    state = app_state()
    query = request.args.get("q", "").strip()[:QUERY_LENGTH]
    window = request.args.get("window", "")
    window_s = CHART_WINDOWS.get(window)
    now = time.time()
    page = build_page(state.fleet, observe(state.store, now, window_s or CHART_SPAN_S), now,
                      query, window_s)
    models = [name for name, entry in state.fleet.models.items() if entry.self_hosted]
    return render_template("dashboard/fleet.html", page=page, query=query, models=models,
                           ports=LISTEN_PORTS, admin=current_admin(),
                           enroll_ttls=ENROLL_TTLS, enroll_offered=enrollment_offered(),
                           enroll_default=DEFAULT_TTL,
                           binds_boxes=state.binds_boxes,
                           rollout_columns=ROLLOUT_COLUMNS,
                           chart_windows=CHART_WINDOWS, window=window if window_s else "",
                           fit_hours=int(CHART_SPAN_S // 3600),
                           pools=pool_panels(state.fleet.settings.pools, state.store.pools(),
                                             now))


def approve() -> Response:
    """Approve the picked models, in order, for one box; refusals are shown, not raised. With
    a token lifetime picked, the answer is the box's bootstrap token (:func:`token_page`)."""
    box = request.form.get("box", "").strip()
    models = [name for name in request.form.getlist("model") if name]
    ttl = request.form.get("enroll", "")
    try:
        if len(box) > BOX_NAME_LENGTH:
            raise ApprovalError(f"a box name has at most {BOX_NAME_LENGTH} characters")
        if ttl and ttl not in ENROLL_TTLS:
            raise ApprovalError("pick a token lifetime the form offers")
        assignment = app_state().approve(box, models, current_admin() or "admin", time.time())
    except ApprovalError as refused:
        audit("approve", "refused", box=box[:BOX_NAME_LENGTH], models=models, why=str(refused))
        flash(f"Not approved: {refused}.", "error")
        return redirect(url_for("dashboard.fleet"))
    audit("approve", "ok", box=assignment.box, models=models)
    served = ", ".join(f"{server.model_name} on {server.listen_port}"
                       for server in assignment.servers)
    flash(f"Approved {assignment.box}: {served}. Its next config fetch gets them, until the "
          "server restarts.", "info")
    return token_page(assignment.box, ttl) if ttl else redirect(url_for("dashboard.fleet"))


def enroll() -> Response:
    """Mint a served box's one-time bootstrap token (docs/box-identity.md), shown once."""
    box = request.form.get("box", "").strip()[:BOX_NAME_LENGTH]
    ttl = request.form.get("ttl", "")
    if ttl not in ENROLL_TTLS:
        return enroll_refused(box, "pick a token lifetime the form offers")
    assignment = app_state().served_assignment(box)
    if assignment is None:
        return enroll_refused(box, f"{box} is not served: add it to fleet.hosts or approve it "
                                   "first")
    return token_page(assignment.box, ttl)


def enroll_refused(box: str, why: str) -> Response:
    audit("enroll", "refused", box=box, why=why)
    flash(f"Not enrolled: {why}.", "error")
    return redirect(url_for("dashboard.fleet"))


def release() -> Response:
    """Release a box's binding (docs/box-identity.md): the next box to fetch its name binds it."""
    box = request.form.get("box", "").strip()[:BOX_NAME_LENGTH]
    released = release_binding(app_state(), box, current_admin() or "admin", client_address(),
                               "dashboard")
    if released is None:
        flash(f"{box} was not bound: nothing to release.", "error")
    else:
        flash(f"Released the binding of {box}. The next box to fetch its config binds the "
              "name.", "info")
    return redirect(url_for("dashboard.fleet"))
