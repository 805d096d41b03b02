"""The audit log of admin actions: one line each, who, from where, what, how it ended.

The dashboard's actions and every admin credential attempt (login form or admin
API bearer) write here. A line never holds a secret: it goes through the
fleet's redactor, and nobody passes a presented token in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def audit(redact: Callable[[str], str], action: str, outcome: str, who: str,
          peer: str | None, **details: Any) -> None:
    parts = [f"admin action={action} outcome={outcome} who={who!r} peer={peer or 'unknown'!r}"]
    parts += [f"{key}={value!r}" for key, value in details.items()]
    log.info("%s", redact(" ".join(parts)))
