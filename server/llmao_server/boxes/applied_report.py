"""The body of ``POST /vllm/applied``: what a box says it applied, checked before it is kept.

A box reports ``{"revision", "applied_at", "servers": [{"name", "port",
"served_model_name"}]}`` after it hands its programs to Supervisor, and, when it
read its cards, ``"cards": [{"index", "name", "memory_total_mib"}]`` and
``"placement": {server name: [card index, ...]}``. Every field is bounded, so a
caller holding the fleet key cannot grow the store beyond one small row per box;
a placement must name the report's own servers and cards.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NoReturn

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import MAX_SERVERS_PER_BOX
from ansible_collections.llmao.fleet.plugins.module_utils.json_values import is_integer
from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import revision_problem

from ..api_errors import RequestRefused
from ..store import AppliedCard, AppliedReport, AppliedServer

APPLIED_MAX_BYTES = 16 * 1024
MAX_TEXT = 200
# A box's cards, as the box program reads them (its MAX_CARDS), and what one may hold.
MAX_CARDS = 64
MAX_CARD_NAME = 64
MAX_CARD_MIB = 10**7
MAX_GPUS = 16


def read_applied_report(doc: Any, box: str, now: float) -> AppliedReport:
    """The report in ``doc`` (decoded JSON, or None when the body was not JSON); 400 if bad."""
    if not isinstance(doc, dict):
        bad("the body must be a JSON object (Content-Type: application/json)")
    revision = doc.get("revision")
    if problem := revision_problem(revision):
        bad(f"revision {problem}")
    applied_at = text_field(doc, "applied_at")
    try:
        datetime.fromisoformat(applied_at)
    except ValueError:
        bad("applied_at must be an ISO-8601 time, e.g. 2026-01-31T12:00:00Z")
    servers = doc.get("servers")
    if not isinstance(servers, list) or len(servers) > MAX_SERVERS_PER_BOX:
        bad(f"servers must be a list of at most {MAX_SERVERS_PER_BOX} servers")
    read = tuple(read_server(server, index) for index, server in enumerate(servers))
    cards = read_cards(doc.get("cards"))
    placement = read_placement(doc.get("placement"), {s.name for s in read},
                               {card.index for card in cards})
    return AppliedReport(box, revision, applied_at, read, now, cards, placement)


def read_cards(value: Any) -> tuple[AppliedCard, ...]:
    """The box's cards, by index (absent: unknown, an empty tuple)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_CARDS:
        bad(f"cards must be a list of at most {MAX_CARDS} cards")
    cards = []
    for position, entry in enumerate(value):
        where = f"cards[{position}]"
        if not isinstance(entry, dict):
            bad(f"{where} must be an object with index, name and memory_total_mib")
        index = bounded_int(entry.get("index"), 0, MAX_CARDS - 1, f"{where}.index")
        total = bounded_int(entry.get("memory_total_mib"), 0, MAX_CARD_MIB,
                            f"{where}.memory_total_mib")
        name = text_field(entry, "name", where)
        if len(name) > MAX_CARD_NAME:
            bad(f"{where}.name must be at most {MAX_CARD_NAME} characters")
        cards.append(AppliedCard(index, name, total))
    if len({card.index for card in cards}) != len(cards):
        bad("cards: an index appears twice")
    return tuple(sorted(cards, key=lambda card: card.index))


def read_placement(value: Any, servers: set[str], indices: set[int]
                   ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Each server's cards: the report's own servers, on the report's own cards."""
    if value is None:
        return ()
    if not isinstance(value, dict) or len(value) > MAX_SERVERS_PER_BOX:
        bad(f"placement must be an object of at most {MAX_SERVERS_PER_BOX} servers")
    placement = []
    for name, chosen in value.items():
        if name not in servers:
            bad("placement names a server the report does not list")
        if not isinstance(chosen, list) or not 0 < len(chosen) <= MAX_GPUS \
                or len(set(map(repr, chosen))) != len(chosen):
            bad(f"placement.{name} must be a list of 1 to {MAX_GPUS} distinct card indices")
        for index in chosen:
            if bounded_int(index, 0, MAX_CARDS - 1, f"placement.{name}") not in indices:
                bad(f"placement.{name} names a card the report does not list")
        placement.append((name, tuple(sorted(chosen))))
    return tuple(sorted(placement))


def bounded_int(value: Any, low: int, high: int, name: str) -> int:
    if not is_integer(value) or not low <= value <= high:
        bad(f"{name} must be an integer from {low} to {high}")
    return value


def read_server(entry: Any, index: int) -> AppliedServer:
    where = f"servers[{index}]"
    if not isinstance(entry, dict):
        bad(f"{where} must be an object with name, port and served_model_name")
    port = entry.get("port")
    if not is_integer(port) or not 0 < port < 65536:
        bad(f"{where}.port must be a port number")
    return AppliedServer(text_field(entry, "name", where), port,
                         text_field(entry, "served_model_name", where))


def text_field(doc: dict[str, Any], key: str, where: str = "") -> str:
    """A non-empty printable string of at most :data:`MAX_TEXT` characters."""
    value = doc.get(key)
    name = f"{where}.{key}" if where else key
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        bad(f"{name} must be a non-empty string of at most {MAX_TEXT} characters")
    if not value.isprintable():
        bad(f"{name} must not hold control characters")
    return value


def bad(message: str) -> NoReturn:
    raise RequestRefused(400, "bad_applied_report", message)
