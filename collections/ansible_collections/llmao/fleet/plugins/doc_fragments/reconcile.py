# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The chain of modules a reconcile pass runs, described once for each of them."""

from __future__ import annotations


class ModuleDocFragment:
    """``llmao.fleet.reconcile``: where a module stands in ``playbooks/reconcile.yml``.

    Every step reads both fleet files, so this also marks the options of
    ``llmao.fleet.fleet_files`` required, as ``llmao.fleet.fleet_files.required`` does
    for a plugin outside the chain.
    """

    DOCUMENTATION = r"""
options:
  config:
    required: true
  models:
    required: true
notes:
  - "One step of a reconcile pass (C(playbooks/reconcile.yml)), whose steps are:
    M(llmao.fleet.fleet_observe) reads what llmao, the listings and LiteLLM know,
    M(llmao.fleet.vllm_probe) probes the servers, M(llmao.fleet.fleet_plan) classifies them and
    decides LiteLLM's changes, M(llmao.fleet.litellm_deployment) applies the changes, and
    M(llmao.fleet.fleet_verdicts) records the verdicts in llmao."
"""
