#!/usr/bin/python
# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module ``llmao.fleet.fleet_plan``: classify every server, decide LiteLLM's changes."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_plan
short_description: Plan a reconcile pass of an llmao fleet
version_added: 0.1.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - "Puts every intended server of the fleet in one lifecycle state (Awaiting, Loading, Stalled,
    Healthy, Unhealthy, Rejected, Foreign, Unlisted, Preempted) from what
    M(llmao.fleet.fleet_observe) read and what M(llmao.fleet.vllm_probe) found, and decides what
    LiteLLM must change: C(register) a Healthy server that has no deployment, C(replace) one whose
    deployment no longer fits (another model, a moved public address), C(delete) the deployment of
    a server in a state that must not serve, and of an llmao deployment that matches no intended
    server."
  - "It also reports drift: LiteLLM routes that match no intended server (llmao's are deleted,
    others are only reported), a deployment with another model than config, a box whose applied
    revision is behind the intended one."
  - "Rolling changes (docs/rolling-changes.md): a server whose box holds a rollout turn and has
    not applied the turn's revision yet is never registered, and its route is deleted while the
    turn drains. Each active turn moves one phase on: C(drained) once none of its servers has a
    route, C(done) once the box applied the revision and every server of the turn is Healthy,
    C(failed) (with why) when after the apply one of them is in a state that must not serve, or
    the turn expired."
  - The rules are llmao's core classifier; this module only runs them. One failed probe below
    C(fleet.health_fail_threshold) deletes nothing, and a listing that could not be read never
    makes a box unlisted.
  - Planning changes nothing, so it reports C(changed=false) and runs the same in check mode.
    M(llmao.fleet.litellm_deployment) applies RV(changes); M(llmao.fleet.fleet_verdicts) records
    the verdicts.
extends_documentation_fragment:
  - llmao.fleet.fleet_files
  - llmao.fleet.controller
  - llmao.fleet.files_digest
  - llmao.fleet.reconcile
options:
  observations:
    description:
      - What M(llmao.fleet.fleet_observe) returned as C(observations).
      - The boxes an admin approved (its C(approved)) and the pools' bound members (its
        C(pool_members)) are intended like those of C(fleet.hosts).
    type: dict
    required: true
  probes:
    description:
      - What M(llmao.fleet.vllm_probe) returned as C(probes). Every intended server must have
        been probed.
    type: dict
    required: true
notes:
  - Its result holds no secret.
"""

EXAMPLES = r"""
- name: Plan the pass
  llmao.fleet.fleet_plan:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
    observations: "{{ observed.observations }}"
    probes: "{{ probed.probes }}"
  register: plan

- name: Show it, one line per server
  ansible.builtin.debug:
    msg: "{{ plan.lines }}"
