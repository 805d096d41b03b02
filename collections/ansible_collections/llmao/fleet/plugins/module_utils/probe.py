# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probing vLLM servers at their public addresses, many at once.

``/health`` takes no key and only says something answers; ``/v1/models`` with
the bearer says it is ours and serving the model. A 401 is kept apart from
every other failure because it means "someone else is here", not "down".

Every probe of a pass runs in the calling thread, as a small state machine that
one ``selectors`` loop drives: connect, shake hands under TLS, send, read the
answers as their bytes arrive (:mod:`http_answer`). Waiting costs a probe no
thread, so a pass over 300 slow servers costs a few slow answers, not 300 of
them, and the controller's CPU goes to reading answers, not to threads. A
server whose ``/health`` answers is scraped: over plain HTTP its ``/metrics`` (at
the server root, beside ``/v1``) is asked for on the ``/health`` connection while
``/v1/models`` is asked on a second one, so both slow answers are in flight at
once and the scrape adds no round trip; under TLS all three share one connection
(a handshake costs more than an answer's wait, see :class:`_Probe`). Its figures
are kept only when ``/v1/models`` accepted our bearer (docs/metrics.md).

A box is rented and may answer anything, so every request ends by a deadline
of its own, ``connect_timeout + timeout`` from its start, however slowly the
box drips its status line, headers or body: a server's probe ends within
``2 × (connect_timeout + timeout)`` (docs/metrics.md). Bodies are capped, an
answer that is not HTTP fails that probe only, and what a box says only reaches
a reason cut to one short printable line.

Under box TLS (docs/box-tls.md) every probe and scrape dials HTTPS and verifies the
chain against the fleet CA and the certificate against the address dialled, under
the same deadlines, before the bearer goes out.
A certificate that does not verify is the same verdict as a wrong bearer: not ours
(rejected). A box llmao never issued nor verified a certificate of may still answer plain
HTTP (``plain_allowed``, decided by :func:`reconcile_plan.plain_allowed`), and the probe
falls back to it only on a positive sign: the box answered the TLS hello in HTTP. An EOF,
a reset or a timeout is what a network that drops hellos causes, so it never falls back
(docs/box-tls.md, "No downgrade"). The fallback keeps the probe's bound.
"""

from __future__ import annotations

import errno
import heapq
import ipaddress
import json
import os
import resource
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from .http_answer import Answer, BadAnswer, RemoteDisconnected, TooLarge
from .lifecycle import Models, Probe
from .listings import Endpoint
from .prometheus_text import read_exposition
from .vllm_latency import READ as LATENCY_READ
from .vllm_latency import read_latency
from .vllm_metrics import READ as FIGURES_READ
from .vllm_metrics import read_figures

# Probes in flight at once: each is a few sockets and a few buffers, and every extra wave of a
# fleet larger than this adds a whole slow answer (or a timeout) to the pass: 300 servers
# probed 256 at a time took two (issue 25).
DEFAULT_CONCURRENCY = 512
# Over plain HTTP the second connection is opened beside /health's and waits, idle, for it
# to answer (under TLS one connection carries the whole probe): used
# only if it waited at most this long, well before vLLM closes an idle connection (uvicorn's
# keep-alive, VLLM_HTTP_TIMEOUT_KEEP_ALIVE: 5 s), so a request never races that close.
SPARE_IDLE_S = 2.0
# A probe holds at most two sockets at once (over plain HTTP the /health connection and the
# /v1/models one; under TLS one, and a second while a box that closed it is asked again);
# the process's descriptor limit, less a reserve for everything else, bounds the probes in flight.
SOCKETS_PER_PROBE = 2
RESERVED_DESCRIPTORS = 64
# vLLM's exposition is some tens of kB (its histograms); one this large is not vLLM's.
MAX_METRICS_BYTES = 4 << 20
# /health answers nothing and /v1/models one entry per served name.
MAX_ANSWER_BYTES = 1 << 20
# A reason is one line of a verdict: what a box sent never makes it longer.
MAX_REASON_CHARS = 120
# The metrics the scrape reads: the exposition is parsed once for both readers.
SCRAPED = FIGURES_READ | LATENCY_READ
# One wakeup reads at most this much of one connection, so that a box sending as fast as it is
# read (a huge body) takes its turn like the others instead of holding the loop.
READ_BYTES = 1 << 16
READS_PER_WAKEUP = 16
_CONNECTING = (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY)
# What OpenSSL says when the answer to its ClientHello is not a TLS record but plain HTTP
# ("HTTP/1.1 400 ..."): its version bytes read as a wrong version (OpenSSL 3.0, 3.1), a
# record layer failure (3.2 and later), or an HTTP request. Nothing else is a sign of plain HTTP.
PLAIN_HTTP_REASONS = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "HTTP_REQUEST"})
# DNS names are looked up before the loop runs, this many at once (boxes are mostly dialled
# by address; a hand-launched one may have a name).
LOOKUP_THREADS = 16
# One address as socket.getaddrinfo gives it: family, type, protocol, canonical name, address.
AddressInfo = tuple


@dataclass(frozen=True)
class Target:
    """One server to probe: where, with which bearer, expecting which served name."""

    key: str
    endpoint: Endpoint | None
    served_model_name: str
    api_key: str = field(repr=False)
    # The fleet CA's client context (:func:`box_tls.box_context`) when boxes serve HTTPS.
    tls: ssl.SSLContext | None = field(default=None, repr=False)
    # Whether a box that answers the TLS hello in plain HTTP is still taken at its word (llmao
    # never issued it a certificate nor verified one from it).
    plain_allowed: bool = False


@dataclass
class _Request:
    """A request on a connection: its bytes, its answer being read, its deadline, and who is
    told of the answer (or of why there is none)."""

    text: bytes
    answer: Answer
    deadline: float
    done: Callable[[Answer | None, BaseException | None], None]


class _Loop:
    """The probes' event loop: one selector, one heap of deadlines, all in the calling thread.

    A connection's deadline may move (its next request starts), so the heap keeps every
    deadline it was given and skips those that are no longer the connection's own.
    """

    def __init__(self, names: Mapping[tuple[str, int], AddressInfo | OSError] | None = None
                 ) -> None:
        self.selector = selectors.DefaultSelector()
        self.names = dict(names or {})
        self.deadlines: list[tuple[float, int, _Wire]] = []
        self.count = 0
        # Connections whose TLS layer holds bytes already read from the socket: the selector
        # would not wake for them.
        self.again: set[_Wire] = set()

    def arm(self, wire: _Wire) -> None:
        self.count += 1
        heapq.heappush(self.deadlines, (wire.deadline, self.count, wire))

    def _live(self) -> tuple[float, int, _Wire] | None:
        while self.deadlines:
            head = self.deadlines[0]
            if not head[2].closed and head[2].deadline == head[0]:
                return head
            heapq.heappop(self.deadlines)
        return None

    def turn(self) -> None:
        """Wait for the first event or deadline, then serve every one that is due."""
        head = self._live()
        wait = 1.0 if head is None else max(0.0, head[0] - time.monotonic())
        if self.again:
            wait = 0.0
        self._serve(wait)
        for wire in list(self.again):
            self.again.discard(wire)
            if not wire.closed:
                _guarded(wire, wire.ready, selectors.EVENT_READ)
        now = time.monotonic()
        head = self._live()
        if head is None or head[0] > now:
            return
        # What became ready while the loop was busy (hundreds of handshakes and answers on a
        # loaded machine) is served before anything is timed out: a late loop fails no box.
        self._serve(0.0)
        while (head := self._live()) is not None and head[0] <= now:
            heapq.heappop(self.deadlines)
            _guarded(head[2], head[2].fail, TimeoutError("timed out"))

    def address(self, host: str, port: int) -> AddressInfo:
        """Where to dial: a name's address as :func:`look_up` found it before the loop ran
        (never looked up in the loop: a slow resolver would stall every probe), an
        address as written."""
        found = self.names.get((host, port))
        if isinstance(found, OSError):
            raise found
        if found is not None:
            return found
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                  flags=socket.AI_NUMERICHOST)[0]

    def _serve(self, wait: float) -> None:
        events = self.selector.select(wait) if self.selector.get_map() else ()
        for key, mask in events:
            _guarded(key.data, key.data.ready, mask)


def _guarded(wire: _Wire, step: Callable, argument) -> None:
    """``step(argument)``, where whatever a box's answer still raises fails that probe only.

    Every failure an answer is known to cause is caught where it happens; this is the
    wall behind them, so that an answer nobody thought of costs its server, not the pass.
    """
    try:
        step(argument)
    except Exception as exc:  # noqa: BLE001 (one server's answer never fails the pass)
        wire.owner.broke(exc)


class _Wire:
    """One non-blocking connection to a box, driven by the loop's events.

    It connects (within ``connect_timeout``), shakes hands under TLS (within the first
    request's deadline), then sends its requests and reads their answers in order; each
    request must be answered ``connect_timeout + timeout`` after it was asked, however
    slowly the box drips its bytes. Whatever fails is told to every request still waiting.

    Under TLS, ``session`` is one to resume (no second verification of the chain, no
    second signature by the box), and ``verified`` is called once the handshake has
    verified the box, before anything is sent: what it asks goes out with the rest.
    """

    def __init__(self, owner: _Probe, endpoint: Endpoint, tls: ssl.SSLContext | None,
                 session: ssl.SSLSession | None = None,
                 verified: Callable[[_Wire], None] | None = None):
        self.owner, self.loop, self.tls = owner, owner.loop, tls
        self.session, self.verified = session, verified
        self.whole = owner.connect_timeout + owner.timeout
        self.pending: deque[_Request] = deque()
        self.out = bytearray()
        self.events = 0
        self.closed = self.connected = self.opened = self.reusable = False
        self.error: OSError | None = None
        self.sock: socket.socket | None = None
        self.deadline = min(time.monotonic() + owner.connect_timeout, owner.ends)
        self.host, self.authority = endpoint.host, endpoint.address
        try:
            family, kind, proto, _name, address = self.loop.address(endpoint.host,
                                                                    endpoint.port)
            self.sock = socket.socket(family, kind, proto)
            self.sock.setblocking(False)
            # The requests are small and go out at once, as http.client sends them.
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            code = self.sock.connect_ex(address)
            if code not in _CONNECTING:
                raise OSError(code, os.strerror(code))
        except OSError as exc:
            self.error = exc
            self.close()
            return
        self._watch(selectors.EVENT_WRITE)
        self.loop.arm(self)

    def ask(self, path: str, headers: dict[str, str], limit: int,
            done: Callable[[Answer | None, BaseException | None], None]) -> None:
        """Send ``GET path``; ``done`` is told its answer, or why there is none."""
        lines = [f"GET {path} HTTP/1.1", f"Host: {self.authority}", "Accept-Encoding: identity",
                 *(f"{name}: {value}" for name, value in headers.items())]
        self._queue(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), limit, done)

    def _queue(self, text: bytes, limit: int,
               done: Callable[[Answer | None, BaseException | None], None],
               deadline: float | None = None) -> None:
        """Queue a request: its deadline ``connect_timeout + timeout`` from now, or the one
        it already had (asked again after a close), which this connection's connect and
        handshake then keep too."""
        if self.error is not None:
            done(None, self.error)
            return
        self.out += text
        if deadline is None:
            deadline = min(time.monotonic() + self.whole, self.owner.ends)
        elif deadline < self.deadline:
            self.deadline = deadline
            self.loop.arm(self)
        self.pending.append(_Request(text, Answer(limit), deadline, done))
        if self.opened:
            self._pump()

    def _hand_over(self, other: _Wire) -> None:
        """Ask ``other`` what this connection was asked and has not answered, by the
        deadlines it had: a box that closes after every answer wins no time."""
        waiting, self.pending = list(self.pending), deque()
        for request in waiting:
            other._queue(request.text, request.answer.limit, request.done, request.deadline)

    def restart_deadlines(self) -> None:
        """The requests waiting behind an answer just read start now: the box begins on a
        pipelined request once it has answered the one before, so its deadline is
        ``connect_timeout + timeout`` from then."""
        now = time.monotonic()
        for request in self.pending:
            request.deadline = min(now + self.whole, self.owner.ends)
        self._rearm()

    def tls_session(self) -> ssl.SSLSession | None:
        """The session this connection's handshake made, for another one to resume."""
        return self.sock.session if isinstance(self.sock, ssl.SSLSocket) else None

    def certificate_expiry(self) -> float | None:
        """When the certificate the box presented (and we verified) expires."""
        try:
            return ssl.cert_time_to_seconds(self.sock.getpeercert()["notAfter"])
        except (AttributeError, KeyError, TypeError, ValueError):
            return None

    def certificate_serial(self) -> int | None:
        """The serial number of the certificate the box presented (and we verified): the
        plan refuses one llmao revoked when the box's binding was released."""
        try:
            return int(self.sock.getpeercert()["serialNumber"], 16)
        except (AttributeError, KeyError, TypeError, ValueError):
            return None

    def ready(self, mask: int) -> None:
        if self.closed:
            return
        if not self.connected:
            self._connected()
        elif not self.opened:
            self._handshake()
        else:
            if mask & selectors.EVENT_WRITE:
                self._pump()
            if mask & selectors.EVENT_READ and not self.closed:
                self._read()

    def _connected(self) -> None:
        """The connect ended: refused, or open (plain), or the TLS handshake starts."""
        code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self.fail(OSError(code, os.strerror(code)))
            return
        self.connected = True
        if self.tls is None:
            self._open()
            return
        self._watch(0)
        self._start_tls()

    def _start_tls(self) -> None:
        try:
            self.sock = self.tls.wrap_socket(self.sock, server_hostname=self.host,
                                             do_handshake_on_connect=False,
                                             session=self.session)
        except (OSError, ValueError) as exc:
            self.fail(exc)
            return
        if self.pending:
            self.deadline = self.pending[0].deadline
            self.loop.arm(self)
        self._handshake()

    def _handshake(self) -> None:
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(selectors.EVENT_WRITE)
            return
        except OSError as exc:
            self.fail(exc)
            return
        self._open()

    def _open(self) -> None:
        if self.verified is not None:
            self.verified(self)
        self.opened = True
        self._pump()

    def _pump(self) -> None:
        """Send what is waiting to go out, and wait for answers."""
        while self.out:
            try:
                sent = self.sock.send(self.out)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                break
            except OSError as exc:
                self.fail(exc)
                return
            del self.out[:sent]
        self._watch(selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0))
        self._rearm()

    def _read(self) -> None:
        for _turn in range(READS_PER_WAKEUP):
            try:
                data = self.sock.recv(READ_BYTES)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except OSError as exc:
                self.fail(exc)
                return
            if not data:
                self._ended()
                return
            self._feed(data)
            if self.closed:
                return
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            self.loop.again.add(self)

    def _feed(self, data: bytes) -> None:
        while self.pending and not self.closed:
            request = self.pending[0]
            try:
                data = request.answer.feed(data)
            except BadAnswer as exc:
                self.fail(exc)
                return
            if not request.answer.done:
                return
            self.pending.popleft()
            self.reusable = request.answer.reusable
            self._rearm()
            request.done(request.answer, None)
            if not self.reusable:
                self._closing()

    def _ended(self) -> None:
        """The box closed the connection: it ends an answer read to the close, or fails it."""
        if self.pending:
            request = self.pending.popleft()
            try:
                request.answer.feed_eof()
            except BadAnswer as exc:
                self.pending.appendleft(request)
                self.fail(exc)
                return
            request.done(request.answer, None)
        self._closing()

    def _closing(self) -> None:
        """The box ends the connection after the answer just read: what was pipelined behind
        that answer is asked again on a new connection (resuming this one's TLS session), as
        a client does when a server closes ahead of its requests; then this one closes."""
        if self.pending and not self.owner.over:
            self._hand_over(self.owner.another_wire(self.tls_session()))
        self.fail(RemoteDisconnected("the box closed the connection"))

    def _rearm(self) -> None:
        if self.pending and self.pending[0].deadline != self.deadline:
            self.deadline = self.pending[0].deadline
            self.loop.arm(self)

    def _watch(self, events: int) -> None:
        if events == self.events:
            return
        if not self.events:
            self.loop.selector.register(self.sock, events, self)
        elif not events:
            self.loop.selector.unregister(self.sock)
        else:
            self.loop.selector.modify(self.sock, events, self)
        self.events = events

    def fail(self, exc: BaseException) -> None:
        """Close, and tell every request still waiting why it has no answer."""
        waiting = list(self.pending)
        self.close()
        for request in waiting:
            request.done(None, exc)

    def close(self) -> None:
        if self.closed:
            return
        self.closed, self.reusable = True, False
        self.pending.clear()
        self.loop.again.discard(self)
        if self.sock is not None:
            self._watch(0)
            self.sock.close()


def _lists(body: bytes, served_model_name: str) -> bool:
    try:
        data = json.loads(body).get("data") or []
        return any(isinstance(m, dict) and m.get("id") == served_model_name for m in data)
    except (ValueError, AttributeError, TypeError, RecursionError):
        return False


def _models_probe(health_ok: bool, answer: Answer, served_model_name: str) -> Probe:
    """The probe from the ``/v1/models`` answer."""
    status = answer.status
    if status == 401:
        return Probe(health_ok, Models.REJECTED, "HTTP 401 from /v1/models")
    if status != 200:
        return Probe(health_ok, Models.FAILED, f"HTTP {status} from /v1/models")
    if _lists(answer.body, served_model_name):
        return Probe(health_ok, Models.LISTS, "" if health_ok else "/health not 200")
    return Probe(health_ok, Models.OTHER, f"{served_model_name!r} not listed")


def _exposition(answer: Answer | None, exc: BaseException | None) -> tuple[str | None, str]:
    """The ``/metrics`` answer as text, or None and why.

    Whatever goes wrong (refused, timed out, not 200, too large, not text)
    leaves the figures unknown; it never fails the probe.
    """
    if isinstance(exc, TooLarge):
        # An announced length over the cap was refused unread: no time spent on it.
        return None, f"/metrics is over {MAX_METRICS_BYTES} bytes"
    if exc is not None:
        return None, f"/metrics: {_describe(exc)}"
    if answer.status != 200:
        return None, f"HTTP {answer.status} from /metrics"
    try:
        return answer.body.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, "/metrics is not UTF-8"


class _Probe:
    """One server's probe, as steps the loop's events drive.

    Over plain HTTP, ``/health`` first, on a connection of its own, while a second
    connection is opened beside it, its connect done in the time the box takes to answer.
    Once ``/health`` answers, with whatever status, the bearer goes out: ``/metrics`` on
    the first connection (a new one if the box closed it) and ``/v1/models`` on the second
    (a new one if it is gone or has waited longer than :data:`SPARE_IDLE_S`), so both slow
    answers are awaited at once.

    Under TLS a connection costs a handshake at both ends (on the box, on the event loop
    that streams its tokens), so one connection carries all three: once its handshake has
    verified the box, ``/v1/models`` and ``/metrics`` go out with the bearer right behind
    ``/health``, pipelined, and the box answers them in turn. Their deadlines start when
    ``/health`` has answered; a box that closes the connection after it is asked them
    again on a new connection, resuming the first one's session.

    The probe ends when ``/v1/models`` and, if it accepted our bearer, ``/metrics``
    answered.
    """

    def __init__(self, loop: _Loop, target: Target, connect_timeout: float, timeout: float,
                 scrape: bool, finished: Callable[[Probe], None]):
        self.loop, self.target, self.scrape, self.finished = loop, target, scrape, finished
        self.connect_timeout, self.timeout = connect_timeout, timeout
        # Every request, connect and handshake of this probe ends by then, the plain HTTP
        # fallback's too: a fallback never restarts the clock (docs/metrics.md).
        self.ends = time.monotonic() + 2 * (connect_timeout + timeout)
        self.wires: list[_Wire] = []
        self.first: _Wire | None = None
        self.spare: _Wire | None = None
        self.spare_since = 0.0
        self.tls = target.tls
        self.over = False
        self.health_ok = False
        self.not_after: float | None = None
        self.serial: int | None = None
        self.models: tuple[Probe, bytes] | None = None
        self.exposition: tuple[str | None, str] | None = None
        self.scraped_at = 0.0

    def start(self) -> None:
        if self.target.endpoint is None:
            self._finish(Probe(False, Models.SKIPPED, "no public address known"))
        else:
            self._dial()

    def _dial(self) -> None:
        """``/health`` on a first connection; over plain HTTP, a second one opened at once
        beside it; under TLS, the bearer's requests behind it once the box is verified."""
        if self.tls is None:
            self.first = self._wire()
            self.spare, self.spare_since = self._wire(), time.monotonic()
        else:
            self.first = self._wire(verified=self._ask_with_bearer)
        self.first.ask("/health", {}, MAX_ANSWER_BYTES, self._health)

    def _wire(self, session: ssl.SSLSession | None = None,
              verified: Callable[[_Wire], None] | None = None) -> _Wire:
        wire = _Wire(self, self.target.endpoint, self.tls, session, verified)
        self.wires.append(wire)
        return wire

    def another_wire(self, session: ssl.SSLSession | None) -> _Wire:
        """A new connection for what a closing one leaves unanswered."""
        return self._wire(session)

    def _ask_with_bearer(self, wire: _Wire) -> None:
        """``/v1/models`` and (scraping) ``/metrics``, with the bearer, on one connection."""
        bearer = {"Authorization": f"Bearer {self.target.api_key}"}
        wire.ask("/v1/models", bearer, MAX_ANSWER_BYTES, self._models)
        if self.scrape and not self.over:
            wire.ask("/metrics", bearer, MAX_METRICS_BYTES, self._metrics)

    def _health(self, answer: Answer | None, exc: BaseException | None) -> None:
        first = self.first
        if exc is not None:
            self._unanswered(first, exc)
            return
        self.health_ok = answer.status == 200
        if self.tls is not None:
            self.not_after = first.certificate_expiry()
            self.serial = first.certificate_serial()
            first.restart_deadlines()
            return
        bearer = {"Authorization": f"Bearer {self.target.api_key}"}
        if self.scrape:
            scraper = first if first.reusable else self._wire()
            scraper.ask("/metrics", bearer, MAX_METRICS_BYTES, self._metrics)
        if not self.over:
            self._models_wire().ask("/v1/models", bearer, MAX_ANSWER_BYTES, self._models)

    def _models_wire(self) -> _Wire:
        """The second connection if it is still open and fresh, else a new one."""
        if not self.spare.closed and time.monotonic() - self.spare_since <= SPARE_IDLE_S:
            return self.spare
        self.spare.close()
        return self._wire()

    def _unanswered(self, first: _Wire, exc: BaseException) -> None:
        """``/health`` had no answer: a certificate not ours, plain HTTP, or nothing there."""
        if isinstance(exc, ssl.SSLCertVerificationError):
            self._finish(Probe(False, Models.REJECTED, f"a certificate the fleet CA did not "
                                                       f"sign for this address "
                                                       f"({exc.verify_message})"))
        elif (not first.opened and self.tls is not None and self.target.plain_allowed
              and answered_in_plain_http(exc)):
            self.tls = None
            self._dial()
        else:
            self._finish(Probe(False, Models.SKIPPED, _describe(exc)))

    def _models(self, answer: Answer | None, exc: BaseException | None) -> None:
        if isinstance(exc, TooLarge):
            probe = Probe(self.health_ok, Models.OTHER,
                          f"/v1/models is over {MAX_ANSWER_BYTES} bytes")
        elif exc is not None:
            probe = Probe(self.health_ok, Models.FAILED, _describe(exc))
        else:
            probe = _models_probe(self.health_ok, answer, self.target.served_model_name)
        if not self.scrape or exc is not None or answer.status != 200:
            self._finish(probe)
            return
        self.models = probe, bytes(answer.body)
        self._figures()

    def _metrics(self, answer: Answer | None, exc: BaseException | None) -> None:
        self.scraped_at = time.time()
        self.exposition = _exposition(answer, exc)
        self._figures()

    def _figures(self) -> None:
        """Once both ``/v1/models`` (accepted) and ``/metrics`` answered: the figures."""
        if self.models is None or self.exposition is None:
            return
        (probe, body), (text, unread) = self.models, self.exposition
        exposition = None if text is None else read_exposition(text, SCRAPED)
        metrics, unknown = read_figures(exposition, body, self.target.served_model_name,
                                        self.scraped_at)
        reason = unread or unknown
        if reason and probe.models is Models.LISTS and not probe.detail:
            probe = replace(probe, detail=short_reason(f"figures unknown: {reason}"))
        # An answer whose figures could not be believed is not believed for its latency either.
        self._finish(replace(probe, metrics=metrics,
                             latency=None if reason else read_latency(exposition)))

    def broke(self, exc: Exception) -> None:
        """What an answer raised that no step caught: that server's probe fails, alone."""
        self._finish(Probe(False, Models.FAILED,
                           short_reason(f"unreadable answer: {_describe(exc)}")))

    def _finish(self, probe: Probe) -> None:
        if self.over:
            return
        self.over = True
        for wire in self.wires:
            wire.close()
        if self.tls is not self.target.tls:
            probe = replace(probe, plain_http=True)
        if self.not_after is not None:
            probe = replace(probe, cert_not_after=self.not_after)
        if self.serial is not None:
            probe = replace(probe, cert_serial=self.serial)
        self.finished(probe)


def answered_in_plain_http(exc: BaseException) -> bool:
    """Whether a failed handshake is the box answering our hello in plain HTTP: the one
    positive sign that it does not speak TLS. An EOF (``SSLEOFError``), a reset or a
    timeout is not one: anything on the path can cause those."""
    return (isinstance(exc, ssl.SSLError) and not isinstance(exc, ssl.SSLEOFError)
            and getattr(exc, "reason", None) in PLAIN_HTTP_REASONS)


def short_reason(text: str) -> str:
    """``text`` as one short printable line: what a box says is cut before it is kept."""
    line = "".join(char if char.isprintable() and char.isascii() else "?"
                   for char in text[:MAX_REASON_CHARS + 1].split("\n", 1)[0].strip())
    return line if len(line) <= MAX_REASON_CHARS else line[:MAX_REASON_CHARS - 3] + "..."


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    text = type(exc).__name__ if not str(exc) else f"{type(exc).__name__}: {exc}"
    return short_reason(text)


def descriptor_room() -> int:
    """How many more descriptors the process may open: its soft limit less a reserve."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return DEFAULT_CONCURRENCY * SOCKETS_PER_PROBE
    return soft - RESERVED_DESCRIPTORS


def probe_one(target: Target, connect_timeout: float, timeout: float,
              scrape: bool = True) -> Probe:
    """One server's probe (and scrape): :func:`probe_many` of one."""
    return _run([target], connect_timeout, timeout, 1, scrape)[0]


def probe_many(targets: Iterable[Target], connect_timeout: float, timeout: float,
               concurrency: int = DEFAULT_CONCURRENCY, scrape: bool = True) -> dict[str, Probe]:
    """Probe (and scrape) every target concurrently; each target's key to its probe."""
    targets = list(targets)
    if not targets:
        return {}
    most = max(1, min(concurrency, len(targets), descriptor_room() // SOCKETS_PER_PROBE))
    probes = _run(targets, connect_timeout, timeout, most, scrape)
    return {target.key: probe for target, probe in zip(targets, probes, strict=True)}


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def look_up(places: Iterable[tuple[str, int]],
            wait_s: float) -> dict[tuple[str, int], AddressInfo | OSError]:
    """Each DNS name's first address, looked up side by side in daemon threads before the
    probes start, for at most ``wait_s`` in all: a name whose resolver is slow fails its own
    probes ("name lookup timed out"), never the pass's. Addresses are not looked up."""
    names = list(dict.fromkeys(place for place in places if not _is_address(place[0])))
    found: dict[tuple[str, int], AddressInfo | OSError] = {}
    if not names:
        return found
    queue = deque(names)
    lock = threading.Lock()
    all_done = threading.Event()

    def resolve() -> None:
        while True:
            with lock:
                if not queue:
                    return
                place = queue.popleft()
            try:
                answer: AddressInfo | OSError = socket.getaddrinfo(
                    *place, type=socket.SOCK_STREAM)[0]
            except OSError as exc:
                answer = exc
            with lock:
                found[place] = answer
                if len(found) == len(names):
                    all_done.set()

    for _index in range(min(LOOKUP_THREADS, len(names))):
        threading.Thread(target=resolve, name="llmao-probe-lookup", daemon=True).start()
    all_done.wait(wait_s)
    with lock:
        return {place: found.get(place, OSError("name lookup timed out"))
                for place in names}


def _run(targets: list[Target], connect_timeout: float, timeout: float, most: int,
         scrape: bool) -> list[Probe]:
    """Every target's probe, at most ``most`` in flight, driven by one loop in this thread."""
    loop = _Loop(look_up(((t.endpoint.host, t.endpoint.port) for t in targets if t.endpoint),
                         connect_timeout))
    results: list[Probe | None] = [None] * len(targets)
    waiting = deque(enumerate(targets))
    running = 0

    def finished(index: int, probe: Probe) -> None:
        nonlocal running
        results[index] = probe
        running -= 1

    try:
        while True:
            while waiting and running < most:
                index, target = waiting.popleft()
                running += 1
                probe = _Probe(loop, target, connect_timeout, timeout, scrape,
                               lambda done, index=index: finished(index, done))
                try:
                    probe.start()
                except Exception as exc:  # noqa: BLE001 (one server never fails the pass)
                    probe.broke(exc)
            if not running:
                return results
            loop.turn()
    finally:
        loop.selector.close()
