# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``approved`` and ``pool_members`` options of every reconcile module that acts on the
fleet's servers: the boxes llmao serves beyond ``fleet.hosts``."""

from __future__ import annotations


class ModuleDocFragment:
    """``extends_documentation_fragment: llmao.fleet.approved_boxes``."""

    DOCUMENTATION = r"""
options:
  approved:
    description:
      - The unknown boxes an admin approved on llmao's dashboard, each mapped to its model names
        in port order (the first on 8001, then 8002, 8003), as M(llmao.fleet.fleet_observe)
        returns them in C(observations.approved).
      - Their servers are intended servers like those of C(fleet.hosts), with the same bearers
        (derived from C(fleet.vllm_api_salt)). Approvals live in llmao's memory only, so they
        reach reconcile through this option.
      - A box that is a C(fleet.hosts) key is left to its rows. An approval that cannot be
        honoured (a model no longer in C(models.yaml), say) is skipped with a warning.
      - When omitted, only C(fleet.hosts) is intended.
    type: dict
  pool_members:
    description:
      - The boxes llmao bound as members of a pool (C(docs/pools.md)), each mapped to its pool,
        as M(llmao.fleet.fleet_observe) returns them in C(observations.pool_members).
      - Their servers are the pool's C(serve) rows, intended like those of C(fleet.hosts), with
        bearers derived the same way; each is dialled at the address its pool's provider
        listing gives the instance (the listing names it by llmao's label).
      - A member whose name is a C(fleet.hosts) key, or whose pool left C(config.yaml), is
        skipped with a warning. When omitted, no pool member is intended.
    type: dict
"""
