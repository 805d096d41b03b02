# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's audit log: one JSON line per change a task made, beside ``config.yaml``.

Every module that changes something outside the controller (a LiteLLM route, a
rollout turn) appends here, so an operator reads one file for what happened.
No secret is ever written: callers pass ids, names, revisions and reasons only.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from .fleet import Fleet

AUDIT_LOG_NAME = "llmao-audit.jsonl"
AUDIT_LOG_OPTION: dict[str, dict[str, Any]] = {"audit_log": {"type": "path"}}


def audit_path(fleet: Fleet, given: str | None) -> str:
    """The file given, else ``llmao-audit.jsonl`` in the folder of ``config.yaml``."""
    return given or os.path.join(os.path.dirname(os.path.abspath(fleet.config_path)),
                                 AUDIT_LOG_NAME)


def stamped(entry: dict[str, Any], now: float) -> dict[str, Any]:
    """The entry with its time, as a reader sorts it (``time``) and reads it (``at``)."""
    return {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "time": now, **entry}


def append_audit(path: str, entry: dict[str, Any]) -> None:
    """One line per change, appended in one write so concurrent runs never interleave a line."""
    line = json.dumps(entry, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)
