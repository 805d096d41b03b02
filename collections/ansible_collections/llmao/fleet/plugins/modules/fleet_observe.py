#!/usr/bin/python
# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module ``llmao.fleet.fleet_observe``: what a reconcile pass knows before it probes."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_observe
short_description: Read what llmao, the provider listings and LiteLLM say about the fleet
version_added: 0.1.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - The first step of a reconcile pass (C(playbooks/reconcile.yml)). Reads, in one call,
    everything the pass needs besides the probes, and returns it as O(ignore:observations) for
    M(llmao.fleet.vllm_probe) and M(llmao.fleet.fleet_plan).
  - "From llmao's admin API (C(server.url), with C(admin.token) as bearer): the time of each
    box's last config fetch, the revision each box reports it applied, the boxes an admin
    approved on the dashboard (in memory only, so they come from there), the boxes bound as
    members of a pool, and the previous pass's verdicts, which carry the lifecycle memory
    (consecutive failures, rejected passes)."
  - From every provider listing C(config.yaml) configures (Vast, RunPod, the local container
    engine), where each box publishes its listen ports. A listing that cannot be read is
    reported in RV(listing_failures) and never taken as empty, so no box looks unlisted because
    of it. A 429 or 5xx is tried again (at most 4 calls, waiting as long as the provider asks,
    20 s at most in all). One entry that cannot be read costs that entry only (the task warns,
    naming it), and the box it names is neither listed nor unlisted (a bad price costs only the
    price).
  - From LiteLLM (C(litellm.url), with C(litellm.master_key)), every deployment as
    C(/model/info) shows it, without any key.
  - LiteLLM or llmao unreachable, or refusing its credential, fails the task before anything is
    changed, and the message says so.
  - "It only reads, with one exception: a box name bound to the box that first fetched it
    (C(fleet.binding), docs/box-identity.md) whose provider listing now names another instance
    than the one it bound with (Vast C(CONTAINER_ID), RunPod C(RUNPOD_POD_ID)) is released
    (C(DELETE /admin/api/boxes/<name>/binding)), so that the replacement can bind; the task then
    reports C(changed=true) and warns naming each. In check mode it only says so."
extends_documentation_fragment:
  - llmao.fleet.fleet_files
  - llmao.fleet.controller
  - llmao.fleet.reconcile
options:
  timeout:
    description:
      - Seconds to wait for each answer from llmao, LiteLLM and the provider listings.
    type: float
    default: 15
notes:
  - The credentials it uses come from O(config) and never appear in its result.
"""

EXAMPLES = r"""
- name: Observe the fleet
  llmao.fleet.fleet_observe:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
  register: observed

- name: Say which listings could not be read
  ansible.builtin.debug:
    var: observed.listing_failures
"""

RETURN = r"""
observations:
  description:
    - Everything the pass observed, in the form M(llmao.fleet.vllm_probe) (its C(listings)) and
      M(llmao.fleet.fleet_plan) take back. No secret.
  returned: success
  type: dict
  contains:
    now:
      description: llmao's clock at the time of reading (seconds since the epoch).
      type: float
    last_fetches:
      description: Box name to the time of its last config fetch, or null.
      type: dict
    applied:
      description: Box name to the revision it reports it applied, or null.
      type: dict
    memories:
      description: Server id to the lifecycle memory the previous pass left.
      type: dict
    listings:
      description:
        - The provider listings as read (configured, failed, listed boxes with their ports,
          price, status and interruptibility, and the entries read only in part).
      type: dict
    routes:
      description: Every LiteLLM deployment as C(id), C(model_name), C(api_base), C(public_base).
      type: list
      elements: dict
    approved:
      description:
        - The approvals in force in llmao, box to model names in port order, for the
          C(approved) option of M(llmao.fleet.vllm_probe) and M(llmao.fleet.litellm_deployment).
      type: dict
    pool_members:
      description:
        - The boxes llmao bound as members of a pool (box to pool, C(docs/pools.md)), for the
          C(pool_members) option of M(llmao.fleet.vllm_probe) and
          M(llmao.fleet.litellm_deployment); their servers are the pool's rows, probed at the
          address the pool's provider listing gives the instance.
      type: dict
    turns:
      description:
        - The rollout turns llmao holds, the latest per box (C(box), C(revision), C(servers),
          C(phase), C(granted_at), C(expires_at), C(drained_at), C(ended_at), C(why)).
      type: list
      elements: dict
listing_failures:
  description: Provider to the reason its listing could not be read.
  returned: success
  type: dict
  sample: {"vast": "GET https://console.vast.ai/api/v1/instances/: HTTP 502"}
