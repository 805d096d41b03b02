#!/usr/bin/python
# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module ``llmao.fleet.fleet_verdicts``: record a reconcile pass's verdicts in llmao."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_verdicts
short_description: Record a reconcile pass's verdicts and turn updates in llmao
version_added: 0.1.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - The last step of a reconcile pass. Posts each server's verdict (state, reason, whether LiteLLM
    has its deployment after the pass, the change made, its metrics and load verdicts) with the
    lifecycle memory the next pass needs, plus the drift, each model's load and cost, each box's
    price and the time of the pass, to llmao's admin API
    (C(POST /admin/api/verdicts) at C(server.url), with C(admin.token) as bearer). The dashboard
    shows them; the next pass reads the memory back through M(llmao.fleet.fleet_observe).
  - Then posts the rollout turns the plan moves on (its C(turn_updates)) to
    C(POST /admin/api/turns), after LiteLLM was written, so a box told its turn is drained finds
    its routes gone; each update llmao took is appended to O(audit_log), each it refused (the
    turn moved meanwhile) is a warning.
  - Reports C(changed) when a server's state differs from the one the previous pass recorded,
    or a turn moved on, so a pass in which nothing happened reports no change.
  - In check mode nothing is posted, so a checked pass leaves the lifecycle memory and the
    turns as they were.
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
      - The result of M(llmao.fleet.fleet_plan) for this pass.
    type: dict
    required: true
notes:
  - Run it after the plan's changes were applied, so the recorded LiteLLM presence is true.
"""

EXAMPLES = r"""
- name: Record this pass's verdicts and turn updates
  llmao.fleet.fleet_verdicts:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
    plan: "{{ plan }}"
"""

RETURN = r"""
transitions:
  description: One line per server whose state changed since the previous pass.
  returned: success
  type: list
  elements: str
  sample: ["llmao:203.0.113.10:8001:gemma4-26b: Loading -> Healthy"]
turns:
  description: One line per rollout turn the pass moved on.
  returned: success
  type: list
  elements: str
  sample: ["turn of 203.0.113.10 (rev 3f2a...): drained"]
posted:
  description: Whether the verdicts and turn updates were posted (not in check mode).
  returned: success
  type: bool
"""

import time
from collections.abc import Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmao.fleet.plugins.module_utils.audit_log import (
    AUDIT_LOG_OPTION,
    append_audit,
    audit_path,
)
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import (
    FILES_DIGEST_OPTION,
    TIMEOUT_OPTION,
    load_reconcile_fleet,
    module_args,
    refuse_changed_files,
)
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    LlmaoAdmin,
    LlmaoAdminError,
    verdicts_document,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_turns import TurnUpdate

PLAN_KEYS = ("now", "servers", "memories", "drift")


class VerdictsError(ValueError):
    """The plan given is not fleet_plan's result."""


def pass_document(plan: Mapping[str, Any]) -> dict[str, Any]:
    missing = [key for key in PLAN_KEYS if key not in plan]
    if missing:
        raise VerdictsError(f"plan lacks {', '.join(missing)}: give the result of "
                            "llmao.fleet.fleet_plan")
    return verdicts_document(plan["now"], plan["servers"], plan["memories"], plan["drift"],
                             plan.get("models"), plan.get("boxes"))


def transitions(plan: Mapping[str, Any]) -> list[str]:
    return [f"{server['id']}: {server.get('previous_state') or 'new'} -> {server['state']}"
            for server in plan["servers"] if server.get("previous_state") != server["state"]]


def plan_updates(plan: Mapping[str, Any]) -> list[TurnUpdate]:
    try:
        return [TurnUpdate.from_record(update) for update in plan.get("turn_updates") or []]
    except ValueError as exc:
        raise VerdictsError(f"plan.turn_updates: {exc}") from None


def record_pass(fleet: Fleet, params: Mapping[str, Any], document: dict[str, Any],
                updates: list[TurnUpdate]) -> list[str]:
    """Post the verdicts, then the turn updates, and audit each update llmao took; returns
    why each refused one was (the next pass sees the turn as it is now)."""
    admin = LlmaoAdmin.from_settings(fleet.settings, params["timeout"])
    admin.post_verdicts(document)
    if not updates:
        return []
    refused = admin.post_turn_updates([update.record() for update in updates])
    not_taken = {(item.get("box"), item.get("revision"), item.get("phase")) for item in refused}
    path = audit_path(fleet, params["audit_log"])
    for update in updates:
        if (update.box, update.revision, update.phase.value) not in not_taken:
            append_audit(path, update.audit_entry(time.time()))
    return [f"llmao refused to move the turn of {item.get('box')} to {item.get('phase')}: "
            f"{item.get('why')}" for item in refused]


def main() -> None:
    module = AnsibleModule(**module_args({
        "plan": {"type": "dict", "required": True},
        **TIMEOUT_OPTION,
        **AUDIT_LOG_OPTION,
        **FILES_DIGEST_OPTION,
    }))
    fleet = load_reconcile_fleet(module)
    refuse_changed_files(module, fleet)
    plan = module.params["plan"]
    try:
        document = pass_document(plan)
        updates = plan_updates(plan)
    except VerdictsError as exc:
        module.fail_json(msg=str(exc))
    moved = transitions(plan)
    if not module.check_mode:
        try:
            for warning in record_pass(fleet, module.params, document, updates):
                module.warn(warning)
        except LlmaoAdminError as exc:
            module.fail_json(msg=f"{exc}: the verdicts or turns of this pass were not recorded "
                                 "(the LiteLLM changes before this task are done)")
        except OSError as exc:
            module.fail_json(msg=f"the turns moved on, but the audit log could not be "
                                 f"written: {exc}")
    module.exit_json(changed=bool(moved or updates), transitions=moved,
                     turns=[update.line() for update in updates],
                     posted=not module.check_mode)


if __name__ == "__main__":
    main()
