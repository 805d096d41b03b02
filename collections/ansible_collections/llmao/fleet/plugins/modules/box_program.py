#!/usr/bin/python
# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module ``llmao.fleet.box_program``: run the box program on a delivered assignment."""

from __future__ import annotations

DOCUMENTATION = r"""
module: box_program
short_description: Write a box's Supervisor programs with llmao's box program and hand them over
version_added: 0.1.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - Runs llmao's box program C(install_set.py) on the box with an assignment that is already
    there (C(--payload)), as the pull path runs it after fetching. Same preflight (C(vram_gb)
    and C(disk_gb) against the box), the same division of the card, the same Supervisor
    programs, byte for byte, and the same applied record under O(data_directory).
  - When a file changed, the program hands over to supervisord as the pull path does, with
    C(supervisorctl reread) then C(update). New programs are added, rewritten ones restarted,
    removed ones dropped, and no other program is started or stopped. The result says, program
    by program, what happened to its file and what supervisord did.
  - In check mode the program runs with C(--dry-run) and writes nothing; the result tells what
    would change. With C(--diff) every program file's change is shown, the bearer masked by the
    program itself.
  - When the assignment does not fit the box (exit 1) or is refused (exit 2), the task fails with
    the program's own message, and nothing was written.
  - "Box TLS (C(docs/box-tls.md)): when the assignment turns it on, the program needs a
    certificate from llmao's fleet CA before it writes the programs. The push path brings it in
    two steps: O(certificate_request=true) only says whether the box needs one (missing, from
    another CA, or less than a third of its life left) and, when it does, makes the box's key
    (0600, never shown) and returns a certificate request; M(llmao.fleet.box_cert) has llmao
    sign it; O(certificate) then gives llmao's answer to the program, which checks it against
    the key and the assignment's CA and keeps it before the apply."
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  program:
    description:
      - Path of C(install_set.py) on the box.
    type: path
    required: true
  payload:
    description:
      - Path of the assignment JSON on the box (the body C(GET /vllm/config) answers, see
        P(llmao.fleet.box_assignment#lookup)). It holds bearers, so keep it private (mode C(0600)).
    type: path
    required: true
  python:
    description:
      - The Python 3 interpreter that runs the program (it needs the standard library only).
    type: str
    default: python3
  data_directory:
    description:
      - E(DATA_DIRECTORY) of the program, where the vLLM logs, the Hugging Face cache and the
        applied record C(llmao/applied.json) go.
    type: path
    default: /data
  supervisor_conf_dir:
    description:
      - E(SUPERVISOR_CONF_DIR) of the program, where the C(llmao-<name>.conf) programs go.
    type: path
    default: /etc/supervisor/conf.d
  vllm_bin:
    description:
      - E(VLLM_BIN) of the program, the vLLM executable the programs run.
    type: str
    default: vllm
  handover:
    description:
      - Hand the changed programs over to supervisord (C(supervisorctl reread) and C(update)).
      - V(false) writes the files only (C(--no-handover)), for a caller that starts supervisord
        itself afterwards.
    type: bool
    default: true
  certificate_request:
    description:
      - Under box TLS, only check the box's certificate (C(--cert-request)) and write no
        program. When a certificate is due, make the box's key if it has none and return a
        request for it (RV(csr)). Reports a change when a certificate is due.
      - In check mode nothing is made; RV(certificate_due) still says why one is due.
    type: bool
    default: false
  certificate:
    description:
      - Path on the box of llmao's answer to the box's certificate request (JSON with
        C(certificate), C(ca) and C(not_after), the result of M(llmao.fleet.box_cert)). The
        program checks it and keeps it under O(data_directory) before it applies the
        assignment (C(--certificate)).
    type: path
notes:
  - The result holds no secret, the program masks every bearer in what it prints.
seealso:
  - plugin: llmao.fleet.box_assignment
    plugin_type: lookup
"""

EXAMPLES = r"""
- name: Write the programs of the assignment delivered to /var/lib/llmao/assignment.json
  llmao.fleet.box_program:
    program: /usr/local/lib/llmao/install_set.py
    payload: /var/lib/llmao/assignment.json
    data_directory: /workspace
  register: programs

- name: Say which programs supervisord restarted
  ansible.builtin.debug:
    msg: "{{ programs.supervisord | dict2items | selectattr('value', '==', 'updated')
             | map(attribute='key') }}"
"""

RETURN = r"""
revision:
  description: The revision of the assignment (a content hash; holds no secret).
  returned: success
  type: str
  sample: 3f2a9c0b1d4e5f60
programs:
  description: Supervisor program names of the assignment, sorted.
  returned: success
  type: list
  elements: str
  sample: [gemma4-26b, qwen3-8b]
added:
  description: Programs whose file is new (written, or would be in check mode).
  returned: success
  type: list
  elements: str
updated:
  description: Programs whose file was rewritten with a different content.
  returned: success
  type: list
  elements: str
removed:
  description: Programs of an earlier assignment whose file was removed.
  returned: success
  type: list
  elements: str
supervisord:
  description:
    - What C(supervisorctl update) did to each program it touched. V(added), V(updated) (stopped
      and started with its new file) or V(removed).
    - Empty when nothing was handed over (no file changed, check mode, or O(handover=false)).
  returned: success
  type: dict
  sample: {"gemma4-26b": "updated", "qwen3-8b": "added"}
written:
  description: Every file written, the applied record included.
  returned: success
  type: list
  elements: str
unchanged:
  description: Files the assignment needs that already hold the right content.
  returned: success
  type: list
  elements: str
record:
  description: Path of the applied record on the box.
  returned: success
  type: str
  sample: /data/llmao/applied.json
applied:
  description:
    - The applied record read back from the box after the run (revision, host, applied_at,
      servers without bearers); in check mode, the record the box holds before the run.
    - Empty when the box holds no readable record.
  returned: success
  type: dict
  sample: {"revision": "3f2a9c0b1d4e5f60", "host": "203.0.113.10",
           "applied_at": "2026-01-02T03:04:05Z", "servers": []}
messages:
  description: What the program said while it worked (GPU, memory division, preflight), masked.
  returned: always
  type: list
  elements: str
rc:
  description: The program's exit code (1 does not fit, 2 refused, 3 unreachable, 4 handover).
  returned: failure
  type: int
tls:
  description: Whether the assignment turns box TLS on.
  returned: success and O(certificate_request=true)
  type: bool
certificate_due:
  description: Why the box needs a certificate now; null when the one it has is good.
  returned: success and O(certificate_request=true)
  type: str
  sample: less than a third of its life is left
csr:
  description:
    - A certificate request (PEM) for the box's key when a certificate is due, else null. The
      key itself stays on the box.
  returned: success and O(certificate_request=true)
  type: str
"""

