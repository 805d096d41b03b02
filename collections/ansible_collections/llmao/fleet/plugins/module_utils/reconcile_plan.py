# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One reconcile pass as data: every server's verdict, the LiteLLM changes, the drift.

Pure: the observations (fetch times, memories, listings, LiteLLM's routes,
rollout turns) and the probes come in, the plan goes out. The playbook prints it, ``--check`` stops
at it, and the modules apply it. Nothing here talks to the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .box_tls import box_context
from .fleet import Fleet
from .intent import IntendedServer
from .lifecycle import (
    Action,
    Change,
    Drift,
    Memory,
    Models,
    Probe,
    State,
    Verdict,
    classify,
    routed_after,
)
from .listings import Endpoint, Listings, provider_of
from .litellm_routes import Route, route_differs
from .llmao_admin import BoxLeaves
from .probe import Target
from .reconcile_records import Observations
from .reconcile_turns import TurnUpdate, holding_turns, turn_updates
from .rollout import Phase, Turn
from .rollout_status import ModelRollout, rollout_rows
from .server_load import (
    BoxCost,
    ModelLoad,
    ServerLoad,
    box_cost,
    cost_share,
    model_load,
    remember_latency,
    remember_load,
    seen_latency,
    server_load,
    with_latency,
)
from .vllm_latency import Scrapes


