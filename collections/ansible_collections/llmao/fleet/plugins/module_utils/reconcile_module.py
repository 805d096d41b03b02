# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every reconcile module does alike: load the fleet, approved boxes included, censored.

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
from .fleet import Fleet
from .fleet_files import load_module_fleet


def fleet_secrets(fleet: Fleet) -> set[str]:
    """Every secret the loaded fleet holds or derives (placeholders are not secrets)."""
    values = [*fleet.settings.secrets(), *(server.api_key for server in fleet.servers())]
    return {value for value in values if not is_placeholder(value)}


def load_reconcile_fleet(module: Any,
                         approved: Mapping[str, Sequence[str]] | None = None) -> Fleet:
    """The fleet of the module's ``config``/``models`` with its approved boxes, secrets censored.

    The approvals are ``approved`` when given (a module that reads them from another
    option), else the module's ``approved`` option if it has one. Each approval the
    core refuses becomes a task warning: the pass goes on without that box.
    """
    loaded = load_module_fleet(module)
    if approved is None:
        approved = module.params.get("approved") or {}
    fleet = loaded.with_approvals(approved)
    for warning in fleet.warnings[len(loaded.warnings):]:
        module.warn(warning)
    module.no_log_values.update(fleet_secrets(fleet))
    return fleet
