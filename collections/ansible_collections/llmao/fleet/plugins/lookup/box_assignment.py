# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lookup ``llmao.fleet.box_assignment``: the exact assignment ``GET /vllm/config`` gives a box.

A lookup rather than a module: a lookup always runs inside ``ansible-playbook`` on
the controller, so the salt the bearers come from cannot be shipped to a box by a
forgotten ``delegate_to``; no module process is forked per box; and the payload
flows straight into the one task that delivers it (which carries ``no_log``)
instead of sitting in a registered variable that a later ``debug`` could print.
"""


from __future__ import annotations

DOCUMENTATION = r"""
name: box_assignment
short_description: The assignment llmao gives a box, as the exact JSON its config server answers
version_added: 0.1.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - Loads llmao's C(config.yaml) and C(models.yaml) on the controller, exactly as the config
    server does, and returns for each box name the body C(GET /vllm/config) answers that box,
    with host, servers and revision, byte for byte.
  - The push path (role C(vllm_box)) delivers this text to the box and runs the box program on it,
    so pushed and pulled boxes get the same Supervisor programs.
  - B(The body carries every server's bearer.) Use it only in a task with C(no_log) (for example
    the content of an M(ansible.builtin.copy) to a private path), or reduce it on the spot to a
    field that holds no secret, such as C(revision).
  - Runs on the controller only, like every lookup, so the salt never leaves it.
extends_documentation_fragment:
  - llmao.fleet.fleet_files.required
options:
  _terms:
    description:
      - Box names, C(fleet.hosts) keys (normalised as the config server does).
    type: list
    elements: str
    required: true
notes:
  - An approved unknown box (dashboard) is not a C(fleet.hosts) key and has no push-path
    assignment.
seealso:
  - plugin: llmao.fleet.fleet
    plugin_type: inventory
  - module: llmao.fleet.box_program
"""

EXAMPLES = r"""
- name: Deliver a box's assignment to a private file on the box
  ansible.builtin.copy:
    content: "{{ lookup('llmao.fleet.box_assignment', llmao_box,
                 config=llmao_config_file, models=llmao_models_file) }}"
    dest: /var/lib/llmao/assignment.json
    mode: "0600"
  no_log: true

- name: The revision llmao intends for the box (holds no secret)
  ansible.builtin.debug:
    msg: "{{ (lookup('llmao.fleet.box_assignment', llmao_box, config=llmao_config_file,
              models=llmao_models_file) | from_json).revision }}"
"""

RETURN = r"""
_raw:
  description:
    - One JSON text per box name given (host, servers, revision), each server with its
      bearer in C(api_key).
  type: list
  elements: str
"""

from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet


def load(config: str, models: str) -> Fleet:
    """The fleet of both files; a bad file becomes the core's located message."""
    try:
        return load_fleet(config, models)
    except ConfigError as exc:
        raise AnsibleError(f"llmao fleet files are invalid:\n{exc}") from None


def payload(fleet: Fleet, box: str) -> str:
    """The body the config server answers ``box``; an unknown name says where it looked."""
    assignment = fleet.assignment(box)
    if assignment is None:
        raise AnsibleError(f"{box!r} is not a fleet.hosts key of {fleet.config_path}")
    return assignment.body.decode("utf-8")


class LookupModule(LookupBase):
    """Return each named box's assignment text."""

    def run(self, terms: list[Any], variables: dict[str, Any] | None = None,
            **kwargs: Any) -> list[str]:
        self.set_options(var_options=variables, direct=kwargs)
        fleet = load(self.get_option("config"), self.get_option("models"))
        return [payload(fleet, str(term)) for term in terms]
