"""The fleet-wide reconcile pass lease as the admin API takes it and shows it.

``/admin/api/pass-lease`` keeps one reconcile pass at a time, fleet-wide: a
pass takes (``POST``), renews and releases an expiring lease in the store; any
other pass is told who holds it (``GET`` reads it without taking it). The
lease's id is known only to its pass: never shown.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from ansible_collections.llmao.fleet.plugins.module_utils.json_values import is_number

from ..api_errors import RequestRefused
from ..store import PassLease

# A pass lease lasts this long unless renewed; the holder is a hostname and pid.
PASS_LEASE_MIN_S = 1
PASS_LEASE_MAX_S = 3600
LEASE_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
MAX_HOLDER = 200


def read_lease_claim(doc: Any) -> tuple[str, str, float]:
    """``{"lease_id", "holder", "ttl_s"}``; 400 otherwise."""
    if not isinstance(doc, dict):
        bad_lease("the body must be a JSON object with lease_id, holder and ttl_s")
    lease_id, holder, ttl_s = read_lease_id(doc.get("lease_id")), doc.get("holder"), \
        doc.get("ttl_s")
    if not isinstance(holder, str) or not 0 < len(holder) <= MAX_HOLDER \
            or not holder.isprintable():
        bad_lease(f"holder must be 1 to {MAX_HOLDER} printable characters (hostname and pid)")
    if not is_number(ttl_s) or not PASS_LEASE_MIN_S <= ttl_s <= PASS_LEASE_MAX_S:
        bad_lease(f"ttl_s must be from {PASS_LEASE_MIN_S} to {PASS_LEASE_MAX_S} seconds")
    return lease_id, holder, float(ttl_s)


def read_lease_id(lease_id: Any) -> str:
    if not isinstance(lease_id, str) or not LEASE_ID.fullmatch(lease_id):
        bad_lease("lease_id must be 16 to 64 letters, digits, '-' or '_'")
    return lease_id


def lease_answer(lease: PassLease | None, lease_id: str | None, now: float) -> dict[str, Any]:
    """The lease as the admin API shows it: never its id, which only its pass knows."""
    return {"now": now, "granted": lease is not None and lease.lease_id == lease_id,
            "holder": lease.holder if lease else None,
            "taken_at": lease.taken_at if lease else None,
            "expires_at": lease.expires_at if lease else None}


def bad_lease(message: str) -> NoReturn:
    raise RequestRefused(400, "bad_lease", message)
