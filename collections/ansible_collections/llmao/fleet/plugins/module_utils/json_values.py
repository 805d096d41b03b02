# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a value in a document llmao reads may be taken for: one rule per kind, for every reader.

Python's ``json`` reads ``NaN``, ``Infinity`` and integers of any size, and
counts ``true`` as the integer 1 (so does YAML). A figure, a time or a price
taken from a record, a listing or an answer is therefore checked here, never
with a bare ``isinstance``: a bool must not pass for 1, and a number that no
float can hold must not reach arithmetic that raises or compares as infinite.
A word that names a member of one of the core's enums (a state, a phase) is
looked up here too.
"""

from __future__ import annotations

import math
import sys
from enum import Enum
from typing import Any, TypeVar

FLOAT_MAX = sys.float_info.max
Member = TypeVar("Member", bound=Enum)


def is_number(value: Any) -> bool:
    """A finite int or float: not a bool, NaN, an infinity, nor an int beyond any float.

    Never raises (``math.isfinite`` would on an int too large for a float).
    """
    if isinstance(value, float):
        return math.isfinite(value)
    return is_integer(value) and -FLOAT_MAX <= value <= FLOAT_MAX


def is_integer(value: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def enum_member(kind: type[Member], value: Any) -> Member | None:
    """The member of ``kind`` whose value ``value`` is, or None for anything else (a word
    it does not know, another type, a list or an object)."""
    try:
        return kind(value)
    except ValueError:
        return None
