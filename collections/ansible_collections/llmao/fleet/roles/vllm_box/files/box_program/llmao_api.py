"""The box's calls of llmao's box API: the fetch, the turn, with the box's identity.

Every call carries the fleet key, the box's name, its box token and its instance id
(docs/box-identity.md); the fetch also presents a bootstrap token once, while no box
token is kept, and keeps the box token llmao hands out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import (
    BOOTSTRAP_HEADER,
    CONFIG_PATH,
    HOST_HEADER,
    INSTANCE_HEADER,
    TOKEN_HEADER,
    TURN_PATH,
)

from .answers import clean_text, refusal
from .errors import Refused
from .json_input import decode_json
from .retries import with_retries
from .settings import Settings, keep_token, read_token
from .transport import http_request

USER_AGENT = "llmao-install-set/1"


def auth_headers(settings: Settings) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {settings.fleet_key}",
               "Accept": "application/json", "User-Agent": USER_AGENT}
    if settings.host is not None:
        headers[HOST_HEADER] = settings.host
    token = read_token(settings)
    if token is not None:
        headers[TOKEN_HEADER] = token
    if settings.instance is not None:
        headers[INSTANCE_HEADER] = settings.instance
    return headers


def call_llmao(settings: Settings, method: str, path: str, say: Callable[[str], None],
               body: bytes | None = None, attempts: int | None = None,
               extra: Mapping[str, str] | None = None,
               again: Iterable[int] = ()) -> tuple[int, bytes, dict[str, str]]:
    """One call of the box protocol, with the fleet key, the name and the box token, retried
    as :func:`with_retries` says: its status, body and the protocol headers heard."""
    url = f"{settings.url}{path}"
    headers = {**auth_headers(settings), **(extra or {})}
    if body is not None:
        headers["Content-Type"] = "application/json"
    heard: dict[str, str] = {}
    status, answer = with_retries(
        lambda: http_request(method, url, headers, body, settings.timeout_s, heard),
        attempts or settings.attempts, settings.backoff_s, f"{method} {url}", say,
        heard=heard, rate_wait_s=settings.rate_wait_s, again=again)
    return status, answer, heard


def fetch_assignment(settings: Settings, say: Callable[[str], None],
                     applied_revision: str | None = None, attempts: int | None = None) -> Any:
    """GET the box's assignment from llmao and return the decoded JSON.

    Naming the ``applied_revision`` makes it a follow check (``If-None-Match``): None
    when llmao answers 304, that revision is still the intended one. While the box keeps no
    box token, the bootstrap token (when given) goes with it: llmao binds the name to this
    box and hands out the box token, kept before anything else happens.
    """
    extra = {} if applied_revision is None else {"If-None-Match": f'"{applied_revision}"'}
    enrolling = settings.bootstrap_token is not None and read_token(settings) is None
    if enrolling:
        extra[BOOTSTRAP_HEADER] = settings.bootstrap_token
    status, body, heard = call_llmao(settings, "GET", CONFIG_PATH, say, attempts=attempts,
                                     extra=extra)
    if status in (200, 304):
        keep_token(settings, heard.get(TOKEN_HEADER))
        if enrolling and heard.get(TOKEN_HEADER):
            say(f"enrolled: llmao bound {settings.host or 'this address'} to this box with "
                f"the bootstrap token; the box token is kept in {settings.token_path}")
    if status == 304 and applied_revision is not None:
        return None
    if status != 200:
        raise refusal(status, body, settings.host)
    return decode_json(body, f"llmao's answer from {settings.url}{CONFIG_PATH}")


@dataclass(frozen=True)
class TurnAnswer:
    """llmao's answer to ``POST /vllm/turn``: whether the box may change, and when to apply."""

    granted: bool
    phase: str | None
    apply: bool
    why: str


def ask_turn(settings: Settings, say: Callable[[str], None], revision: str,
             servers: list[str]) -> TurnAnswer | None:
    """Ask llmao once for the turn to move these servers to ``revision``.

    None when llmao answers 409: it no longer intends that revision.
    """
    url = f"{settings.url}{TURN_PATH}"
    body = json.dumps({"revision": revision, "servers": servers}).encode("utf-8")
    status, answer = call_llmao(settings, "POST", TURN_PATH, say, body, attempts=1)[:2]
    if status == 409:
        return None
    if status != 200:
        raise refusal(status, answer, settings.host)
    doc = decode_json(answer, f"llmao's answer from {url}")
    if not (isinstance(doc, dict) and isinstance(doc.get("granted"), bool)
            and isinstance(doc.get("apply"), bool)):
        raise Refused(f"llmao's answer from {url} is not a turn: granted and apply must be "
                      "true or false")
    phase, why = doc.get("phase"), doc.get("why")
    return TurnAnswer(granted=doc["granted"], apply=doc["apply"],
                      phase=clean_text(phase) if isinstance(phase, str) else None,
                      why=clean_text(why) if isinstance(why, str) else "")