"""

RETURN = r"""
now:
  description: The time of the pass (llmao's clock), seconds since the epoch.
  returned: success
  type: float
servers:
  description: One entry per intended server, in config order.
  returned: success
  type: list
  elements: dict
  contains:
    id:
      description: The deployment id, C(llmao:<box>:<listen port>:<name>).
      type: str
    state:
      description: The lifecycle state after this pass.
      type: str
    previous_state:
      description: The state the previous pass recorded, or null.
      type: str
    provider:
      description:
        - The provider whose listing names the box, C(local) for a fleet without listings,
          C(unlisted) when no listing names it.
      type: str
    reason:
      description: Why the server is in that state.
      type: str
    in_litellm:
      description: Whether LiteLLM had its deployment before this pass.
      type: bool
    change:
      description: C(register), C(replace), C(delete), or null for none.
      type: str
    why:
      description: Why the change.
      type: str
    outlives_instance:
      description: The C(fleet.hosts) row names a box no provider runs; flag it, never retire it.
      type: bool
    ambiguous:
      description:
        - Why the box name is ambiguous (several listed instances share that address, so none
          is dialled), or null. Key the C(fleet.hosts) row by the instance id.
      type: str
    metrics:
      description: What the server's C(/metrics) said (see C(docs/metrics.md)), or null.
      type: dict
    oversized:
      description:
        - Its served C(max_model_len) (observed, else configured) is larger than its KV cache
          in tokens, so vLLM hangs on a request that needs the space. Null when unknown.
      type: bool
    saturated:
      description:
        - Requests waiting on C(fleet.saturated_passes) passes in a row, or KV cache usage
          above C(fleet.saturated_kv_usage). Null when unknown.
      type: bool
models:
  description:
    - Model name to its load this pass (C(servers), C(healthy), C(capacity), C(kv_cache_tokens),
      C(requests_running), C(requests_waiting), C(oversized), C(saturated),
      C(generation_tokens_per_s), C(cost_per_hour), C(cost_per_million_tokens)); null is unknown.
  returned: success
  type: dict
boxes:
  description: Box to its C(provider), C(cost_per_hour) (or null) and its C(source).
  returned: success
  type: dict
load_lines:
  description:
    - The load as text, one line per oversized server, then one per model (capacity, load,
      cost), saturated models marked.
  returned: success
  type: list
  elements: str
changes:
  description:
    - The LiteLLM changes of this pass (C(state), C(id), C(box), C(listen_port), C(name),
      C(model_name), C(public_host), C(public_port), C(public_scheme), C(change), C(why)).
  returned: success
  type: list
  elements: dict
deployments:
  description:
    - The same changes as the O(llmao.fleet.litellm_deployment#module:deployments) option takes
      them, to apply the whole plan in one task.
  returned: success
  type: list
  elements: dict
drift:
  description:
    - What differs between config and the fleet that this pass does not fix by itself
      (C(kind) is C(orphan_route), C(unmanaged_route), C(model_mismatch), C(revision_behind)
      or C(too_few_cards), a box that reported fewer cards than its assignment needs, or
      that has not reported yet and whose provider listing gives it fewer GPUs, whose
      servers are never registered).
  returned: success
  type: list
  elements: dict
memories:
  description: Server id to the lifecycle memory the next pass needs.
  returned: success
  type: dict
lines:
  description: The plan as text, one line per server and per change to a route of no server.
  returned: success
  type: list
  elements: str
turn_updates:
  description:
    - The rollout turns this pass moves on (C(box), C(revision), C(phase), C(why)), for
      M(llmao.fleet.fleet_verdicts) to post once LiteLLM was written.
  returned: success
  type: list
  elements: dict
rollout_lines:
  description:
    - Per model under way, its boxes waiting, draining, restarting and healthy on the new
      revision, and why its rollout is paused; then one line per turn this pass moves on.
  returned: success
  type: list
  elements: str
drift_lines:
  description: The drift as text, one line each.
  returned: success
  type: list
  elements: str
counts:
  description: How many servers are in each state, and how many changes.
  returned: success
  type: dict
  sample: {"Healthy": 2, "Loading": 1, "changes": 1}
files_digest:
  description:
    - The digest of the fleet files this plan was made from; when C(files_changed) is false, the
      same as O(files_digest) (the steps that apply the plan are given that one).
  returned: success
  type: str
files_changed:
  description:
    - The fleet files differ from those O(files_digest) names, so nothing was planned (no
      server, no change) and C(lines) says so.
  returned: success
  type: bool
"""

from collections import Counter
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import (
    FILES_CHANGED,
    FILES_DIGEST_OPTION,
    files_changed,
    load_reconcile_fleet,
    module_args,
)
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Change, Drift, Probe
from ansible_collections.llmao.fleet.plugins.module_utils.listings import provider_of
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_plan import (
    Plan,
    ServerPlan,
    plan_pass,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import (
    Observations,
    RecordError,
    probes_from_record,
)
from ansible_collections.llmao.fleet.plugins.module_utils.server_load import (
    ModelLoad,
    load_document,
)

DEPLOYMENT_KEYS = ("state", "box", "listen_port", "name", "public_host", "public_port",
                   "public_scheme")


class PlanError(ValueError):
    """The inputs cannot be planned from; the message says which and why."""


def make_plan(fleet: Fleet, observations: Observations, probes: dict[str, Probe]) -> Plan:
    missing = [server.id for server in fleet.servers() if server.id not in probes]
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise PlanError(f"{len(missing)} intended server(s) were not probed ({shown}): "
                        "probe every server of the fleet before planning")
    return plan_pass(fleet, observations, probes)


def apply_item(plan: ServerPlan) -> dict[str, Any]:
    """One change as M(litellm_deployment) takes it (no secret: the bearer is derived there)."""
    endpoint = plan.endpoint
    return {"state": "absent" if plan.change is Change.DELETE else "present", "id": plan.id,
            "box": plan.server.box, "listen_port": plan.server.listen_port,
            "name": plan.server.name, "model_name": plan.server.model_name,
            "public_host": endpoint.host if endpoint else None,
            "public_port": endpoint.port if endpoint else None,
            "public_scheme": endpoint.scheme if endpoint else None,
            "change": plan.change.value if plan.change else None, "why": plan.why}


def deployment_input(change: dict[str, Any]) -> dict[str, Any]:
    """A change as one entry of M(litellm_deployment)'s ``deployments`` option."""
    item = {key: change[key] for key in DEPLOYMENT_KEYS if key in change}
    if "box" not in change:
        item["id"] = change["id"]  # a route of no intended server: only its id is known
    item["reason"] = change["why"]
    return item


def server_line(entry: dict[str, Any]) -> str:
    state = entry["state"]
    if entry["previous_state"] and entry["previous_state"] != state:
        state = f"{entry['previous_state']} -> {state}"
    if entry["change"]:
        outcome = f"{entry['change']}: {entry['why']}"
    else:
        outcome = "unchanged, " + ("in LiteLLM" if entry["in_litellm"] else "not in LiteLLM")
        if entry["why"]:
            outcome += f": {entry['why']}"
    public = entry["public"] or "no public address"
    line = (f"{entry['box']} {entry['name']} ({entry['model_name']}, {entry['listen_port']} -> "
            f"{public}): {state}: {entry['reason']} => {outcome}")
    if entry["outlives_instance"]:
        line += " [the fleet.hosts row may outlive its instance: retire it by hand]"
    if entry["ambiguous"]:
        line += f" [{entry['ambiguous']}]"
    return line


def drift_line(item: dict[str, Any]) -> str:
    kind = item["kind"]
    if kind in (Drift.REVISION_BEHIND, Drift.TOO_FEW_CARDS):
        return f"{item['box']}: {item['what']}"
    if kind == Drift.UNMANAGED_ROUTE:
        return f"{item['id']} ({item['model_name']} at {item['api_base']}): {item['what']}"
    if kind == Drift.ORPHAN_ROUTE:
        return f"{item['id']} ({item['model_name']}): {item['what']}"
    return f"{item['id']}: {item['what']}"


def oversized_line(entry: dict[str, Any]) -> str:
    kv_tokens = entry["metrics"]["kv_cache_tokens"]
    return (f"{entry['box']} {entry['name']} ({entry['model_name']}): OVERSIZED: serves "
            f"max_model_len {entry['context_len']} but its KV cache holds {kv_tokens} tokens, "
            "so vLLM accepts a request that needs the space and then hangs on it; lower "
            f"max_model_len to at most {kv_tokens} in models.yaml, or give the model more "
            "memory (vram_gb: a larger GPU)")


def _shown(value: Any, digits: int = 0) -> str:
    if value is None:
        return "unknown"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def model_line(name: str, load: ModelLoad) -> str:
    """Capacity, load and cost of one model; a saturated one says it needs another box."""
    line = (f"{name}: {load.healthy} of {load.servers} server(s) Healthy, capacity "
            f"{_shown(load.capacity)} full-context request(s) at once, running "
            f"{_shown(load.requests_running)}, waiting {_shown(load.requests_waiting)}, "
            f"generation {_shown(load.generation_tokens_per_s, 1)} tokens/s, cost "
            f"{_shown(load.cost_per_hour, 3)} $/h, "
            f"{_shown(load.cost_per_million_tokens, 3)} $ per million generated tokens")
    if load.oversized:
        line += f"; {load.oversized} server(s) oversized"
    if load.saturated:
        line += ("; SATURATED: requests keep waiting or its KV cache is nearly full, "
                 "it needs another box")
    return line


def plan_result(plan: Plan, observations: Observations) -> dict[str, Any]:
    servers = []
    listings = observations.listings
    for server_plan in plan.servers:
        previous = observations.memories.get(server_plan.id)
        servers.append({**server_plan.summary(), **plan.loads[server_plan.id].record(),
                        "provider": provider_of(listings.configured,
                                                listings.named_by(server_plan.server.box)),
                        "ambiguous": listings.ambiguity(server_plan.server.box),
                        "previous_state": previous.state.value if previous and previous.state
                        else None})
    orphans = [{"state": "absent", "id": route.id, "model_name": route.model_name,
                "change": Change.DELETE.value, "why": "llmao route matches no intended server"}
               for route in plan.orphans]
    changes = [apply_item(p) for p in plan.servers if p.change] + orphans
    lines = [server_line(entry) for entry in servers]
    lines += [f"{item['id']} ({item['model_name']}): delete: {item['why']}" for item in orphans]
    drift = [dict(item) for item in plan.drift]
    counts = Counter(entry["state"] for entry in servers)
    return {
        "changed": False,
        "now": observations.now,
        "servers": servers,
        "changes": changes,
        "deployments": [deployment_input(change) for change in changes],
        "drift": drift,
        "memories": {key: memory.record() for key, memory in plan.memories.items()},
        "lines": lines,
        "drift_lines": [drift_line(item) for item in drift],
        "turn_updates": [update.record() for update in plan.turn_updates],
        "rollout_lines": plan.rollout_lines,
        **load_document(plan.models, plan.boxes),
        "load_lines": [oversized_line(entry) for entry in servers if entry["oversized"]]
        + [model_line(name, load) for name, load in plan.models.items()],
        "counts": {**counts, "changes": len(changes)},
    }


def main() -> None:
    module = AnsibleModule(**module_args({
        "observations": {"type": "dict", "required": True},
        "probes": {"type": "dict", "required": True},
        **FILES_DIGEST_OPTION,
    }))
    try:
        observations = Observations.from_record(module.params["observations"])
    except RecordError as exc:
        module.fail_json(msg=str(exc))
    fleet = load_reconcile_fleet(module, observations.approved, observations.pool_members)
    if files_changed(module, fleet):
        module.exit_json(**{**plan_result(Plan(()), observations), "lines": [FILES_CHANGED]},
                         files_digest=fleet.files_digest, files_changed=True)
    try:
        probes = probes_from_record(module.params["probes"])
        plan = make_plan(fleet, observations, probes)
    except (RecordError, PlanError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**plan_result(plan, observations), files_digest=fleet.files_digest,
                     files_changed=False)


if __name__ == "__main__":
    main()
