"""Keeping secrets out of the log.

The server logs what callers send (a claimed box name, ``X-Forwarded-For``)
and tracebacks of its own faults. A caller may put a secret in any header, and
an exception message may quote one, so every line is passed through
:class:`Redactor` before it is written: the fleet's own secrets by value, and
anything shaped like a vLLM bearer (the fleet has too many to list).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ansible_collections.llmao.fleet.plugins.module_utils.bearer import BEARER_PREFIX
from ansible_collections.llmao.fleet.plugins.module_utils.config_file import Settings

MASK = "<redacted>"
# How much of one value a caller sent (a claimed name, X-Forwarded-For, a path) a
# line shows: enough for any real box name or proxy chain, never kilobytes.
SHOWN_LENGTH = 100
CUT_MARK = "…"
BEARER_SHAPE = re.compile(re.escape(BEARER_PREFIX) + r"[A-Za-z0-9_\-]*")


class Redactor:
    """Replaces every known secret, and every bearer-shaped token, with :data:`MASK`."""

    def __init__(self, secrets: Iterable[str | None]):
        # Longest first, so a secret that contains another is hidden whole.
        self.secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))

    @classmethod
    def for_settings(cls, settings: Settings) -> Redactor:
        """Every secret ``config.yaml`` holds, placeholders included (they may be real)."""
        return cls(settings.secrets())

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return BEARER_SHAPE.sub(MASK, text) if BEARER_PREFIX in text else text

    def shown(self, value: str | None) -> str:
        """A value a caller sent, as a log line shows it: redacted, then cut, then quoted.

        Redacting first means a cut never leaves the head of a secret behind.
        """
        return "None" if value is None else repr(clipped(self(value)))


def clipped(text: str, limit: int = SHOWN_LENGTH) -> str:
    """``text`` cut to ``limit`` characters, marked when it was cut."""
    return text if len(text) <= limit else text[:limit] + CUT_MARK
