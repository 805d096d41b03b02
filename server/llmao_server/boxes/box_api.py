"""The box API: ``GET /vllm/config`` (the seed's protocol), ``POST /vllm/applied`` and
``POST /vllm/turn`` (a following box asks for its turn to change, :mod:`.turns`) and
``POST /vllm/cert`` (a box's certificate request, :mod:`.box_certs`).

The fleet key is the gate, checked in constant time; the box is who the
request claims to be (``X-LLMAO-Host``, else the leftmost ``X-Forwarded-For``,
else the peer, by the core's rule). A known box gets the bytes the core built
at load. The access log (:mod:`..access_log`) writes every request with the claim
and where it came from, and nothing else a caller sent.

This is a plain WSGI layer in front of the whole app rather than a blueprint:
a boot storm hits ``GET /vllm/config`` and nothing else, and Flask's request
machinery alone costs more than the rest of the answer (a minimal Flask route
under the same gunicorn reached 0.6-0.7 of a bare WSGI app, below P1 in
bench/README.md). Every other path goes on to the access log, HSTS and Flask;
a box request passes through no other layer: this one writes its HSTS header
and its access line. The fetch a boot storm repeats (a confirmed box token
this worker has checked before), and a following box's check that names the
box's current revision (answered 304), are answered by
:meth:`BoxApi.confirmed_fetch` from what it made for that box the first time;
every other request, a refusal above all, is decided by the full path.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any, NamedTuple

from werkzeug.wsgi import get_input_stream

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import (
    APPLIED_PATH,
    BOOTSTRAP_ENVIRON,
    BOX_API_PREFIX,
    CERT_PATH,
    CONFIG_PATH,
    HOST_ENVIRON,
    HOST_HEADER,
    TOKEN_ENVIRON,
    TOKEN_HEADER,
    TURN_PATH,
    environ_key,
)
from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import (
    FORWARDED_HEADER,
    claimed_box_name,
)
from ansible_collections.llmao.fleet.plugins.module_utils.intent import BoxAssignment
from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import BOX_NAME_RE

from ..access_log import NO_CLAIM, AccessLog, LineHead
from ..api_errors import JSON, RequestRefused, error_answer
from ..bearer_header import presented_bearer
from ..redaction import clipped
from ..state import ServerState
from ..tls.hsts import HSTS_HEADER, over_https
from .applied_report import APPLIED_MAX_BYTES, read_applied_report
from .bindings import FETCH, admit_box, admitted_by_memory
from .box_certs import CERT_REQUEST_MAX_BYTES, issue_certificate
from .turns import AskViews, ask_turn, read_ask

STATUS_LINES = {status.value: f"{status.value} {status.phrase}" for status in HTTPStatus}
OK = HTTPStatus.OK.value
NOT_MODIFIED = HTTPStatus.NOT_MODIFIED.value
# What gunicorn answers when the app raises.
INTERNAL_ERROR = HTTPStatus.INTERNAL_SERVER_ERROR.value
# Headers of every answer, made once.
JSON_TYPE = ("Content-Type", JSON)
NO_STORE = ("Cache-Control", "no-store")
# Where WSGI keeps the other header a claim is read from.
FORWARDED_ENVIRON = environ_key(FORWARDED_HEADER)
IF_NONE_MATCH_ENVIRON = "HTTP_IF_NONE_MATCH"
# How a request claims its box when it names it in X-LLMAO-Host (the core's rule).
HEADER_CLAIM = "header"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# What a route answers: status, body and the headers of its own.
Answer = tuple[int, bytes, list[tuple[str, str]]]


class Prepared(NamedTuple):
    """A configured box's answer to a fetch (200) or to a check naming its revision (304),
    made once: its status, body, every header but HSTS, and the head of its access line
    (None without an access log)."""

    status: int
    body: bytes
    headers: list[tuple[str, str]]
    line: LineHead | None


class BoxRequest:
    """The parts of a WSGI request the box API reads."""

    __slots__ = ("environ", "method", "path", "peer", "authorization", "if_none_match", "claim",
                 "issued_token")

    def __init__(self, environ: dict[str, Any]):
        self.environ = environ
        self.method: str = environ.get("REQUEST_METHOD", "")
        self.path: str = environ.get("PATH_INFO", "")
        self.peer: str | None = environ.get("REMOTE_ADDR")
        self.authorization: str = environ.get("HTTP_AUTHORIZATION", "")
        self.if_none_match: str = environ.get(IF_NONE_MATCH_ENVIRON, "")
        # The box name the request claims, and how (``header``, ``forwarded``, ``peer``);
        # the access log shows it. The core's rule reads the two headers it names from a
        # plain dict (werkzeug's full header map cost a fetch more than the rest of its claim).
        self.claim = claimed_box_name(
            {HOST_HEADER: environ.get(HOST_ENVIRON),
             FORWARDED_HEADER: environ.get(FORWARDED_ENVIRON)}, self.peer)
        # A box token this request's answer hands out (it bound the box's name).
        self.issued_token: str | None = None

    def json_body(self, limit: int = APPLIED_MAX_BYTES) -> Any:
        """The body decoded as JSON (None when it is not JSON); 413 beyond ``limit`` bytes."""
        data = get_input_stream(self.environ, max_content_length=limit).read()
        try:
            return json.loads(data)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python's stack
            return None


def check_fleet_key(state: ServerState, request: BoxRequest) -> None:
    """503 when the server has no fleet key, 403 unless the request presents it."""
    if state.fleet_key is None:
        raise RequestRefused(503, "fleet_key_not_configured",
                             "this server has no fleet key (fleet.key in config.yaml is missing, "
                             "empty or CHANGE_ME); no box can be served until it is set")
    if presented_bearer(request.authorization) is None:
        raise RequestRefused(403, "fleet_key_required",
                             "present the fleet key as 'Authorization: Bearer <fleet key>'")
    if not presents_fleet_key(state, request.authorization):
        raise RequestRefused(403, "fleet_key_wrong", "the fleet key is not this fleet's")


def presents_fleet_key(state: ServerState, authorization: str) -> bool:
    """Whether an ``Authorization`` value presents this fleet's key, compared in constant
    time (False when the server has none).

    The value the box program sends (``Bearer <key>``) is matched whole first: a quarter
    of the cost of reading it by the bearer rule, which decides every other spelling."""
    expected = state.fleet_bearer
    if (expected is not None and authorization.isascii()
            and hmac.compare_digest(authorization, expected)):
        return True
    presented = presented_bearer(authorization)
    return (presented is not None and state.fleet_key is not None
            and hmac.compare_digest(presented.encode("utf-8"), state.fleet_key))


def resolve_box(state: ServerState, request: BoxRequest) -> BoxAssignment:
    """The assignment of the box this request speaks for; an unknown box is remembered; a
    bound box must present its token (:mod:`.bindings`), and a ``GET`` may bind one.

    An empty name (``X-LLMAO-Host:`` with no value) is present, so it is the only
    key, as the protocol says; no box can be called that, so it is unknown (404),
    but it is a broken box template rather than a box to approve: not remembered.
    Nor is any other name no box can have (the core's box name rule: printable
    ASCII, 253 characters at most): it could never be approved, and remembering
    it would let a caller with the key fill the dashboard's list with kilobytes
    of junk.
    """
    check_fleet_key(state, request)
    name, _ = request.claim
    if not name:
        raise RequestRefused(404, "empty_host",
                             "the box name is empty: send X-LLMAO-Host with the box's name in "
                             "fleet.hosts (LLMAO_HOST on the box), or leave the header out")
    assignment = state.served_assignment(name)
    if assignment is None and request.environ.get(BOOTSTRAP_ENVIRON) is not None:
        assignment = state.enrolled_assignment(name, time.time())
    if assignment is None:
        if BOX_NAME_RE.match(name):
            state.note_unknown(name, time.time())
        raise RequestRefused(404, "unknown_host",
                             f"box {clipped(name)!r} is not in fleet.hosts; add it there, or "
                             "ask an admin to approve it")
    request.issued_token = admit_box(state, request.environ, assignment.box, request.peer,
                                     may_bind=request.method == "GET")
    return assignment


def fetch_config(state: ServerState, request: BoxRequest) -> Answer:
    """``GET /vllm/config``: the box's assignment as built at load; the fetch time is noted.

    The revision is the ``ETag``. A box that already holds it says so with
    ``If-None-Match`` and gets ``304`` and no body: a following box re-checks
    often, and the check should cost less than a fetch. A GET with
    ``If-None-Match`` is such a follow check, whatever it answers: its time is
    noted as the box's last check, not as a fetch, because a fetch starts its
    servers' Loading window and a check every few seconds would keep a failing
    server Loading forever (a following box fetches again, without the header,
    when it applies). ``HEAD`` answers the same (the body is dropped on the way
    out) but notes nothing: nothing was handed to a box.
    """
    assignment = resolve_box(state, request)
    if request.method == "GET":
        note = state.note_check if request.if_none_match else state.note_fetch
        note(assignment.box, time.time())
    etag = assignment.etag
    headers = [("ETag", etag)]
    if request.issued_token is not None:
        headers.append((TOKEN_HEADER, request.issued_token))
    if request.if_none_match and names_etag(request.if_none_match, etag):
        return 304, b"", headers
    return 200, assignment.body, headers


def names_etag(if_none_match: str, etag: str) -> bool:
    """Whether an ``If-None-Match`` value matches: ``*``, or the tag in its comma-separated
    list, compared weakly (a ``W/`` prefix does not count), as RFC 9110 says for this header."""
    if if_none_match.strip() == "*":
        return True
    return any(tag.strip().removeprefix("W/") == etag for tag in if_none_match.split(","))


def report_applied(state: ServerState, request: BoxRequest) -> Answer:
    """``POST /vllm/applied``: keep what the box applied; say whether it is what we intend."""
    assignment = resolve_box(state, request)
    report = read_applied_report(request.json_body(), assignment.box, time.time())
    state.store.record_applied(report)
    return 200, json.dumps({"host": assignment.box, "revision": report.revision,
                            "intended_revision": assignment.revision,
                            "current": report.revision == assignment.revision}).encode("utf-8"), []


def request_turn(state: ServerState, request: BoxRequest) -> Answer:
    """``POST /vllm/turn``: ``{"revision", "servers": [names]}``; asking again is polling,
    within the box's rate (429 with ``Retry-After`` beyond it), checked before the body."""
    assignment = resolve_box(state, request)
    AskViews.of(state).take_ask(assignment.box, time.monotonic())
    _, revision, names = read_ask(request.json_body(), with_box=False)
    decided = ask_turn(state, assignment.box, assignment.revision, revision, names,
                       f"box {assignment.box}", request.peer)
    return 200, json.dumps(decided).encode("utf-8"), []


