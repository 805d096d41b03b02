# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One reconcile pass as data: every server's verdict, the LiteLLM changes, the drift.

Pure: the observations (fetch times, memories, listings, probes, LiteLLM's
routes) come in, the plan goes out. The playbook prints it, ``--check`` stops
at it, and the modules apply it. Nothing here talks to the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .fleet import Fleet
from .fleet_load import (
    BoxCost,
    ModelLoad,
    ServerLoad,
    box_cost,
    cost_share,
    model_load,
    remember_load,
    server_load,
)
from .intent import IntendedServer
from .lifecycle import Action, Memory, Probe, State, Verdict, classify
from .listings import Endpoint, Listings
from .litellm_routes import Route, deployment_id, route_differs
from .probe import Target

REGISTER, REPLACE, DELETE = "register", "replace", "delete"


@dataclass(frozen=True)
class ServerPlan:
    """One intended server in this pass: where it is, what it is, what happens to its route."""

    server: IntendedServer
    endpoint: Endpoint | None
    verdict: Verdict
    route: Route | None
    change: str | None = None
    why: str = ""

    @property
    def id(self) -> str:
        return deployment_id(self.server.box, self.server.listen_port, self.server.name)

    def summary(self) -> dict[str, Any]:
        """The pass as the plan, the dashboard and the audit log show it (no secret)."""
        return {
            "id": self.id, "box": self.server.box, "name": self.server.name,
            "model_name": self.server.model_name, "listen_port": self.server.listen_port,
            "public": f"{self.endpoint.host}:{self.endpoint.port}" if self.endpoint else None,
            "state": self.verdict.state.value, "reason": self.verdict.reason,
            "in_litellm": self.route is not None, "change": self.change, "why": self.why,
            "outlives_instance": self.verdict.outlives_instance,
        }


@dataclass(frozen=True)
class Plan:
    servers: tuple[ServerPlan, ...]
    orphans: tuple[Route, ...] = ()
    drift: tuple[dict[str, Any], ...] = ()
    memories: Mapping[str, Memory] = field(default_factory=dict)
    loads: Mapping[str, ServerLoad] = field(default_factory=dict)
    models: Mapping[str, ModelLoad] = field(default_factory=dict)
    boxes: Mapping[str, BoxCost] = field(default_factory=dict)

    def changes(self) -> list[dict[str, Any]]:
        """Every change to LiteLLM, servers first, then llmao routes that match nothing."""
        listed = [p.summary() for p in self.servers if p.change]
        listed += [{"id": r.id, "model_name": r.model_name, "change": DELETE,
                    "why": "llmao route matches no intended server"} for r in self.orphans]
        return listed


def server_key(server: IntendedServer) -> str:
    return deployment_id(server.box, server.listen_port, server.name)


def probe_targets(fleet: Fleet, listings: Listings) -> list[Target]:
    """What to probe: every intended server at its public address, with its bearer."""
    return [Target(server_key(s), listings.endpoint(s.box, s.listen_port, s.seed_public_port),
                   s.served_model_name, s.api_key) for s in fleet.servers()]


def memory_from(record: Mapping[str, Any] | None) -> Memory:
    """A stored memory (as :func:`memory_record` wrote it) back into the classifier's type."""
    if not record:
        return Memory()
    state = record.get("state")
    return Memory(State(state) if state in State._value2member_map_ else None,
                  int(record.get("consecutive_failures") or 0),
                  int(record.get("rejected_passes") or 0), record.get("last_healthy_at"),
                  int(record.get("waiting_passes") or 0),
                  _count(record.get("generation_tokens_total")),
                  _count(record.get("generation_counted_at")))


