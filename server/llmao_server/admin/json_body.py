"""The body of an admin API ``POST``, read as JSON with finite numbers only.

JSON's ``NaN`` and ``Infinity`` and overflowing literals (``1e999``) are
refused before anything is kept: a stored pass is read back by the next one,
and a number that is not finite would break it there. The body is bounded
whatever its ``Content-Length`` says.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

from flask import request

from ..api_errors import RequestRefused

BODY_MAX_BYTES = 16 * 2**20


def read_json_body(max_bytes: int = BODY_MAX_BYTES) -> Any:
    """The request's JSON; 413 over ``max_bytes``, 400 if not JSON or not finite."""
    if request.content_length is not None and request.content_length > max_bytes:
        raise RequestRefused(413, "too_large", f"the body is over {max_bytes} bytes")
    data = request.stream.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise RequestRefused(413, "too_large", f"the body is over {max_bytes} bytes")
    try:
        return json.loads(data, parse_constant=refuse_constant, parse_float=finite_float)
    except NotFinite as exc:
        bad_body(f"numbers must be finite, not {exc}")
    except ValueError:
        bad_body("the body must be JSON (Content-Type: application/json)")


class NotFinite(ValueError):
    """A JSON number that is not a finite float: ``NaN``, ``Infinity``, ``1e999``."""


def refuse_constant(name: str) -> NoReturn:
    raise NotFinite(name)


def finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotFinite(text[:40])
    return value


def bad_body(message: str) -> NoReturn:
    # The code the admin API has always answered: its first body was the verdicts.
    raise RequestRefused(400, "bad_verdicts", message)
