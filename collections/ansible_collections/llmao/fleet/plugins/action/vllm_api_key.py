# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side guard of ``llmao.fleet.vllm_api_key``.

A module cannot hide its own result from callbacks (Ansible drops an
``_ansible_no_log`` a module returns), and shipping it to a box would ship the
salt with it. This action runs the module only over a local connection and marks
a successful result ``no_log``, so no verbosity prints a bearer while a
registered variable still holds it.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

MODULE = "llmao.fleet.vllm_api_key"
LOCAL_TRANSPORT = "local"


class ActionModule(ActionBase):
    """Refuse remote execution; censor the bearers in what callbacks see."""

    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        if self._connection.transport != LOCAL_TRANSPORT:
            result.update(failed=True, msg=(
                f"{MODULE} runs on the controller only, and the salt must never leave it: "
                "add 'delegate_to: localhost' to the task"))
            return result
        result.update(self._execute_module(module_name=MODULE, module_args=self._task.args,
                                           task_vars=task_vars))
        if not result.get("failed"):
            result["_ansible_no_log"] = True
        return result