def _count(value: Any) -> Any:
    """A number the load remembers, or None: a stored value of another type is forgotten."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def memory_record(memory: Memory) -> dict[str, Any]:
    record = asdict(memory)
    record["state"] = memory.state.value if memory.state else None
    return record


def plan_pass(fleet: Fleet, now: float, last_fetches: Mapping[str, float | None],
              memories: Mapping[str, Memory], listings: Listings, probes: Mapping[str, Probe],
              routes: list[Route], applied: Mapping[str, str | None]) -> Plan:
    """Classify every server and decide each LiteLLM change; report what drifted."""
    by_id = {route.id: route for route in routes}
    plans = []
    for server in fleet.servers():
        key = server_key(server)
        endpoint = listings.endpoint(server.box, server.listen_port, server.seed_public_port)
        verdict = classify(now, last_fetches.get(server.box), probes[key],
                           listings.listed(server.box), memories.get(key, Memory()),
                           fleet.settings.lifecycle)
        plans.append(_decide(server, endpoint, verdict, by_id.get(key)))
    intended = {p.id for p in plans}
    owned_orphans = tuple(r for r in routes if r.owned and r.id not in intended)
    drift = _drift(fleet, plans, routes, intended, applied)
    boxes = {box: box_cost(listings.provider_of(box), None, fleet.settings.cost_per_hour.get(box))
             for box in fleet.assignments}
    loads, remembered = _loads(fleet, plans, probes, memories, boxes)
    return Plan(tuple(plans), owned_orphans, tuple(drift), remembered, loads,
                _model_loads(plans, loads), boxes)


def _loads(fleet: Fleet, plans: list[ServerPlan], probes: Mapping[str, Probe],
           memories: Mapping[str, Memory], boxes: Mapping[str, BoxCost],
           ) -> tuple[dict[str, ServerLoad], dict[str, Memory]]:
    """Each server's load from its scrape, and its memory with what the next pass needs."""
    loads, remembered = {}, {}
    for plan in plans:
        previous = memories.get(plan.id, Memory())
        share = cost_share(boxes[plan.server.box],
                           len(fleet.assignments[plan.server.box].servers))
        load = server_load(probes[plan.id].metrics,
                           plan.server.entry.vllm.numbers.get("max_model_len"),
                           plan.verdict.state is State.HEALTHY, previous, share,
                           fleet.settings.load)
        loads[plan.id] = load
        remembered[plan.id] = remember_load(plan.verdict.memory, previous, load)
    return loads, remembered


def _model_loads(plans: list[ServerPlan], loads: Mapping[str, ServerLoad],
                 ) -> dict[str, ModelLoad]:
    by_model: dict[str, list[tuple[ServerLoad, bool]]] = {}
    for plan in plans:
        by_model.setdefault(plan.server.model_name, []).append(
            (loads[plan.id], plan.verdict.state is State.HEALTHY))
    return {name: model_load(pairs) for name, pairs in by_model.items()}


def _decide(server: IntendedServer, endpoint: Endpoint | None, verdict: Verdict,
            route: Route | None) -> ServerPlan:
    if verdict.action is Action.ENSURE and verdict.state is State.HEALTHY and endpoint:
        if route is None:
            return ServerPlan(server, endpoint, verdict, route, REGISTER, "Healthy, not in LiteLLM")
        differs = route_differs(route, server, endpoint)
        if differs:
            return ServerPlan(server, endpoint, verdict, route, REPLACE, differs)
        return ServerPlan(server, endpoint, verdict, route)
    if verdict.action is Action.DELETE and route is not None:
        return ServerPlan(server, endpoint, verdict, route, DELETE,
                          f"{verdict.state.value}: {verdict.reason}")
    return ServerPlan(server, endpoint, verdict, route)


def _drift(fleet: Fleet, plans: list[ServerPlan], routes: list[Route], intended: set[str],
           applied: Mapping[str, str | None]) -> list[dict[str, Any]]:
    drift: list[dict[str, Any]] = []
    for route in routes:
        if route.id in intended:
            continue
        entry = fleet.models.get(route.model_name)
        if route.owned:
            drift.append({"kind": "orphan_route", "id": route.id, "model_name": route.model_name,
                          "what": "llmao route in LiteLLM for a server no longer in config"})
        elif entry is None or entry.self_hosted:
            drift.append({"kind": "unmanaged_route", "id": route.id,
                          "model_name": route.model_name, "api_base": route.api_base,
                          "what": "route in LiteLLM that matches no intended server "
                                  "(not llmao's: left alone)"})
    for plan in plans:
        if plan.route is not None and plan.route.model_name != plan.server.model_name:
            drift.append({"kind": "model_mismatch", "id": plan.id,
                          "what": route_differs(plan.route, plan.server, plan.endpoint)
                          if plan.endpoint else "model differs"})
    for box, assignment in fleet.assignments.items():
        revision = applied.get(box)
        if revision and revision != assignment.revision:
            drift.append({"kind": "revision_behind", "box": box, "applied": revision,
                          "intended": assignment.revision,
                          "what": f"applied rev {revision}, intended rev {assignment.revision}"})
    return drift
