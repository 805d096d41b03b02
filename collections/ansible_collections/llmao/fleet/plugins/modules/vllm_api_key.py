#!/usr/bin/python
# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module ``llmao.fleet.vllm_api_key``: the bearer a box's vLLM servers require."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_api_key
short_description: Derive the bearer a box's vLLM servers require
version_added: 0.1.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - Returns the bearer (C(sk-vllm-...)) that the vLLM server on one box and listen port requires,
    or the bearers of every row the box has in C(fleet.hosts).
  - The derivation is llmao's own (HMAC-SHA256 of the box name and listen port under
    C(fleet.vllm_api_salt)); a legacy pair of C(fleet.legacy_servers) gets C(fleet.selfhost_api_key)
    instead. The bearer is the very value C(GET /vllm/config) gives that box.
  - "The salt must never leave the controller, so this module runs there only: give the task
    C(delegate_to: localhost) in a play whose hosts are boxes. Over any other connection the
    task fails before anything is sent."
  - A successful result is marked C(no_log), so callbacks show it censored at every verbosity;
    the registered variable still holds the bearers for the tasks that need them (give those
    tasks C(no_log) too).
  - It changes nothing, so it reports C(changed=false) and behaves the same in check mode.
extends_documentation_fragment:
  - llmao.fleet.fleet_files
  - llmao.fleet.controller
options:
  host:
    description:
      - The box name, a C(fleet.hosts) key (normalised as the config server does).
    type: str
    required: true
  port:
    description:
      - The listen port of one server (8001, 8002, 8003, or the port of a legacy pair).
      - When omitted, the module returns the bearer of every row of O(host); that needs
        O(config) and O(models).
    type: int
  salt:
    description:
      - The salt itself, instead of reading it from O(config).
      - Without O(config) the module cannot know the legacy pairs, so every port gets a derived
        bearer.
      - Requires O(port).
    type: str
seealso:
  - plugin: llmao.fleet.fleet
    plugin_type: inventory
notes:
  - Exactly one of O(config) (with O(models)) and O(salt) must be given.
  - With O(config), O(host) must be a C(fleet.hosts) key and O(port) one of its rows.
"""

EXAMPLES = r"""
- name: Bearer of the server on port 8001 of each box
  llmao.fleet.vllm_api_key:
    host: "{{ llmao_box }}"
    port: 8001
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
  delegate_to: localhost
  register: bearer

- name: Bearers of every server of a box, by listen port
  llmao.fleet.vllm_api_key:
    host: 203.0.113.10
    config: /etc/llmao/config.yaml
    models: /etc/llmao/models.yaml
  delegate_to: localhost
  register: bearers

- name: Use one of them without showing it
  ansible.builtin.uri:
    url: "http://{{ ansible_host }}:{{ llmao_public_ports[8001] }}/v1/models"
    headers:
      Authorization: "Bearer {{ bearers.api_keys['8001'] }}"
  no_log: true
"""

RETURN = r"""
host:
  description: The box name as normalised.
  returned: always
  type: str
  sample: 203.0.113.10
api_key:
  description: The bearer of O(host) on O(port).
  returned: when O(port) is given
  type: str
  sample: sk-vllm-...
api_keys:
  description: The bearer of every row of O(host), keyed by listen port (as a string).
  returned: when O(port) is omitted
  type: dict
  sample: {"8001": "sk-vllm-...", "8002": "sk-vllm-..."}
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmao.fleet.plugins.module_utils.bearer import (
    BearerError,
    derive_vllm_api_key,
)
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import (
    load_module_fleet,
    module_args,
)
from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import normalize_host


def configured_keys(module: AnsibleModule, fleet: Fleet, host: str,
                    port: int | None) -> dict[int, str]:
    """The bearers the loaded fleet gives ``host``: every row, or the row on ``port``."""
    assignment = fleet.assignment(host)
    if assignment is None:
        module.fail_json(msg=f"{host} is not a fleet.hosts key of {fleet.config_path}")
    keys = {server.listen_port: server.api_key for server in assignment.servers}
    if port is None:
        return keys
    if port not in keys:
        ports = ", ".join(str(listen) for listen in keys) or "none"
        module.fail_json(msg=f"{host} has no row on port {port} in {fleet.config_path} "
                             f"(its ports: {ports})")
    return {port: keys[port]}


def salted_key(module: AnsibleModule, salt: str, host: str, port: int) -> dict[int, str]:
    """The derived bearer straight from a salt; a bad input fails without echoing the salt."""
    try:
        return {port: derive_vllm_api_key(salt, host, port)}
    except BearerError as exc:
        module.fail_json(msg=f"cannot derive a bearer: {exc}")


def main() -> None:
    module = AnsibleModule(**module_args(
        {"host": {"type": "str", "required": True},
         "port": {"type": "int"},
         "salt": {"type": "str", "no_log": True}},
        files_required=False,
        required_one_of=[("config", "salt")],
        mutually_exclusive=[("salt", "config"), ("salt", "models")],
        required_by={"salt": "port"},
    ))
    host = normalize_host(module.params["host"])
    if not host:
        module.fail_json(msg="host is empty")
    port = module.params["port"]
    if module.params["salt"] is not None:
        keys = salted_key(module, module.params["salt"], host, port)
    else:
        keys = configured_keys(module, load_module_fleet(module), host, port)
    result: dict[str, Any] = {"changed": False, "host": host}
    if port is None:
        result["api_keys"] = {str(listen): key for listen, key in keys.items()}
    else:
        result["api_key"] = keys[port]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
