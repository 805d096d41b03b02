# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every llmao module does alike: its shared options, loading the fleet, censoring it.

The options are declared here once, so each module declares and validates
``config``/``models`` (``approved``, for the reconcile modules that act on servers;
``timeout``, for those that wait on a service) the same way; the doc fragments
``llmao.fleet.fleet_files``, ``llmao.fleet.approved_boxes`` and
``llmao.fleet.llmao_timeout`` document them.

A reconcile module derives bearers and reads the master key and admin token
itself, so none of them ever travels through play variables. Each of those
values is registered with Ansible's ``no_log_values`` as soon as the fleet is
loaded: should one ever slip into a message or a result, Ansible masks it.
Imports no Ansible code: the module object is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .bearer import is_placeholder
from .config_errors import ConfigError
from .fleet import Fleet, load_fleet

FLEET_FILES = ("config", "models")
# The boxes llmao serves beyond fleet.hosts: approved ones, and the pools' bound members.
APPROVED_OPTION: dict[str, dict[str, Any]] = {"approved": {"type": "dict"},
                                              "pool_members": {"type": "dict"}}
# Seconds to wait for each answer of a service the module calls (llmao, LiteLLM, listings).
TIMEOUT_OPTION: dict[str, dict[str, Any]] = {"timeout": {"type": "float", "default": 15.0}}
# The digest of the fleet files as the pass's first step read them (fleet_observe's
# ``files_digest``): a module given it acts only on that version of the files.
FILES_DIGEST_OPTION: dict[str, dict[str, Any]] = {"files_digest": {"type": "str"}}
FILES_CHANGED = ("the fleet files changed during this pass (after fleet_observe read them): "
                 "it ends without writing, and the next pass reads them afresh")
RULE_LISTS = ("mutually_exclusive", "required_together", "required_one_of", "required_if")


def module_args(options: Mapping[str, dict[str, Any]], *, files_required: bool = True,
                approved: bool = False, **rules: Any) -> dict[str, Any]:
    """``AnsibleModule``'s keyword arguments: the shared options and rules merged with a module's.

    Every module supports check mode. The fleet files are required unless the
    module has another source for what they give (then they go together);
    ``approved`` adds the options of the boxes served beyond ``fleet.hosts``
    (``approved`` and ``pool_members``). A rule list (``required_together``,
    say) given here is appended to the shared one of that name.
    """
    spec = {name: {"type": "path", "required": files_required} for name in FLEET_FILES}
    if approved:
        spec.update(APPROVED_OPTION)
    spec.update(options)
    shared: dict[str, list[Sequence[Any]]] = {}
    if not files_required:
        shared["required_together"] = [FLEET_FILES]
    for name in RULE_LISTS:
        if name in rules:
            shared[name] = [*shared.get(name, []), *rules.pop(name)]
    return {"argument_spec": spec, "supports_check_mode": True, **shared, **rules}


def load_module_fleet(module: Any) -> Fleet:
    """The fleet named by the module's ``config``/``models``; a bad file fails the task.

    The core's message names files, key paths and rows but never a secret's value,
    so it can be shown as it is.
    """
    try:
        return load_fleet(module.params["config"], module.params["models"])
    except ConfigError as exc:
        module.fail_json(msg=f"llmao fleet files are invalid:\n{exc}", problems=list(exc.problems))


def files_changed(module: Any, fleet: Fleet) -> bool:
    """Whether the module was given the pass's ``files_digest`` and read other files: one
    pass acts on one version of config.yaml and models.yaml, or (the rest of it) not at all."""
    given = module.params.get("files_digest")
    return given is not None and given != fleet.files_digest


def refuse_changed_files(module: Any, fleet: Fleet) -> None:
    """A step that writes fails before writing when the files changed during its pass."""
    if files_changed(module, fleet):
        module.fail_json(msg="the fleet files changed during this pass (after fleet_observe read "
                             "them): this step wrote nothing, and the next pass reads them")


def fleet_secrets(fleet: Fleet) -> set[str]:
    """Every secret the loaded fleet holds or derives (placeholders are not secrets)."""
    values = [*fleet.settings.secrets(), *(server.api_key for server in fleet.servers())]
    return {value for value in values if not is_placeholder(value)}


def load_reconcile_fleet(module: Any,
                         approved: Mapping[str, Sequence[str]] | None = None,
                         pool_members: Mapping[str, str] | None = None) -> Fleet:
    """The fleet of the module's ``config``/``models`` with the boxes llmao serves beyond
    ``fleet.hosts`` (pool members, then approved boxes, as llmao-server serves them),
    secrets censored.

    The approvals and members are ``approved`` and ``pool_members`` when given (a module
    that reads them from another option), else the module's options of those names if it
    has them. Each one the core refuses becomes a task warning: the pass goes on without
    that box. Without pools and approvals the fleet is ``config.yaml``'s as loaded.
    """
    loaded = load_module_fleet(module)
    if approved is None:
        approved = module.params.get("approved") or {}
    if pool_members is None:
        pool_members = module.params.get("pool_members") or {}
    fleet = loaded.with_pool_members(pool_members) if pool_members else loaded
    fleet = fleet.with_approvals(approved)
    for warning in fleet.warnings[len(loaded.warnings):]:
        module.warn(warning)
    module.no_log_values.update(fleet_secrets(fleet))
    return fleet