import json
import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "program": {"type": "path", "required": True},
    "payload": {"type": "path", "required": True},
    "python": {"type": "str", "default": "python3"},
    "data_directory": {"type": "path", "default": "/data"},
    "supervisor_conf_dir": {"type": "path", "default": "/etc/supervisor/conf.d"},
    "vllm_bin": {"type": "str", "default": "vllm"},
    "handover": {"type": "bool", "default": True},
    "certificate_request": {"type": "bool", "default": False},
    "certificate": {"type": "path"},
}


def program_argv(params: dict[str, Any], check_mode: bool) -> list[str]:
    """The command line: the payload, JSON output, and the flags of check mode and handover."""
    argv = [params["python"], params["program"], "--payload", params["payload"]]
    if params["certificate_request"]:
        argv.append("--cert-request")
    else:
        argv.append("--json")
        if params["certificate"]:
            argv += ["--certificate", params["certificate"]]
        if not params["handover"]:
            argv.append("--no-handover")
    return argv + ["--dry-run"] if check_mode else argv


def program_environment(params: dict[str, Any]) -> dict[str, str]:
    return {"DATA_DIRECTORY": params["data_directory"],
            "SUPERVISOR_CONF_DIR": params["supervisor_conf_dir"],
            "VLLM_BIN": params["vllm_bin"]}


def decode_answer(stdout: str) -> dict[str, Any] | None:
    """The program's closing JSON object; None when it printed none (it crashed)."""
    try:
        answer = json.loads(stdout)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def file_diffs(answer: dict[str, Any]) -> list[dict[str, str]]:
    """Ansible's diff of every file the program changes (its text already masked)."""
    diffs = []
    for change in answer.get("diff", []):
        before, after = change.get("before", ""), change.get("after", "")
        diffs.append({"before_header": change["path"] if before else "/dev/null",
                      "after_header": change["path"] if after else "/dev/null",
                      "before": before, "after": after})
    return diffs


def summarize(answer: dict[str, Any]) -> dict[str, Any]:
    """Turn the program's report into the module result: its program names by what happened."""
    programs = answer.get("programs", [])

    def named(file_change: str) -> list[str]:
        return sorted(p["name"] for p in programs if p["file"] == file_change)

    return {
        "changed": bool(answer.get("changed")),
        "revision": answer.get("revision"),
        "programs": sorted(p["name"] for p in programs if p["file"] != "removed"),
        "added": named("added"),
        "updated": named("updated"),
        "removed": named("removed"),
        "supervisord": {p["name"]: p["supervisord"] for p in programs if p["supervisord"]},
        "written": list(answer.get("written", [])),
        "unchanged": list(answer.get("unchanged", [])),
        "record": answer.get("record", ""),
    }


def certificate_result(answer: dict[str, Any], data_directory: str,
                       diff: bool) -> dict[str, Any]:
    """The result of O(certificate_request): whether a certificate is due, and the request.
    Its diff says why the box's certificate changes; no key is ever in it."""
    due = answer.get("due")
    result = {"changed": due is not None, "tls": bool(answer.get("tls")),
              "certificate_due": due, "csr": answer.get("csr")}
    if diff and due is not None:
        path = os.path.join(data_directory, "llmao", "tls", "cert.pem")
        result["diff"] = {"before_header": path, "after_header": path,
                          "before": f"certificate: {due}\n",
                          "after": "certificate: new, signed by llmao's fleet CA\n"}
    return result


def read_record(path: str) -> dict[str, Any]:
    """The applied record on the box, as the next reader (reconcile, an operator) sees it."""
    try:
        with open(path, encoding="utf-8") as record:
            data = json.load(record)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           mutually_exclusive=[("certificate_request", "certificate")])
    params = module.params
    for option in ("program", "payload", "certificate"):
        if params[option] is not None and not os.path.isfile(params[option]):
            module.fail_json(msg=f"{option} {params[option]} is not a file on the box")
    rc, stdout, stderr = module.run_command(program_argv(params, module.check_mode),
                                            environ_update=program_environment(params))
    messages = [line for line in stderr.splitlines() if line.strip()]
    answer = decode_answer(stdout)
    if rc != 0 or answer is None or answer.get("failed"):
        reason = (answer or {}).get("msg") or (messages[-1] if messages else "no output")
        module.fail_json(msg=reason, rc=rc, messages=messages)
    if params["certificate_request"]:
        module.exit_json(**certificate_result(answer, params["data_directory"], module._diff),
                         messages=messages)
    result = summarize(answer)
    result["applied"] = read_record(result["record"])
    if module._diff:
        result["diff"] = file_diffs(answer)
    module.exit_json(messages=messages, **result)


if __name__ == "__main__":
    main()
