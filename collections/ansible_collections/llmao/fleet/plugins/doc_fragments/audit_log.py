# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``audit_log`` option of a module that records its changes in the controller's log."""

from __future__ import annotations


class ModuleDocFragment:
    """``llmao.fleet.audit_log``: where each change is appended, beside config.yaml by default."""

    DOCUMENTATION = r"""
options:
  audit_log:
    description:
      - The JSON-lines file every change is appended to. No secret is ever written to it.
      - Defaults to C(llmao-audit.jsonl) in the folder of O(config).
    type: path
"""
