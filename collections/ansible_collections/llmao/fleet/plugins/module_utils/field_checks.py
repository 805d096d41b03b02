# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Typed reads of one YAML mapping, each failure recorded against its key path.

Both loaders read through :class:`Section`, so every key of both files is
checked, defaulted and reported the same way. A failed read records a problem
and returns ``None``; the loader carries on so all problems surface together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .bearer import is_placeholder
from .config_errors import Problems, key_path
from .json_values import is_integer, is_number
from .secret_strength import MAKE_ONE, secret_weakness

MISSING = object()
# Knobs without a bound of their own still have one: YAML ints are unbounded.
DEFAULT_MAXIMUM = 10**9


def type_name(value: Any) -> str:
    """The YAML word for a value's type, for messages."""
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "a list", dict: "a mapping", type(None): "empty"}
    return names.get(type(value), type(value).__name__)


def shown(value: Any) -> str:
    """A value as a message quotes it: short, whatever was written."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Section:
    """One mapping of one file, read key by key; unknown keys are reported on :meth:`close`."""

    def __init__(self, problems: Problems, source: str, path: tuple, value: Any,
                 *, required: bool = False):
        self.problems = problems
        self.source = source
        self.path = path
        self.seen: set[str] = set()
        self.valid = isinstance(value, Mapping)
        if value is None and not required:
            value, self.valid = {}, True
        if not self.valid:
            self.problem("", "is required" if value is None
                         else f"must be a mapping, not {type_name(value)}")
            value = {}
        self.mapping: Mapping = value

    def problem(self, key: object, message: str) -> None:
        parts = self.path + ((key,) if key != "" else ())
        self.problems.add(self.source, key_path(*parts), message)

    def raw(self, key: str, default: Any = MISSING) -> Any:
        """The value as written, or ``default`` (``MISSING`` when absent and no default)."""
        self.seen.add(key)
        return self.mapping.get(key, default)

    def sub(self, key: str, *, required: bool = False) -> Section:
        return Section(self.problems, self.source, self.path + (key,), self.raw(key, None),
                       required=required)

    def text(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        value = self.raw(key)
        if value is MISSING or value is None:
            if required:
                self.problem(key, "is required")
            return default
        if not isinstance(value, str):
            self.problem(key, f"must be a string, not {type_name(value)}")
            return default
        return value

    def token(self, key: str) -> str | None:
        """A token somebody presents to llmao: unset or ``CHANGE_ME`` leaves it off;
        anything else must be strong (:func:`secret_strength.secret_weakness`)."""
        value = self.text(key)
        if is_placeholder(value):
            return value
        weakness = secret_weakness(value)
        if weakness:
            self.problem(key, f"{weakness}; a token must be at least 32 printable ASCII "
                              f"characters. Make one with: {MAKE_ONE}")
        return value

    def integer(self, key: str, default: int | None = None, *, minimum: int = 1,
                maximum: int = DEFAULT_MAXIMUM) -> int | None:
        value = self.raw(key)
        if value is MISSING or value is None:
            return default
        if not is_integer(value) or not minimum <= value <= maximum:
            self.problem(key, f"must be an integer from {minimum} to {maximum}, "
                              f"not {shown(value)}")
            return default
        return value

    def number(self, key: str, default: float | None = None, *,
               maximum: float = DEFAULT_MAXIMUM, minimum: float | None = None) -> float | None:
        """A finite number (int or float) above 0, or from ``minimum`` when given, up to
        ``maximum``: ``.nan``, ``.inf`` refused."""
        value = self.raw(key)
        if value is MISSING or value is None:
            return default
        if not is_number(value) or value > maximum \
                or not (value > 0 if minimum is None else value >= minimum):
            low = "above 0" if minimum is None else f"from {minimum:g}"
            self.problem(key, f"must be a finite number {low} and at most {maximum}, "
                              f"not {shown(value)}")
            return default
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.raw(key)
        if value is MISSING or value is None:
            return default
        if not isinstance(value, bool):
            self.problem(key, f"must be true or false, not {value!r}")
            return default
        return value

    def close(self) -> None:
        """Report keys nobody read: in a hand-written file they are typos."""
        for key in self.mapping:
            if key not in self.seen:
                self.problem(key, "unknown key")
