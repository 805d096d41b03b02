# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The attributes of a module that runs on the controller, never on a box."""

from __future__ import annotations


class ModuleDocFragment:
    """``llmao.fleet.controller``: check mode in full, no diff, POSIX controllers.

    Every module that uses it is in the action group of the same name (``meta/runtime.yml``),
    so ``module_defaults`` can name the fleet files once for all of them.

    A module that does show a diff says ``diff_mode: support: full`` in its own
    ``attributes``, which wins over the fragment's.
    """

    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Runs in check mode, changing nothing and predicting the changed status.
    support: full
  diff_mode:
    description: Returns what changed (or would change, in check mode) when run with C(--diff).
    support: none
  platform:
    description: The platforms the module runs on.
    support: full
    platforms: posix
  action_group:
    description: Its options can be set once in C(module_defaults) for the whole group.
    support: full
    membership:
      - llmao.fleet.controller
notes:
  - "Runs on the controller only: in a play on C(localhost), or with C(delegate_to: localhost)
    in a play on boxes. The secrets it reads from C(config.yaml) never leave the controller."
"""