@dataclass(frozen=True)
class ServerPlan:
    """One intended server in this pass: where it is, what it is, what happens to its route."""

    server: IntendedServer
    endpoint: Endpoint | None
    verdict: Verdict
    route: Route | None
    change: Change | None = None
    why: str = ""
    # Under box TLS, when the certificate the box served this pass expires.
    cert_not_after: float | None = None
    # Under box TLS, the box answered in plain HTTP: an attention item and an alert.
    plain_http: bool = False

    @property
    def id(self) -> str:
        return self.server.id

    def summary(self) -> dict[str, Any]:
        """The pass as the plan, the dashboard and the audit log show it (no secret)."""
        return {
            "id": self.id, "box": self.server.box, "name": self.server.name,
            "model_name": self.server.model_name, "listen_port": self.server.listen_port,
            "public": self.endpoint.address if self.endpoint else None,
            "state": self.verdict.state.value, "reason": self.verdict.reason,
            "in_litellm": self.route is not None,
            "change": self.change.value if self.change else None, "why": self.why,
            "outlives_instance": self.verdict.outlives_instance,
            **({} if self.cert_not_after is None else {"cert_not_after": self.cert_not_after}),
            **({"plain_http": True} if self.plain_http else {}),
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
    turn_updates: tuple[TurnUpdate, ...] = ()
    rollout: tuple[ModelRollout, ...] = ()

    @property
    def rollout_lines(self) -> list[str]:
        """Per model under way where its boxes stand, then each turn this pass moves on."""
        return [row.line() for row in self.rollout] + [u.line() for u in self.turn_updates]


# The attention item a plain HTTP verdict under box TLS carries (dashboard, alert, plan line).
PLAIN_UNDER_TLS = "plain HTTP under box TLS"


def plain_allowed(leaves: BoxLeaves | None, memory: Memory) -> bool:
    """Whether a box's plain HTTP answer may still be taken, under box TLS: only from a box
    llmao never issued a certificate to (nor to an earlier binding of its name) and never
    verified one from. Anything else that answers in plain HTTP is a downgrade, whatever
    revision the box says it applied (its claims are not trusted, SPEC §17).
    ``leaves`` None: llmao did not say what it issued, so nothing is allowed."""
    if leaves is None or leaves.issued or leaves.revoked:
        return False
    return not memory.tls_seen


def probe_targets(fleet: Fleet, listings: Listings,
                  leaves: Mapping[str, BoxLeaves] | None = None,
                  memories: Mapping[str, Memory] | None = None,
                  ca_path: str | None = None) -> list[Target]:
    """What to probe: every intended server at its public address, with its bearer.

    Under box TLS, over HTTPS verified against the fleet CA (``ca_path``, else
    ``box_tls.ca_cert``, and ``box_tls.previous_ca_cert`` while the CA is rotated), falling
    back to plain HTTP only where :func:`plain_allowed` says so (docs/box-tls.md). Without
    ``leaves`` (what llmao issued each box) nothing falls back.
    """
    tls = fleet.settings.box_tls
    context = box_context(*tls.trusted(ca_path)) if tls is not None else None
    memories = memories or {}
    targets = []
    for s in fleet.servers():
        allowed = context is not None and plain_allowed(
            None if leaves is None else leaves.get(s.box, BoxLeaves()),
            memories.get(s.id, Memory()))
        targets.append(Target(
            s.id, dialled(fleet, listings.endpoint(s.box, s.listen_port, s.seed_public_port)),
            s.served_model_name, s.api_key, context, allowed))
    return targets


def dialled(fleet: Fleet, endpoint: Endpoint | None, plain_http: bool = False) -> Endpoint | None:
    """The endpoint as it is dialled and routed: HTTPS under box TLS, unless the box
    answered plain HTTP while it was allowed to (an https route still never moves to it:
    :func:`_decide`)."""
    if endpoint is None or fleet.settings.box_tls is None or plain_http:
        return endpoint
    return replace(endpoint, scheme="https")


def plan_pass(fleet: Fleet, observations: Observations, probes: Mapping[str, Probe]) -> Plan:
    """Classify every server and decide each LiteLLM change; report what drifted."""
    listings, routes = observations.listings, observations.routes
    by_id = {route.id: route for route in routes}
    held = holding_turns(observations.turns, observations.applied)
    short = {box: why for box, assignment in fleet.assignments.items()
             if (why := assignment.short_of_cards(observations.cards.get(box),
                                                  listings.gpus(box)))}
    tls = fleet.settings.box_tls
    trust = tls.litellm_trust() if tls is not None else None
    plans = []
    for server in fleet.servers():
        key = server.id
        endpoint = dialled(fleet, listings.endpoint(server.box, server.listen_port,
                                                    server.seed_public_port),
                           probes[key].plain_http)
        verdict = _classify(fleet, observations, server.box, key, probes[key])
        if server.box in short:
            plan = _short_of_cards(server, endpoint, verdict, by_id.get(key), short[server.box])
        else:
            plan = _decide(server, endpoint, verdict, by_id.get(key), held.get(key), trust)
        plans.append(replace(plan, cert_not_after=probes[key].cert_not_after,
                             plain_http=probes[key].plain_http))
    intended = {p.id for p in plans}
    owned_orphans = tuple(r for r in routes if r.owned and r.id not in intended)
    drift = _drift(fleet, plans, routes, intended, observations.applied)
    drift += [{"kind": Drift.TOO_FEW_CARDS.value, "box": box,
               "needs": fleet.assignments[box].cards_needed,
               "cards": observations.cards.get(box, listings.gpus(box)),
               "what": f"too few cards: {why}"} for box, why in short.items()]
    boxes = {box: _box_cost(fleet, listings, box) for box in fleet.assignments}
    loads, remembered = _loads(fleet, plans, probes, observations.memories, boxes)
    updates = turn_updates(observations.turns, observations.applied,
                           {p.id: p.verdict for p in plans},
                           _routed_after(plans, routes, owned_orphans), observations.now)
    states = {p.id: p.verdict.state.value for p in plans}
    return Plan(tuple(plans), owned_orphans, tuple(drift), remembered, loads,
                _model_loads(plans, loads, observations.memories, probes), boxes, updates,
                rollout_rows(fleet, _after(observations.turns, updates), observations.applied,
                             states))


def _classify(fleet: Fleet, observations: Observations, box: str, key: str,
              probe: Probe) -> Verdict:
    """The server's verdict: a revoked certificate is not ours, a plain answer under box
    TLS is flagged, and a verified certificate is remembered (no plain HTTP after it)."""
    memory = observations.memories.get(key, Memory())
    leaves = (observations.leaves or {}).get(box)
    if probe.cert_serial is not None and leaves is not None and probe.cert_serial in leaves.revoked:
        probe = Probe(probe.health_ok, Models.REJECTED,
                      f"a certificate of a released binding (serial {probe.cert_serial:x})")
    verdict = classify(observations.now, observations.last_fetches.get(box), probe,
                       observations.listings.listed(box), memory, fleet.settings.fleet.lifecycle)
    if probe.plain_http:
        verdict = replace(verdict, reason=f"{PLAIN_UNDER_TLS}: {verdict.reason}")
    seen = memory.tls_seen or (probe.tls_verified and probe.models is not Models.REJECTED)
    return replace(verdict, memory=replace(verdict.memory, tls_seen=seen))


def _routed_after(plans: list[ServerPlan], routes: tuple[Route, ...],
                  orphans: tuple[Route, ...]) -> set[str]:
    """The route ids LiteLLM holds once this pass's changes are made."""
    routed = {route.id for route in routes} - {route.id for route in orphans}
    return (routed - {plan.id for plan in plans}) | {
        plan.id for plan in plans if routed_after(plan.id in routed, plan.change)}


def _after(turns: tuple[Turn, ...], updates: tuple[TurnUpdate, ...]) -> list[Turn]:
    """The turns as this pass leaves them, so the rollout lines say where things now stand."""
    moved = {(u.box, u.revision): u for u in updates}
    return [replace(turn, phase=moved[turn.box, turn.revision].phase,
                    why=moved[turn.box, turn.revision].why)
            if (turn.box, turn.revision) in moved else turn for turn in turns]


def _box_cost(fleet: Fleet, listings: Listings, box: str) -> BoxCost:
    listed = listings.box(box)
    return box_cost(provider_of(listings.configured, listings.named_by(box)),
                    listed.price_per_hour if listed else None,
                    fleet.settings.fleet.cost_per_hour.get(box))


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
                           fleet.settings.fleet.load)
        loads[plan.id] = with_latency(load, _scrapes(previous, probes[plan.id]))
        remembered[plan.id] = remember_latency(
            remember_load(plan.verdict.memory, previous, load), previous,
            probes[plan.id].latency)
    return loads, remembered


