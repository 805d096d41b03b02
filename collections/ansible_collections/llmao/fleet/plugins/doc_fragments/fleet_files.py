# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options of every plugin that reads llmao's config.yaml and models.yaml."""

from __future__ import annotations

# The options, once: the plain fragment leaves both optional, its ``required`` part marks them
# required (``extends_documentation_fragment: [llmao.fleet.fleet_files.required]`` alone).
_OPTIONS = r"""
options:
  config:
    description:
      - Path of llmao's C(config.yaml) on the controller.
      - The inventory plugin P(llmao.fleet.fleet#inventory) sets the group variable
        C(llmao_config_file) to the path it read; passing that variable keeps a play on the same
        files as its inventory.
      - A relative path is taken from the working directory of the C(ansible-playbook) process.
    type: path
    required: {required}
  models:
    description:
      - Path of llmao's C(models.yaml) on the controller, the companion of O(config).
      - The inventory plugin sets the group variable C(llmao_models_file).
    type: path
    required: {required}
notes:
  - Both files are loaded and validated together, exactly as the config server loads them; any
    problem fails the task with a message naming the file, the key path and the row, never a
    secret's value.
requirements:
  - PyYAML on the controller (ansible-core's own dependency).
"""


class ModuleDocFragment:
    """``llmao.fleet.fleet_files``, or ``llmao.fleet.fleet_files.required`` where both are.

    The files are optional only where a plugin has another source (``vllm_api_key``
    takes a salt instead); everywhere else both are required.
    """

    DOCUMENTATION = _OPTIONS.replace("{required}", "false")
    REQUIRED = _OPTIONS.replace("{required}", "true")
