# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options every module that reads llmao's files shares, and loading the fleet from them.

Kept here once so each module declares and validates ``config``/``models`` (and
``approved``, for the reconcile modules that act on servers) the same way; the doc
fragments ``llmao.fleet.fleet_files`` and ``llmao.fleet.approved_boxes`` document
them. Imports no Ansible code: the module object is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .config_errors import ConfigError
from .fleet import Fleet, load_fleet

FLEET_FILES = ("config", "models")
APPROVED_OPTION: dict[str, dict[str, Any]] = {"approved": {"type": "dict"}}
RULE_LISTS = ("mutually_exclusive", "required_together", "required_one_of", "required_if")


def module_args(options: Mapping[str, dict[str, Any]], *, files_required: bool = True,
                approved: bool = False, **rules: Any) -> dict[str, Any]:
    """``AnsibleModule``'s keyword arguments: the shared options and rules merged with a module's.

    Every module supports check mode. The fleet files are required unless the
    module has another source for what they give (then they go together);
    ``approved`` adds the option of that name. A rule list (``required_together``,
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