def _scrapes(previous: Memory, probe: Probe) -> Scrapes:
    """The previous pass's latency histograms and this pass's, of one server."""
    return seen_latency(previous), probe.latency


def _model_loads(plans: list[ServerPlan], loads: Mapping[str, ServerLoad],
                 memories: Mapping[str, Memory], probes: Mapping[str, Probe],
                 ) -> dict[str, ModelLoad]:
    by_model: dict[str, list[tuple[ServerLoad, bool]]] = {}
    scrapes: dict[str, list[Scrapes]] = {}
    for plan in plans:
        healthy = plan.verdict.state is State.HEALTHY
        by_model.setdefault(plan.server.model_name, []).append((loads[plan.id], healthy))
        if healthy:
            scrapes.setdefault(plan.server.model_name, []).append(
                _scrapes(memories.get(plan.id, Memory()), probes[plan.id]))
    return {name: model_load(pairs, scrapes.get(name, ())) for name, pairs in by_model.items()}


def _decide(server: IntendedServer, endpoint: Endpoint | None, verdict: Verdict,
            route: Route | None, turn: Turn | None = None,
            trust: str | None = None) -> ServerPlan:
    if turn is not None:
        return _held(server, endpoint, verdict, route, turn)
    if verdict.action is Action.ENSURE and verdict.state is State.HEALTHY and endpoint:
        if route is None and not verdict.answered_healthy:
            # Kept Healthy through a failed probe, which keeps a route; it earns a new one
            # only by answering (a restarted server that never served must not be routed).
            return ServerPlan(server, endpoint, verdict, route,
                              why="Healthy, not in LiteLLM: registered once it answers")
        if route is None:
            return ServerPlan(server, endpoint, verdict, route, Change.REGISTER,
                              "Healthy, not in LiteLLM")
        if _downgrade(route, endpoint):
            return ServerPlan(server, endpoint, verdict, route,
                              why=f"{PLAIN_UNDER_TLS}: its https route is kept, never moved "
                                  "to http")
        differs = route_differs(route, server, endpoint, trust)
        if differs and not verdict.answered_healthy:
            # Nothing answered at ``endpoint`` this pass: under box TLS it is the https one
            # even for a box still on plain HTTP, so the route stays as it is until it answers.
            return ServerPlan(server, endpoint, verdict, route,
                              why=f"{differs}: replaced once it answers")
        if differs:
            return ServerPlan(server, endpoint, verdict, route, Change.REPLACE, differs)
        return ServerPlan(server, endpoint, verdict, route)
    if verdict.action is Action.DELETE and route is not None:
        return ServerPlan(server, endpoint, verdict, route, Change.DELETE,
                          f"{verdict.state.value}: {verdict.reason}")
    return ServerPlan(server, endpoint, verdict, route)


