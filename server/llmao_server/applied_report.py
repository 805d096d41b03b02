"""The body of ``POST /vllm/applied``: what a box says it applied, checked before it is kept.

A box reports ``{"revision", "applied_at", "servers": [{"name", "port",
"served_model_name"}]}`` after it hands its programs to Supervisor. Every field
is bounded, so a caller holding the fleet key cannot grow the store beyond one
small row per box.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NoReturn

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import MAX_SERVERS_PER_BOX

from .api_errors import RequestRefused
from .store import AppliedReport, AppliedServer

APPLIED_MAX_BYTES = 16 * 1024
MAX_TEXT = 200


def read_applied_report(doc: Any, box: str, now: float) -> AppliedReport:
    """The report in ``doc`` (decoded JSON, or None when the body was not JSON); 400 if bad."""
    if not isinstance(doc, dict):
        bad("the body must be a JSON object (Content-Type: application/json)")
    revision = text_field(doc, "revision")
    applied_at = text_field(doc, "applied_at")
    try:
        datetime.fromisoformat(applied_at)
    except ValueError:
        bad("applied_at must be an ISO-8601 time, e.g. 2026-01-31T12:00:00Z")
    servers = doc.get("servers")
    if not isinstance(servers, list) or len(servers) > MAX_SERVERS_PER_BOX:
        bad(f"servers must be a list of at most {MAX_SERVERS_PER_BOX} servers")
    return AppliedReport(box, revision, applied_at,
                         tuple(read_server(server, index) for index, server in enumerate(servers)),
                         now)


def read_server(entry: Any, index: int) -> AppliedServer:
    where = f"servers[{index}]"
    if not isinstance(entry, dict):
        bad(f"{where} must be an object with name, port and served_model_name")
    port = entry.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
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
