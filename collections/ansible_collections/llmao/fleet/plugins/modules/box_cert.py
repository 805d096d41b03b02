#!/usr/bin/python
# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module ``llmao.fleet.box_cert``: a pushed box's certificate request, signed by llmao."""

from __future__ import annotations

DOCUMENTATION = r"""
module: box_cert
short_description: Have llmao's fleet CA sign a pushed box's certificate request
version_added: 0.2.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - The push path's side of box TLS (C(docs/box-tls.md)). A box that fetches its assignment asks
    llmao for its certificate itself (C(POST /vllm/cert), with the fleet key and its box token);
    a pushed box has neither, so the controller asks for it, with the admin token
    (C(POST /admin/api/boxes/<box>/cert)), as it reports what the box applied.
  - The box made its key and the request (M(llmao.fleet.box_program) with
    O(llmao.fleet.box_program#module:certificate_request=true)); the key never leaves the box,
    only the request travels. llmao signs it by the rules it applies to a box's own request
    (the addresses it attributes to the box only, the allowed key types, the size, a few
    certificates per box an hour) and answers the certificate, the fleet CA and the
    certificate's end of validity, which the box program then checks and keeps
    (O(llmao.fleet.box_program#module:certificate)).
  - Reports a change whenever llmao signed. In check mode nothing is asked.
extends_documentation_fragment:
  - llmao.fleet.fleet_files
  - llmao.fleet.controller
  - llmao.fleet.llmao_timeout
options:
  box:
    description:
      - The pushed box, by its name in C(fleet.hosts). llmao signs only for the addresses it
        attributes to that box.
    type: str
    required: true
  csr:
    description:
      - The box's certificate request (PEM), as the box program printed it. It holds no secret.
    type: str
    required: true
seealso:
  - module: llmao.fleet.box_program
"""

EXAMPLES = r"""
- name: Have llmao sign the request the box made
  llmao.fleet.box_cert:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
    box: "{{ llmao_box }}"
    csr: "{{ request.csr }}"
  delegate_to: localhost
  register: signed
"""

RETURN = r"""
box:
  description: The box, as C(fleet.hosts) names it.
  returned: success
  type: str
certificate:
  description: The box's certificate (PEM), for the key the box keeps. Not in check mode.
  returned: success and not check mode
  type: str
ca:
  description: The fleet CA's certificate (PEM). Not in check mode.
  returned: success and not check mode
  type: str
not_after:
  description: When the certificate ends (RFC 3339, UTC). Not in check mode.
  returned: success and not check mode
  type: str
  sample: "2026-12-09T02:00:00Z"
msg:
  description: One line saying what happened or would happen.
  returned: always
  type: str
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmao.fleet.plugins.module_utils import llmao_admin
from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import (
    TIMEOUT_OPTION,
    load_module_fleet,
    module_args,
)

OPTIONS: dict[str, dict[str, Any]] = {
    "box": {"type": "str", "required": True},
    "csr": {"type": "str", "required": True},
    **TIMEOUT_OPTION,
}


def main() -> None:
    module = AnsibleModule(**module_args(OPTIONS))
    fleet = load_module_fleet(module)
    params = module.params
    assignment = fleet.assignment(params["box"])
    if assignment is None:
        module.fail_json(msg=f"{params['box']} is not in fleet.hosts: llmao signs no "
                             "certificate for it")
    if fleet.settings.box_tls is None:
        module.fail_json(msg="config.yaml has no box_tls section: boxes serve plain HTTP and "
                             "need no certificate")
    if module.check_mode:
        module.exit_json(changed=True, box=assignment.box,
                         msg=f"would have llmao sign {assignment.box}'s certificate request")
    try:
        admin = llmao_admin.LlmaoAdmin.from_settings(fleet.settings, params["timeout"])
        signed = admin.sign_certificate(assignment.box, params["csr"])
    except llmao_admin.LlmaoAdminError as exc:
        module.fail_json(msg=f"{exc}: {assignment.box}'s certificate could not be signed")
    module.exit_json(changed=True, box=assignment.box, **signed,
                     msg=f"llmao signed {assignment.box}'s certificate, valid until "
                         f"{signed['not_after']}")


if __name__ == "__main__":
    main()
