"""JSON from llmao or a file, read within bounds.

An assignment comes from the network or from the push path's file; either way its
size, its numbers and its nesting are bounded before they are converted, so a
hostile answer costs the box a refusal, never its memory or its CPU.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from typing import Any

from .errors import Refused

MAX_ANSWER_BYTES = 4 * 2**20

# A JSON number is refused before conversion when its text is longer or its exponent larger:
# int("9" * 10**6) and Fraction(Decimal("1e-999999999")) would hang the box.
MAX_NUMBER_CHARS = 64
MAX_EXPONENT = 400


def decode_json(raw: bytes, source: str) -> Any:
    """JSON with decimals kept exact, so pinned values render as they were written.

    Numbers are checked as text before they are converted, ``NaN`` and
    ``Infinity`` are refused, and so is nesting deeper than Python recurses.
    """
    try:
        return json.loads(raw.decode("utf-8"), parse_int=bounded_int,
                          parse_float=bounded_decimal, parse_constant=not_a_number)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(f"{source} is not valid JSON: {exc}") from None
    except RecursionError:
        raise Refused(f"{source} is nested too deeply to be an assignment") from None


def number_text(text: str) -> str:
    if len(text) > MAX_NUMBER_CHARS:
        raise Refused(f"a number of {len(text)} characters is not a value an assignment holds "
                      f"(at most {MAX_NUMBER_CHARS})")
    return text


def bounded_int(text: str) -> int:
    return int(number_text(text))


def bounded_decimal(text: str) -> Decimal:
    number = Decimal(number_text(text))
    if abs(number.adjusted()) > MAX_EXPONENT:
        raise Refused(f"the number {text} is out of any range an assignment uses")
    return number


def not_a_number(text: str) -> Decimal:
    raise Refused(f"{text} is not a number an assignment holds")


def load_payload(path: str, what: str = "payload") -> Any:
    """Read an assignment given with --payload (``-`` reads standard input), size bounded;
    or, ``what`` said, another JSON file given to the push path (--certificate)."""
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_ANSWER_BYTES + 1)
        else:
            with open(path, "rb") as payload:
                raw = payload.read(MAX_ANSWER_BYTES + 1)
    except OSError as exc:
        raise Refused(f"cannot read the {what} {path}: {exc.strerror}") from None
    if len(raw) > MAX_ANSWER_BYTES:
        raise Refused(f"the {what} {path} is over {MAX_ANSWER_BYTES} bytes")
    return decode_json(raw, f"{what} {path}")
