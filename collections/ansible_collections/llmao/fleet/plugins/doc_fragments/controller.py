# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The attributes of a module that runs on the controller and only reports what it did."""

from __future__ import annotations


class ModuleDocFragment:
    """``llmao.fleet.controller``, after ``ansible.builtin.action_common_attributes``.

    Check mode is supported in full and there is no diff; a module that does show a
    diff says ``diff_mode: support: full`` in its own ``attributes``, which wins.
    """

    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""
