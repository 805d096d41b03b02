# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``timeout`` option of a module that makes one call to llmao's admin API, and both fleet
files required: llmao's address and admin token are read from ``config.yaml``.

Its argument spec is ``module_utils/fleet_module.py``'s ``TIMEOUT_OPTION``, which a test
holds to this text.
"""

from __future__ import annotations


class ModuleDocFragment:
    """``llmao.fleet.llmao_timeout``: how long to wait for llmao, 15 seconds by default.

    It marks ``llmao.fleet.fleet_files`` required, as ``llmao.fleet.fleet_files.required``
    does for a plugin that does not call llmao.
    """

    DOCUMENTATION = r"""
options:
  timeout:
    description:
      - Seconds to wait for llmao's answer.
    type: float
    default: 15
  config:
    required: true
  models:
    required: true
"""