listing_warnings:
  description: One line per listing entry read only in part, naming it and what it cost.
  returned: success
  type: list
  elements: str
  sample: ["runpod: pods[3] (runpod abcd1234): 'cheap' is not a price per hour: its price is
    unknown"]
ambiguous_addresses:
  description:
    - Each address that several listed instances share, to the instances (C(vast 4242)). A
      C(fleet.hosts) key that is such an address names no single box; the task warns, and the
      row is never dialled until it is keyed by the instance id.
  returned: success
  type: dict
  sample: {"203.0.113.50": ["vast 4242", "vast 4343"]}
released_bindings:
  description:
    - Each binding released (would be, in check mode) because a listing names its box as
      another instance, with C(box), C(bound_instance) and C(listed) (C(vast 4242)).
  returned: success
  type: list
  elements: dict
counts:
  description: How many boxes, deployments and listed boxes were seen.
  returned: success
  type: dict
  sample: {"boxes": 3, "routes": 4, "listed_boxes": 3}
files_digest:
  description:
    - A digest of C(config.yaml) and C(models.yaml) as read for this pass (nothing of a secret
      can be learnt from it). The later steps take it as their C(files_digest), so that a pass
      whose files are saved anew while it runs acts on neither version.
  returned: success
  type: str
  sample: 3f9a1c0e5b7d2a64
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmao.fleet.plugins.module_utils.binding_rules import (
    ReplacedBinding,
    replaced_bindings,
)
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import (
    TIMEOUT_OPTION,
    load_reconcile_fleet,
    module_args,
)
from ansible_collections.llmao.fleet.plugins.module_utils.listings import read_listings
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import (
    LiteLLM,
    LiteLLMError,
)
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    LlmaoAdmin,
    LlmaoAdminError,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import Observations

NOTHING_CHANGED = "nothing was changed"


class ObserveError(RuntimeError):
    """The pass cannot start; the message ends by saying nothing was changed."""


def observe(fleet: Fleet, timeout: float) -> tuple[Observations, list[ReplacedBinding]]:
    """llmao's records, LiteLLM's routes and the listings, read once for this pass; and the
    bindings a listing says belong to a replaced box."""
    try:
        llmao = LlmaoAdmin.from_settings(fleet.settings, timeout).observations()
        routes = LiteLLM.from_settings(fleet.settings, timeout).routes()
    except (LlmaoAdminError, LiteLLMError) as exc:
        raise ObserveError(f"{exc}: {NOTHING_CHANGED}") from None
    listings = read_listings(fleet.settings.providers, timeout)
    return (Observations(llmao.now, llmao.last_fetches, llmao.applied, llmao.memories,
                         listings, tuple(routes), llmao.approved, llmao.turns, llmao.cards,
                         llmao.leaves, llmao.pool_members),
            replaced_bindings(llmao.bindings, listings))


def release_replaced(module: AnsibleModule, fleet: Fleet,
                     replaced: list[ReplacedBinding]) -> list[ReplacedBinding]:
    """Release each replaced box's binding (not in check mode); the ones released, or that
    would be. One that cannot be released is a warning: the pass goes on."""
    released = []
    admin = LlmaoAdmin.from_settings(fleet.settings, module.params["timeout"])
    for binding in replaced:
        try:
            if not module.check_mode:
                admin.release_binding(binding.box, binding.why, binding.listed_instance)
        except LlmaoAdminError as exc:
            module.warn(f"could not release the binding of {binding.box} ({binding.why}): "
                        f"{exc}")
            continue
        verb = "would release" if module.check_mode else "released"
        module.warn(f"{verb} the binding of {binding.box}: {binding.why}; only the box of "
                    f"instance {binding.listed_instance} may bind the name next")
        released.append(binding)
    return released


def observe_result(observations: Observations) -> dict[str, Any]:
    record = observations.record()
    return {
        "changed": False,
        "observations": record,
        "listing_failures": record["listings"]["failed"],
        "listing_warnings": observations.listings.warnings,
        "ambiguous_addresses": {name: [box.label for box in sharing] for name, sharing
                                in observations.listings.ambiguous.items()},
        "counts": {"boxes": len(observations.last_fetches), "routes": len(observations.routes),
                   "listed_boxes": len(record["listings"]["boxes"])},
    }


def main() -> None:
    module = AnsibleModule(**module_args(TIMEOUT_OPTION))
    fleet = load_reconcile_fleet(module)
    try:
        observations, replaced = observe(fleet, module.params["timeout"])
    except ObserveError as exc:
        module.fail_json(msg=str(exc))
    released = release_replaced(module, fleet, replaced) if replaced else []
    result = observe_result(observations)
    result["released_bindings"] = [binding.record() for binding in released]
    result["files_digest"] = fleet.files_digest
    result["changed"] = bool(released) and not module.check_mode
    for provider, reason in result["listing_failures"].items():
        module.warn(f"the {provider} listing could not be read ({reason}); its boxes are "
                    "neither listed nor unlisted this pass")
    for warning in result["listing_warnings"]:
        module.warn(warning)
    for box in fleet.settings.fleet.hosts:
        ambiguity = observations.listings.ambiguity(box)
        if ambiguity:
            module.warn(f"fleet.hosts: {ambiguity}; its servers are not dialled")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
