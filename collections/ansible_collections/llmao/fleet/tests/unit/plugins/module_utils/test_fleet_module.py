"""A module's shared options; loading the fleet in a reconcile module: approved boxes and pool
members join it, their bearers are censored."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from ansible.module_utils.common.yaml import yaml_load

from ansible_collections.llmao.fleet.plugins.doc_fragments import approved_boxes, llmao_timeout
from ansible_collections.llmao.fleet.plugins.module_utils.bearer import derive_vllm_api_key
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import (
    TIMEOUT_OPTION,
    files_changed,
    load_reconcile_fleet,
    module_args,
    refuse_changed_files,
)
from ansible_collections.llmao.fleet.plugins.module_utils.pool_config import box_name
from ansible_collections.llmao.fleet.tests.unit.fleets import SALT, pooled, write_pair

APPROVED = "192.0.2.77"


@dataclass
class ModuleDouble:
    """The three things ``load_reconcile_fleet`` uses of an AnsibleModule."""

    params: dict[str, Any]
    no_log_values: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def module_for(tmp_path, **params) -> ModuleDouble:
    config, models = write_pair(tmp_path)
    return ModuleDouble({"config": config, "models": models, **params})


def test_the_approved_option_adds_the_box_and_censors_its_bearers(tmp_path):
    module = module_for(tmp_path, approved={APPROVED: ["qwen", "gemma"]})
    fleet = load_reconcile_fleet(module)
    assert [s.listen_port for s in fleet.assignment(APPROVED).servers] == [8001, 8002]
    assert {derive_vllm_api_key(SALT, APPROVED, port) for port in (8001, 8002)} \
        <= module.no_log_values
    assert module.warnings == []


def test_approvals_given_by_the_caller_win_over_the_option(tmp_path):
    module = module_for(tmp_path, approved={APPROVED: ["qwen"]})
    fleet = load_reconcile_fleet(module, {"192.0.2.78": ["gemma"]})
    assert fleet.assignment(APPROVED) is None
    assert fleet.assignment("192.0.2.78") is not None


def test_a_refused_approval_is_a_warning_and_the_rest_loads(tmp_path):
    module = module_for(tmp_path)
    fleet = load_reconcile_fleet(module, {APPROVED: ["nope"]})
    assert fleet.assignment(APPROVED) is None
    assert module.warnings == [f"approval of {APPROVED} ignored: 'nope' is not in models.yaml"]
    assert derive_vllm_api_key(SALT, "203.0.113.10", 8001) in module.no_log_values


def test_pool_members_join_the_fleet_with_their_pools_rows_and_censored_bearers(tmp_path):
    config, models = write_pair(tmp_path, pooled())
    member = box_name("chat", "a1b2c3d4")
    module = ModuleDouble({"config": config, "models": models,
                           "pool_members": {member: "chat", "chat-zzzzzzzz": "gone"}})
    fleet = load_reconcile_fleet(module)
    assert [(s.listen_port, s.name) for s in fleet.assignment(member).servers] == [
        (8001, "gemma"), (8002, "qwen")]
    assert {derive_vllm_api_key(SALT, member, port) for port in (8001, 8002)} \
        <= module.no_log_values
    assert module.warnings == ["pool member chat-zzzzzzzz ignored: pool 'gone' is not in "
                               "config.yaml"]
    given = load_reconcile_fleet(module, pool_members={})  # the caller's word wins
    assert given.assignment(member) is None


def test_without_pool_members_or_approvals_the_fleet_is_config_yamls(tmp_path):
    module = module_for(tmp_path, approved=None, pool_members=None)
    fleet = load_reconcile_fleet(module)
    loaded = load_fleet(module.params["config"], module.params["models"])
    assert dict(fleet.assignments) == dict(loaded.assignments)
    assert fleet.warnings == loaded.warnings and module.warnings == []


def test_the_servers_options_are_what_their_fragment_documents():
    documented = yaml_load(approved_boxes.ModuleDocFragment.DOCUMENTATION)["options"]
    spec = module_args({}, approved=True)["argument_spec"]
    assert {name: spec[name]["type"] for name in documented} == {
        name: option["type"] for name, option in documented.items()}


def test_the_timeout_option_is_what_its_fragment_documents():
    documented = yaml_load(llmao_timeout.ModuleDocFragment.DOCUMENTATION)["options"]["timeout"]
    spec = module_args(TIMEOUT_OPTION)["argument_spec"]["timeout"]
    assert (spec["type"], spec["default"]) == (documented["type"], documented["default"])


class Failed(Exception):
    """What the double's ``fail_json`` raises (Ansible's exits the module)."""


def test_a_step_given_the_pass_digest_knows_when_the_files_changed_since(tmp_path):
    observed = load_reconcile_fleet(module_for(tmp_path))
    same = module_for(tmp_path, files_digest=observed.files_digest)
    assert not files_changed(same, load_reconcile_fleet(same))
    unpinned = module_for(tmp_path)
    assert not files_changed(unpinned, load_reconcile_fleet(unpinned))
    saved = module_for(tmp_path, files_digest="0" * 16)
    fleet = load_reconcile_fleet(saved)
    assert files_changed(saved, fleet)

    def fail_json(msg: str) -> None:
        raise Failed(msg)

    saved.fail_json = fail_json
    with pytest.raises(Failed, match=r"changed during this pass .* this step wrote nothing"):
        refuse_changed_files(saved, fleet)
    refuse_changed_files(same, observed)  # the files as the pass read them: no word
