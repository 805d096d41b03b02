"""The handover to supervisord: ``supervisorctl reread`` then ``update``.

The one handover of both paths (pull and push): ``update`` adds, restarts and drops
exactly the programs whose files changed, and starts nothing a person stopped.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

from .errors import HandoverFailed

# What ``supervisorctl update`` says it did to a program group, and our word for it.
UPDATE_LINE_RE = re.compile(r"^(\S+): (added|updated|removed) process group$", re.MULTILINE)


@dataclass
class Handover:
    """What supervisorctl said, and what ``update`` did to each program group it names."""

    said: list[str] = field(default_factory=list)
    actions: dict[str, str] = field(default_factory=dict)


def hand_over(timeout_s: float = 300.0) -> Handover:
    """``supervisorctl reread`` then ``update``, the one handover of both paths.

    ``update`` adds the programs supervisord lacks, restarts those whose file changed and
    drops those whose file is gone; it starts no program that is merely stopped.
    """
    handover = Handover()
    for verb in ("reread", "update"):
        try:
            done = subprocess.run(["supervisorctl", verb], capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HandoverFailed(f"programs written, but supervisorctl {verb} did not run: "
                                 f"{exc}") from None
        output = (done.stdout + done.stderr).strip()
        if done.returncode != 0:
            raise HandoverFailed(f"programs written, but supervisorctl {verb} failed (exit "
                                 f"{done.returncode}): {output}")
        handover.said.append(f"supervisorctl {verb}: {output or 'ok'}")
        if verb == "update":
            handover.actions = dict(UPDATE_LINE_RE.findall(done.stdout))
    return handover
