#!/usr/bin/python
# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module ``llmao.fleet.box_pool``: rent, replace and return the boxes of llmao's pools."""

from __future__ import annotations

DOCUMENTATION = r"""
module: box_pool
short_description: Rent, replace and return the boxes of llmao's pools, within the budget
version_added: 0.2.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - Keeps each of C(config.yaml)'s C(pools) sized by load and within C(budget). It rents a box
    while a pool is below C(boxes.min) or its models are saturated for C(scale_up_passes)
    passes, replaces a box its provider stopped (exited, interrupted) or whose servers are
    Stalled, drains a box of a pool idle for C(idle_s) and returns it after C(rollout.drain_s),
    and refuses any rent that would take the spend past C(budget.max_usd_per_hour)
    (U(docs/pools.md)).
  - Reads the pools' provider listings itself, and only ever counts, drains or returns an
    instance carrying the label llmao gave it (C(llmao-pool:<pool>/<box>)); a pool whose
    listing cannot be read does nothing.
  - A rent names the box, has llmao mint a one-time bootstrap token for it as a member of the
    pool (C(POST /admin/api/boxes/<box>/enroll)) and creates the instance (Vast
    C(PUT /api/v0/asks/{offer_id}/), RunPod C(POST /v2/pods)) from the cheapest fitting offer
    with the token, C(fleet.key) and C(server.url) in its environment. A drain, a return or a
    box that left the listing releases the binding and deletes the box's LiteLLM routes; a
    return then destroys the instance.
  - Once it acted, it tells llmao-server each pool's boxes, bounds and spend and this pass's
    decisions with why (C(POST /admin/api/pools)), which C(/metrics) counts and the dashboard
    shows; when llmao cannot be told, the pass warns and stands.
  - A create that timed out is remembered and found by its label on the next listing, never
    made twice; a provider's 429 is waited out as it asks; any provider error fails that one
    rent, which is audited and counted.
  - With no C(pools) in C(config.yaml) it does nothing and reports no change.
  - In check mode the offers are searched and every rent and return is shown with its offer
    and price, and nothing is created, released or destroyed.
extends_documentation_fragment:
  - llmao.fleet.fleet_files
  - llmao.fleet.controller
  - llmao.fleet.files_digest
  - llmao.fleet.llmao_timeout
  - llmao.fleet.reconcile
  - llmao.fleet.audit_log
options:
  plan:
    description:
      - The result of M(llmao.fleet.fleet_plan) for this pass; its servers' states, requests
        running and saturated flags size the pools. Without it no pool grows or shrinks by load
        (rents to C(boxes.min) and replacements still happen).
    type: dict
  state_file:
    description:
      - The pools' memory between passes (saturated passes, idle since, rents not listed yet,
        drains under way). Default C(llmao-pools.json) beside C(config.yaml).
    type: path
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - Run it after M(llmao.fleet.fleet_plan), with the same C(files_digest).
  - The provider keys, C(fleet.key), the admin token and every bootstrap token are read or
    minted inside the module and never appear in its result, its diff or the audit log.
"""

EXAMPLES = r"""
- name: Size the pools by this pass's load
  llmao.fleet.box_pool:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
    plan: "{{ plan }}"
  when: pools_configured
"""

RETURN = r"""
decisions:
  description: Each pool's decisions this pass, with the offer of each rent.
  returned: success
  type: list
  elements: dict
  sample:
    - pool: chat-4090
      kind: rent
      reason: saturated for 3 passes
      box: null
      instance_id: null
      offer:
        provider: vast
        id: "4242"
        gpu: RTX 4090
        gpus: 1
        usd_per_hour: 0.41
        cloud: null
        bid: false
lines:
  description: One line per decision and per change made.
  returned: success
  type: list
  elements: str
spend:
  description: Each pool's spend in USD per hour once the decisions are carried out.
  returned: success
  type: dict
counts:
  description: Per pool, the rents, returns and failed rents this pass made.
  returned: success
  type: dict
"""

import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmao.fleet.plugins.module_utils.audit_log import (
    AUDIT_LOG_OPTION,
    append_audit,
    audit_path,
    stamped,
)
from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import (
    FILES_DIGEST_OPTION,
    TIMEOUT_OPTION,
    load_reconcile_fleet,
    module_args,
    refuse_changed_files,
)
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    LlmaoAdmin,
    LlmaoAdminError,
)
from ansible_collections.llmao.fleet.plugins.module_utils.pool_apply import (
    Hands,
    apply_pass,
    load_memory,
    observe,
    plan_pass,
    save_memory,
    state_path,
)
from ansible_collections.llmao.fleet.plugins.module_utils.pool_plan import CHANGES
from ansible_collections.llmao.fleet.plugins.module_utils.pool_report import pool_report


def pool_diff(done: Any) -> dict[str, Any]:
    """Each pool's boxes before and after: rents and returns with their offers and prices."""
    before, after = {}, {}
    for name, view in done.views.items():
        boxes = sorted(member.box for member in view.members)
        before[name] = {"boxes": boxes, "spend": round(sum(
            member.price or 0.0 for member in view.members), 4)}
        changes = [decision.record() for decision in done.plan.decisions
                   if decision.pool == name and decision.kind in CHANGES]
        after[name] = {"boxes": boxes, "changes": changes,
                       "spend": round(done.plan.spend[name], 4)}
    return {"before": before, "after": after}


def main() -> None:
    module = AnsibleModule(**module_args({
        "plan": {"type": "dict"},
        "state_file": {"type": "path"},
        **TIMEOUT_OPTION,
        **AUDIT_LOG_OPTION,
        **FILES_DIGEST_OPTION,
    }))
    fleet = load_reconcile_fleet(module)
    if not fleet.settings.pools:
        module.exit_json(changed=False, decisions=[], lines=[], spend={}, counts={})
    refuse_changed_files(module, fleet)
    timeout, path = module.params["timeout"], state_path(fleet, module.params["state_file"])
    done = observe(fleet, module.params["plan"] or {}, load_memory(path, fleet.settings.pools),
                   timeout)
    plan = plan_pass(done, timeout)
    changing = [d for d in plan.decisions if d.kind in CHANGES]
    result: dict[str, Any] = {"decisions": [d.record() for d in plan.decisions],
                              "spend": dict(plan.spend)}
    if module._diff:
        result["diff"] = pool_diff(done)
    if module.check_mode:
        module.exit_json(changed=bool(changing), counts={},
                         lines=[f"{d.pool}: would {d.kind} {d.box or ''}: {d.reason}"
                                for d in plan.decisions], **result)
    audit_file = audit_path(fleet, module.params["audit_log"])
    admin = LlmaoAdmin.from_settings(fleet.settings, timeout)
    entries: list[dict[str, Any]] = []

    def audit(entry: dict[str, Any]) -> None:
        entries.append(stamped(entry, time.time()))
        append_audit(audit_file, entries[-1])

    memory = apply_pass(done, Hands(fleet, admin, LiteLLM.from_settings(fleet.settings, timeout),
                                    timeout, audit))
    try:
        save_memory(path, memory)
    except OSError as exc:
        module.fail_json(msg=f"the pools acted, but their memory could not be written to "
                             f"{path}: {exc}", lines=done.lines)
    try:
        admin.report_pools(pool_report(done, memory, entries, time.time()))
    except LlmaoAdminError as exc:  # the pass acted and is audited; only the dashboard lags
        module.warn(f"the pools acted, but llmao-server was not told (its /metrics and "
                    f"dashboard show the pass before): {exc}")
    module.exit_json(changed=bool(changing), lines=done.lines, counts=done.counts, **result)


if __name__ == "__main__":
    main()
