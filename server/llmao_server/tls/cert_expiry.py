"""When each box's certificate expires, as the latest reconcile pass saw it served
(docs/box-tls.md): one rule for the dashboard and ``/metrics``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.json_values import is_number

# The dashboard warns at most this long before a box's certificate expires (the alert rule, at a
# day: a box renews long before).
WARN_BEFORE_S = 3 * 86400.0


def certificate_expiries(verdicts: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Box → the earliest expiry among the certificates its servers served (verified)."""
    expiries: dict[str, float] = {}
    for verdict in verdicts.values():
        box, when = verdict.get("box"), verdict.get("cert_not_after")
        if isinstance(box, str) and is_number(when):
            expiries[box] = min(float(when), expiries.get(box, float(when)))
    return expiries
