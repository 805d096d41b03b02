#!/usr/bin/python
# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module ``llmao.fleet.pass_lease``: one reconcile pass at a time, fleet-wide."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pass_lease
short_description: Take, renew or release the fleet-wide reconcile pass lease
version_added: 0.2.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - Two reconcile passes must never act at once, even from two controllers (a timer on two hosts,
    an operator by hand), which a local C(flock) cannot see. A pass takes a lease kept in llmao's
    store through its admin API (C(POST /admin/api/pass-lease) at C(server.url), with
    C(admin.token) as bearer), renews it while it runs and releases it at the end.
  - The lease expires I(ttl) seconds after it was taken or last renewed, so a pass that died
    holding it blocks the others for I(ttl) at most; the next pass then takes it over.
  - With I(state=taken), when another pass holds the lease the task succeeds with
    C(granted=false) and says who holds it and until when; the play then ends without writing.
  - With I(state=renewed), a lease that another pass has taken over (this one let it expire)
    fails the task, so the pass stops before it writes more.
  - Reports no change; the lease is the pass's own bookkeeping, given back at its end.
  - In check mode the lease is only read (C(GET /admin/api/pass-lease)), never taken, renewed or
    released; C(granted) then says whether it is free.
extends_documentation_fragment:
  - llmao.fleet.fleet_files
  - llmao.fleet.controller
  - llmao.fleet.llmao_timeout
options:
  state:
    description:
      - C(taken) takes the lease for a new pass; C(renewed) extends this pass's lease;
        C(released) gives it back.
    type: str
    choices: [taken, renewed, released]
    default: taken
  lease_id:
    description:
      - The C(lease_id) the C(taken) task returned. Required with I(state=renewed) and
        I(state=released).
    type: str
  ttl:
    description:
      - Seconds the lease lasts unless renewed; longer than the longest step of a pass.
    type: float
    default: 600
  holder:
    description:
      - Who the pass is, shown to a pass that finds the lease taken. No secret.
      - Defaults to the controller's hostname and the pid of its C(ansible-playbook).
    type: str
notes:
  - "Runs on the controller (C(hosts: localhost))."
seealso:
  - module: llmao.fleet.fleet_observe
  - module: llmao.fleet.fleet_verdicts
"""

EXAMPLES = r"""
- name: Take the pass lease
  llmao.fleet.pass_lease:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
  register: lease

- name: Renew it before a long step
  llmao.fleet.pass_lease:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
    state: renewed
    lease_id: "{{ lease.lease_id }}"
  when: lease.granted and not ansible_check_mode

- name: Give it back
  llmao.fleet.pass_lease:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
    state: released
    lease_id: "{{ lease.lease_id }}"
  when: lease.granted and not ansible_check_mode
"""

RETURN = r"""
granted:
  description: Whether this pass holds the lease (in check mode, whether it is free).
  returned: success
  type: bool
lease_id:
  description: This pass's lease, for the renewing and releasing tasks; null unless granted
    outside check mode.
  returned: success
  type: str
holder:
  description: Who holds the lease (this pass when granted); null when it is free.
  returned: success
  type: str
  sample: "controller-1 pid 4242"
expires_in:
  description: Seconds until the lease expires unless renewed; null when it is free.
  returned: success
  type: float
message:
  description: One line saying who holds the lease and until when.
  returned: success
  type: str
released:
  description: Whether the release gave the lease back (false when it was not this pass's).
  returned: when I(state=released) outside check mode
  type: bool
"""

import os
import secrets
import socket
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import (
    TIMEOUT_OPTION,
    load_reconcile_fleet,
    module_args,
)
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    LlmaoAdmin,
    LlmaoAdminError,
    PassLeaseState,
)

OPTIONS: dict[str, dict[str, Any]] = {
    "state": {"type": "str", "choices": ["taken", "renewed", "released"], "default": "taken"},
    "lease_id": {"type": "str"},
    "ttl": {"type": "float", "default": 600.0},
    "holder": {"type": "str"},
    **TIMEOUT_OPTION,
}
RULES = {"required_if": [("state", "renewed", ("lease_id",)),
                         ("state", "released", ("lease_id",))]}
PLAYBOOK_NAME = b"ansible-playbook"
MAX_ANCESTORS = 16


def playbook_pid() -> int:
    """The pid of the ``ansible-playbook`` this module runs under: the outermost ancestor whose
    command is it (its workers are forks with the same command line), else the parent."""
    found, pid = None, os.getppid()
    for _step in range(MAX_ANCESTORS):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")[:2]
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if any(os.path.basename(arg) == PLAYBOOK_NAME for arg in argv):
            found = pid
        if parent <= 1:
            break
        pid = parent
    return found or os.getppid()


def describe(lease: PassLeaseState) -> str:
    if lease.holder is None:
        return "the pass lease is free"
    expires_in = (lease.expires_at or lease.now) - lease.now
    who = "this pass" if lease.granted else lease.holder
    return f"the pass lease is held by {who} for {expires_in:.0f} s more"


def outcome(lease: PassLeaseState, lease_id: str | None) -> dict[str, Any]:
    return {"granted": lease.granted, "lease_id": lease_id if lease.granted else None,
            "holder": lease.holder, "message": describe(lease),
            "expires_in": None if lease.expires_at is None else lease.expires_at - lease.now}


def main() -> None:
    module = AnsibleModule(**module_args(OPTIONS, **RULES))
    fleet = load_reconcile_fleet(module)
    params = module.params
    state = params["state"]
    try:
        admin = LlmaoAdmin.from_settings(fleet.settings, params["timeout"])
        if module.check_mode:
            lease = admin.pass_lease()
            result = {**outcome(lease, None), "granted": lease.holder is None}
        elif state == "released":
            result = {"granted": False, "lease_id": None, "holder": None, "expires_in": None,
                      "released": admin.release_pass_lease(params["lease_id"]),
                      "message": "the pass lease is given back"}
        else:
            lease_id = params["lease_id"] if state == "renewed" else secrets.token_hex(16)
            holder = params["holder"] or f"{socket.gethostname()} pid {playbook_pid()}"
            lease = admin.claim_pass_lease(lease_id, holder, params["ttl"])
            result = outcome(lease, lease_id)
    except LlmaoAdminError as exc:
        module.fail_json(msg=f"{exc}: the pass lease could not be {state}")
    if state == "renewed" and not module.check_mode and not result["granted"]:
        module.fail_json(msg=f"this pass lost its lease ({result['message']}): it stops "
                             "before writing more", **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