def _downgrade(route: Route, endpoint: Endpoint) -> bool:
    """Whether registering ``endpoint`` would move an https route to http: never done."""
    return (endpoint.scheme != "https" and route.api_base is not None
            and route.api_base.startswith("https://"))


def _short_of_cards(server: IntendedServer, endpoint: Endpoint | None, verdict: Verdict,
                    route: Route | None, why: str) -> ServerPlan:
    """A server of a box with too few cards for its assignment: never registered (the box
    refuses the assignment, so what answers there is not what we intend); a route goes."""
    if route is not None:
        return ServerPlan(server, endpoint, verdict, route, Change.DELETE, f"too few cards: {why}")
    return ServerPlan(server, endpoint, verdict, route, why=f"too few cards: {why}")


def _held(server: IntendedServer, endpoint: Endpoint | None, verdict: Verdict,
          route: Route | None, turn: Turn) -> ServerPlan:
    """A server whose box has its turn and has not applied the turn's revision: never
    registered (it may restart any moment); its route goes while the turn drains."""
    if route is not None:
        drained = "draining" if turn.phase is Phase.DRAINING else "drained"
        return ServerPlan(server, endpoint, verdict, route, Change.DELETE,
                          f"rollout: {drained} for rev {turn.revision}")
    return ServerPlan(server, endpoint, verdict, route)


def _drift(fleet: Fleet, plans: list[ServerPlan], routes: tuple[Route, ...], intended: set[str],
           applied: Mapping[str, str | None]) -> list[dict[str, Any]]:
    drift: list[dict[str, Any]] = []
    for route in routes:
        if route.id in intended:
            continue
        entry = fleet.models.get(route.model_name)
        if route.owned:
            drift.append({"kind": Drift.ORPHAN_ROUTE.value, "id": route.id,
                          "model_name": route.model_name,
                          "what": "llmao route in LiteLLM for a server no longer in config"})
        elif entry is None or entry.self_hosted:
            drift.append({"kind": Drift.UNMANAGED_ROUTE.value, "id": route.id,
                          "model_name": route.model_name, "api_base": route.api_base,
                          "what": "route in LiteLLM that matches no intended server "
                                  "(not llmao's: left alone)"})
    for plan in plans:
        if plan.route is not None and plan.route.model_name != plan.server.model_name:
            drift.append({"kind": Drift.MODEL_MISMATCH.value, "id": plan.id,
                          "what": route_differs(plan.route, plan.server, plan.endpoint)
                          if plan.endpoint else "model differs"})
    for box, assignment in fleet.assignments.items():
        revision = applied.get(box)
        if revision and revision != assignment.revision:
            drift.append({"kind": Drift.REVISION_BEHIND.value, "box": box, "applied": revision,
                          "intended": assignment.revision,
                          "what": f"applied rev {revision}, intended rev {assignment.revision}"})
    return drift
