# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The payload's ``rollout`` rule written out whole, for the tests that hold both sides to it.

The core never checks a ``rollout`` object: it builds one from ``config.yaml``, whose reader
bounds each key by ``payload_rules.ROLLOUT_LIMITS``. The box program checks what it receives.
This one function states what both must agree on, so the core's payload and the box's
verdict can each be held to it.
"""

from __future__ import annotations

from ansible_collections.llmao.fleet.plugins.module_utils.json_values import is_number
from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import ROLLOUT_LIMITS


def rollout_problem(value: object) -> str | None:
    """Why a payload's ``rollout`` object cannot be followed as given, or None.

    Exactly ``follow_s`` and ``drain_s``, each a finite number within its bounds:
    a box sleeps these many seconds, so anything else would make it spin or hang.
    """
    if not isinstance(value, dict) or set(value) != set(ROLLOUT_LIMITS):
        return f"must be an object with exactly {' and '.join(ROLLOUT_LIMITS)}"
    for key, (low, high) in ROLLOUT_LIMITS.items():
        number = value[key]
        if not is_number(number) or not low <= number <= high:
            return f"{key} must be a finite number from {low} to {high}"
    return None
