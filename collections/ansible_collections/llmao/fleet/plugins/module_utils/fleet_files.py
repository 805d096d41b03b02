# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``config``/``models`` options every module shares, and loading the fleet from them.

Kept here once so each module that reads llmao's files declares and validates them
the same way (doc fragment ``llmao.fleet.fleet_files`` documents them). Imports no
Ansible code: the module object is passed in.
"""

from __future__ import annotations

from typing import Any

from .config_errors import ConfigError
from .fleet import Fleet, load_fleet

FLEET_FILES_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "config": {"type": "path"},
    "models": {"type": "path"},
}
FLEET_FILES_REQUIRED_TOGETHER = [("config", "models")]


def load_module_fleet(module: Any) -> Fleet:
    """The fleet named by the module's ``config``/``models``; a bad file fails the task.

    The core's message names files, key paths and rows but never a secret's value,
    so it can be shown as it is.
    """
    try:
        return load_fleet(module.params["config"], module.params["models"])
    except ConfigError as exc:
        module.fail_json(msg=f"llmao fleet files are invalid:\n{exc}", problems=list(exc.problems))