def request_certificate(state: ServerState, request: BoxRequest) -> Answer:
    """``POST /vllm/cert``: ``{"csr": PEM}`` → the box's certificate (:mod:`.box_certs`)."""
    assignment = resolve_box(state, request)
    body = request.json_body(CERT_REQUEST_MAX_BYTES)
    return 200, issue_certificate(state, assignment.box, request.peer, body), []


ROUTES: dict[str, tuple[tuple[str, ...], Callable[[ServerState, BoxRequest], Answer]]] = {
    CONFIG_PATH: (("GET", "HEAD"), fetch_config),
    APPLIED_PATH: (("POST",), report_applied),
    TURN_PATH: (("POST",), request_turn),
    CERT_PATH: (("POST",), request_certificate),
}


class BoxApi:
    """WSGI layer in front of the whole app: answers every ``/vllm/`` path itself, with its
    access line and HSTS, and hands the rest to ``inner``.

    It is the outermost layer rather than one inside the access log and HSTS layers,
    so that a box request passes through no wrapper: a boot storm's fetch is a
    handful of calls (:meth:`confirmed_fetch`), its access line written by
    ``access_log`` (None: ``--no-access-log``) from what this layer already holds.
    """

    def __init__(self, state: ServerState, inner: WsgiApp, access_log: AccessLog | None = None):
        self.state = state
        self.inner = inner
        self.access_log = access_log
        self.stats = state.box_api_stats
        # Box name -> a configured box's answer to a fetch (200), and to a check naming its
        # revision (304), each made the first time this worker gives it (one per box of
        # fleet.hosts at most).
        self._fetched: dict[str, Prepared] = {}
        self._checked: dict[str, Prepared] = {}

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if not path.startswith(BOX_API_PREFIX):
            return self.inner(environ, start_response)
        started = time.perf_counter()
        # What the access line says if this raises: gunicorn then answers 500.
        status, claim, line, seconds = INTERNAL_ERROR, NO_CLAIM, None, None
        try:
            prepared = self.confirmed_fetch(environ) if path == CONFIG_PATH else None
            if prepared is None:
                request = BoxRequest(environ)
                claim = request.claim
                status, body, headers = self.answer(request)
                headers = answer_headers(status, body, headers)
            else:
                status, body, headers, line = prepared
            seconds = time.perf_counter() - started
            self.stats.observe(path, status, seconds)
            if over_https(environ):
                headers = [*headers, HSTS_HEADER]
            start_response(STATUS_LINES[status], headers)
            return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [body]
        finally:
            if self.access_log is not None:
                if seconds is None:
                    seconds = time.perf_counter() - started
                if line is None:
                    self.access_log.write(environ, status, seconds, claim)
                else:
                    self.access_log.write_after(line, environ, seconds)

    def confirmed_fetch(self, environ: dict[str, Any]) -> Prepared | None:
        """The answer to the fetch a boot storm is made of, or to the check a following box
        repeats, or None for any other request.

        A ``GET`` that presents the fleet key, names a box of ``fleet.hosts`` as it is
        written there in ``X-LLMAO-Host``, and presents a token the binding rule admits on
        the binding this worker holds (:func:`.bindings.admitted_by_memory`, the same ask as
        the full path's; any token with binding off): without
        ``If-None-Match``, :func:`fetch_config` would answer it 200 with the box's bytes and
        note its fetch; with one that names the box's ``ETag``, 304 and note its check.
        So does this, without building a request. Anything else (an ``If-None-Match`` that
        names another revision too, a refusal above all) takes the full path, which decides
        it alone.
        """
        if environ.get("REQUEST_METHOD") != "GET":
            return None
        state = self.state
        if not presents_fleet_key(state, environ.get("HTTP_AUTHORIZATION", "")):
            return None
        name = environ.get(HOST_ENVIRON, "")
        fetched = self._fetched.get(name)
        if fetched is None:
            # A fleet.hosts key is a normalised name: found as sent, the claim is that name.
            assignment = state.fleet.assignments.get(name)
            if assignment is None:
                return None
            fetched = self._fetched[name] = self.prepare(name, assignment, OK)
        if state.binds_boxes:
            token = environ.get(TOKEN_ENVIRON)
            if token is None or not admitted_by_memory(state.bindings, name, FETCH, token,
                                                       environ.get(BOOTSTRAP_ENVIRON)):
                return None
        if_none_match = environ.get(IF_NONE_MATCH_ENVIRON)
        if if_none_match is None:
            state.recorder.note_fetch(name, time.time())
            return fetched
        assignment = state.fleet.assignments[name]
        # As a following box sends it, the tag alone; else the header's whole rule.
        if if_none_match != assignment.etag and not names_etag(if_none_match, assignment.etag):
            return None
        checked = self._checked.get(name)
        if checked is None:
            checked = self._checked[name] = self.prepare(name, assignment, NOT_MODIFIED)
        state.recorder.note_check(name, time.time())
        return checked

    def prepare(self, name: str, assignment: BoxAssignment, status: int) -> Prepared:
        """An answer :meth:`confirmed_fetch` gives box ``name``: :func:`fetch_config`'s 200
        or 304, and the head of the access line :meth:`__call__` would write for it."""
        log = self.access_log
        body = assignment.body if status == OK else b""
        return Prepared(status, body,
                        answer_headers(status, body, [("ETag", assignment.etag)]),
                        None if log is None else log.head("GET", CONFIG_PATH, status,
                                                          (name, HEADER_CLAIM)))

    def answer(self, request: BoxRequest) -> Answer:
        """Status, body and extra headers; every exception becomes a JSON error."""
        route = ROUTES.get(request.path)
        try:
            if route is None:
                raise RequestRefused(404, "not_found",
                                     f"no box API at {request.path}; see GET /vllm/config")
            methods, handler = route
            if request.method not in methods:
                raise RequestRefused(405, "method_not_allowed",
                                     f"{request.path} takes {' or '.join(methods)}")
            return handler(self.state, request)
        except Exception as exc:  # the one error handler of the box API: every fault answers
            status, body = error_answer(exc, self.state.redact)
            extra = list(exc.headers.items()) if isinstance(exc, RequestRefused) else []
            if status == 405 and route:
                extra.append(("Allow", ", ".join(route[0])))
            return status, body, extra


def answer_headers(status: int, body: bytes, own: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Every header of an answer but HSTS: a route's ``own`` after the common ones. A 304
    has no body, so no length or type of one (RFC 9110 15.4.5)."""
    if status == NOT_MODIFIED:
        return [NO_STORE, *own]
    return [JSON_TYPE, ("Content-Length", str(len(body))), NO_STORE, *own]
