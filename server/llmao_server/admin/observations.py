"""What ``GET /admin/api/observations`` answers: the server's view a reconcile pass reads.

For every box in ``fleet.hosts`` or approved by an admin: the time of its last
config fetch and the report of what it applied; the approvals in force (box to
model names in port order, which reconcile adds to the fleet it loads); the
previous pass's verdicts (which carry the lifecycle memory the next pass
needs); every box's latest rollout turn and each bound box's binding; and the
server's clock, so that reconcile measures ages against the clock the fetch
times were taken with. The core writes the document
(:func:`llmao_admin.observations_document`) beside the reader reconcile uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    BoxLeaves,
    observations_document,
)

from ..boxes.bindings import binding_record
from ..state import ServerState, approvals_in_force
from ..store import AppliedReport, IssuedLeaf


def observations(state: ServerState, now: float) -> dict[str, Any]:
    """The observations at ``now``, read from the shared store."""
    fetches = state.store.fetch_times()
    reports = state.store.applied_reports()
    approved = approvals_in_force(state.fleet, state.store.approvals())
    bound = [binding for binding in state.store.bindings_since(0) if binding.bound]
    # A pool member is served too (its fetch times tell reconcile Loading from Stalled).
    members = [binding.box for binding in bound if binding.pool in state.fleet.settings.pools
               and binding.box not in state.fleet.assignments]
    served = [*state.fleet.assignments, *approved, *members]
    last = state.store.last_pass()
    return observations_document(
        now,
        {box: fetches.get(box) for box in served},
        {box: applied_record(report) for box, report in reports.items()},
        approved,
        last.verdicts if last else {},
        last.drift if last else (),
        last.pass_at if last else None,
        state.store.turns(),
        {binding.box: binding_record(binding) for binding in bound},
        box_leaves(state.store.issued_leaves(now)),
    )


def box_leaves(leaves: Iterable[IssuedLeaf]) -> dict[str, BoxLeaves]:
    """Box to the leaves llmao issued it: one to its current binding (not revoked), and the
    serials a release revoked."""
    issued: dict[str, bool] = {}
    revoked: dict[str, set[int]] = {}
    for leaf in leaves:
        issued[leaf.box] = issued.get(leaf.box, False) or not leaf.revoked
        if leaf.revoked:
            revoked.setdefault(leaf.box, set()).add(int(leaf.serial))
    return {box: BoxLeaves(issued[box], frozenset(revoked.get(box, ()))) for box in issued}


def applied_record(report: AppliedReport) -> dict[str, Any]:
    """A box's last report for reconcile; ``cards`` (how many it has) only when it said."""
    record: dict[str, Any] = {"revision": report.revision, "applied_at": report.applied_at,
                              "reported_at": report.reported_at}
    if report.cards:
        record["cards"] = len(report.cards)
    return record
