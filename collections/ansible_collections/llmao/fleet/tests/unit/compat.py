# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the unit tests need from ansible-core, on every release the collection claims.

ansible-core 2.19 marks the strings a template may come from and gives modules'
arguments to tests with ``patch_module_args``; 2.17 and 2.18 trust every string
and read the arguments from ``ansible.module_utils.basic._ANSIBLE_ARGS``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

try:
    from ansible.template import trust_as_template

    TRUST_TAGS = True
except ImportError:  # ansible-core < 2.19: every string may be a template
    TRUST_TAGS = False

    def trust_as_template(value: str) -> str:
        return value

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19
    from ansible.module_utils import basic

    @contextlib.contextmanager
    def patch_module_args(args: dict[str, Any]) -> Iterator[None]:
        """Give ``args`` to the next ``AnsibleModule`` built, as a task would."""
        previous = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = previous


def with_templar(plugin: Any) -> None:
    """Give an inventory plugin the templar its ``parse`` would have made.

    The tests call ``populate`` without ``parse``; ansible-core 2.19 makes the templar
    on demand, 2.17 and 2.18 only in ``parse``.
    """
    if not hasattr(plugin, "templar"):
        from ansible.template import Templar

        plugin.templar = Templar(loader=plugin.loader)


__all__ = ["TRUST_TAGS", "patch_module_args", "trust_as_template", "with_templar"]
