"""Where the box program talks: prose or one JSON object, every line masked.

No secret the run knows (fleet key, box token, bearers) reaches a terminal or a log;
the follow program's lines are stamped with the UTC time.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from .errors import InstallError
from .plan import FileChange, Plan
from .supervisor import Handover

MASK = "***"

ENV_BEARER_RE = re.compile(r'VLLM_API_KEY="[^"]*"')


def mask_text(text: str, secrets: Iterable[str]) -> str:
    """Hide every secret we know of, and any bearer in a program's environment line."""
    text = ENV_BEARER_RE.sub(f'VLLM_API_KEY="{MASK}"', text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    return text


def unified_diff(change: FileChange) -> str:
    before = (change.before or "").splitlines(keepends=True)
    after = (change.after or "").splitlines(keepends=True)
    return "".join(difflib.unified_diff(
        before, after,
        fromfile=str(change.path) if change.before is not None else "/dev/null",
        tofile=str(change.path) if change.after is not None else "/dev/null"))


class Console:
    """Where the program talks: prose on stdout, or stderr when --json owns stdout.

    Every line goes through the mask, so no secret reaches a terminal or a log. The
    follower writes one line per step, stamped with the UTC time (its log has no other
    clock): what supervisorctl said over several lines is joined with "; ".
    """

    def __init__(self, json_mode: bool, stamped: bool = False) -> None:
        self.json_mode = json_mode
        self.stamped = stamped
        self.secrets: set[str] = set()

    def mask(self, text: str) -> str:
        return mask_text(text, self.secrets)

    def line(self, text: str) -> str:
        if self.stamped:
            text = f"{utc_now()} " + "; ".join(part for part in text.splitlines() if part)
        return self.mask(text)

    def say(self, text: str) -> None:
        print(self.line(text), file=sys.stderr if self.json_mode else sys.stdout, flush=True)

    def warn(self, text: str) -> None:
        print(self.line(f"warning: {text}"), file=sys.stderr, flush=True)

    def fail(self, error: InstallError) -> None:
        message = self.mask(str(error))
        print(f"install_set: {message}", file=sys.stderr, flush=True)
        if self.json_mode:
            print(json.dumps({"failed": True, "rc": error.exit_code, "msg": message}))

    def changes(self, changes: Iterable[FileChange], dry_run: bool) -> None:
        """One line per file; a dry run in prose adds its diff (the JSON object carries it)."""
        for change in changes:
            removing = change.after is None
            if dry_run:
                self.say(f"would {'remove' if removing else 'write'} {change.path}")
                if not self.json_mode:
                    self.say(unified_diff(change).rstrip("\n"))
            else:
                self.say(f"{'removed' if removing else 'wrote'} {change.path}")

    def result(self, plan: Plan, revision: str | None, dry_run: bool, record: Path,
               handover: Handover | None = None) -> None:
        """The closing word: the JSON object for the push role, or a line when nothing changed.

        ``programs`` gives each program by the name supervisord knows it, what happened to its
        file, and what ``update`` did to it (null when it did nothing or did not run).
        """
        actions = handover.actions if handover else {}
        if self.json_mode:
            print(json.dumps({
                "changed": bool(plan.changes), "dry_run": dry_run,
                "written": [str(c.path) for c in plan.changes if c.after is not None],
                "removed": [str(c.path) for c in plan.changes if c.after is None],
                "unchanged": [str(path) for path in plan.unchanged],
                "revision": revision,
                "record": str(record),
                "handed_over": handover is not None,
                "programs": [{"name": status.name, "file": status.file,
                              "supervisord": actions.get(status.name)}
                             for status in plan.statuses],
                "diff": [{"path": str(c.path), "before": self.mask(c.before or ""),
                          "after": self.mask(c.after or "")} for c in plan.changes],
            }, indent=2))
        elif not plan.changes:
            self.say(f"unchanged: revision {revision} is applied, nothing to do")


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
