# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``files_digest`` option of the reconcile steps after the first."""

from __future__ import annotations


class ModuleDocFragment:
    """``extends_documentation_fragment: llmao.fleet.files_digest``."""

    DOCUMENTATION = r"""
options:
  files_digest:
    description:
      - The digest of C(config.yaml) and C(models.yaml) as the pass's first step read them
        (M(llmao.fleet.fleet_observe) returns it as C(files_digest)), so that one pass acts on
        one version of the files.
      - When the files this step reads differ (the operator saved one during the pass), the
        step acts on neither version. M(llmao.fleet.vllm_probe) probes nothing and
        M(llmao.fleet.fleet_plan) plans nothing (both return C(files_changed)), and a step that
        writes fails before writing. The next pass reads the new files.
      - When omitted, the step reads the files as they are, whatever an earlier step read.
    type: str
"""
