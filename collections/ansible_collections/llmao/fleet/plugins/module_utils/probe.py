# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probing vLLM servers at their public addresses, many at once.

``/health`` takes no key and only says something answers; ``/v1/models`` with
the bearer says it is ours and serving the model. A 401 is kept apart from
every other failure because it means "someone else is here", not "down".
Probes run in a thread pool: a pass over 300 slow servers costs a few slow
answers, not 300 of them. A server whose ``/health`` answers is scraped by the
same worker: its ``/metrics`` (at the server root, beside ``/v1``) is asked
for on the ``/health`` connection before the ``/v1/models`` answer is awaited,
so both are in flight at once and the scrape adds no round trip; its figures
are kept only when ``/v1/models`` accepted our bearer (docs/metrics.md).

A box is rented and may answer anything, so every request ends by a deadline
of its own, ``connect_timeout + timeout`` from its start, however slowly the
box drips its status line, headers or body: a server's probe ends within
``2 × (connect_timeout + timeout)`` (docs/metrics.md). Bodies are capped, and
what a box says only reaches a reason cut to one short printable line.

Under box TLS (docs/box-tls.md) every probe and scrape dials HTTPS and verifies the
chain against the fleet CA and the certificate against the address dialled, under
the same deadlines. A certificate that does not verify is the same verdict as a
wrong bearer: not ours (rejected). A box that has not applied the revision turning
TLS on yet may still answer plain HTTP (``plain_allowed``); nothing else falls back.
"""

from __future__ import annotations

import http.client
import json
import resource
import socket
import ssl
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from .lifecycle import Models, Probe
from .listings import Endpoint
from .prometheus_text import read_exposition
from .vllm_latency import READ as LATENCY_READ
from .vllm_latency import read_latency
from .vllm_metrics import READ as FIGURES_READ
from .vllm_metrics import read_figures

# Probing is waiting on sockets: a thread each costs little, and every extra wave of a
# fleet larger than the pool adds a whole slow answer (or a timeout) to the pass: 300
# servers under a pool of 256 took two (issue 25).
DEFAULT_CONCURRENCY = 512
# A probe holds at most two sockets at once (the /health connection, the /v1/models one);
# the process's descriptor limit, less a reserve for everything else, bounds the pool.
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


@dataclass(frozen=True)
class Target:
    """One server to probe: where, with which bearer, expecting which served name."""

    key: str
    endpoint: Endpoint | None
    served_model_name: str
    api_key: str = field(repr=False)
    # The fleet CA's client context (:func:`box_tls.box_context`) when boxes serve HTTPS.
    tls: ssl.SSLContext | None = field(default=None, repr=False)
    # Whether a box that answers plain HTTP is still taken at its word (not on TLS yet).
    plain_allowed: bool = False


class _Deadline:
    """A connected socket whose every send and receive ends by one deadline.

    http.client reads a status line, the headers and the body through many
    receives, each bounded only by the socket's timeout: an answer dripped one
    byte per timeout would never end. Here each receive waits at most what is
    left until :attr:`deadline` (``time.monotonic()``), and none starts after it.
    """

    deadline = 0.0
    read_timeout = 0.0

    def _arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self.settimeout(min(left, self.read_timeout))

    def recv_into(self, buffer, nbytes=0, flags=0):
        self._arm()
        return super().recv_into(buffer, nbytes, flags)

    def recv(self, bufsize, flags=0):
        self._arm()
        return super().recv(bufsize, flags)

    def sendall(self, data, flags=0):
        self._arm()
        return super().sendall(data, flags)


class _DeadlineSocket(_Deadline, socket.socket):
    """A plain connection under the deadline."""


class _DeadlineTlsSocket(_Deadline, ssl.SSLSocket):
    """A TLS connection under the same deadline: the fleet CA's context makes its sockets
    of this class, so TLS reads and writes wait no longer than plain ones."""


def _connect(endpoint: Endpoint, connect_timeout: float, timeout: float,
             tls: ssl.SSLContext | None = None,
             session: ssl.SSLSession | None = None) -> http.client.HTTPConnection:
    """A connection whose first request must end ``connect_timeout + timeout`` from now;
    over TLS (``tls``) the handshake verifies the box within ``connect_timeout``, or
    resumes ``session``, one this probe verified on its first connection to the box."""
    deadline = time.monotonic() + connect_timeout + timeout
    raw = socket.create_connection((endpoint.host, endpoint.port), timeout=connect_timeout)
    # As http.client does: the scrape and the /v1/models ask are small and go out at once.
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is None:
        sock = _DeadlineSocket(raw.family, raw.type, raw.proto, fileno=raw.detach())
    else:
        tls.sslsocket_class = _DeadlineTlsSocket
        try:
            sock = tls.wrap_socket(raw, server_hostname=endpoint.host, session=session)
        except BaseException:
            raw.close()
            raise
    sock.read_timeout, sock.deadline = timeout, deadline
    connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout)
    connection.sock = sock
    return connection


def _restart_deadline(connection: http.client.HTTPConnection, connect_timeout: float,
                      timeout: float) -> None:
    """A new request on an open connection gets a whole deadline of its own."""
    if isinstance(connection.sock, _Deadline):
        connection.sock.deadline = time.monotonic() + connect_timeout + timeout


def _ask(connection: http.client.HTTPConnection, path: str, headers: dict[str, str],
         limit: int = MAX_ANSWER_BYTES) -> tuple[int, bytes]:
    """One request on an open connection, its answer read; the connection stays usable."""
    connection.request("GET", path, headers=headers)
    answer = connection.getresponse()
    return answer.status, answer.read(limit)


def _get(endpoint: Endpoint, path: str, headers: dict[str, str], connect_timeout: float,
         timeout: float, tls: ssl.SSLContext | None = None,
         session: ssl.SSLSession | None = None) -> tuple[int, bytes]:
    connection = _connect(endpoint, connect_timeout, timeout, tls, session)
    try:
        return _ask(connection, path, headers)
    finally:
        connection.close()


def _send_scrape(connection: http.client.HTTPConnection, headers: dict[str, str]) -> bool:
    """Ask for ``/metrics`` on the ``/health`` connection; its answer is read later."""
    try:
        connection.request("GET", "/metrics", headers=headers)
    except (OSError, http.client.HTTPException):
        return False
    return True


def _exposition(connection: http.client.HTTPConnection) -> tuple[str | None, str]:
    """The ``/metrics`` answer asked for by :func:`_send_scrape`, or None and why.

    Whatever goes wrong (refused, timed out, not 200, too large, not text)
    leaves the figures unknown; it never fails the probe.
    """
    try:
        answer = connection.getresponse()
        if answer.status != 200:
            return None, f"HTTP {answer.status} from /metrics"
        # An announced length over the cap is refused unread: no time spent on it.
        if answer.length is not None and answer.length > MAX_METRICS_BYTES:
            return None, f"/metrics is over {MAX_METRICS_BYTES} bytes"
        body = answer.read(MAX_METRICS_BYTES + 1)
        if len(body) > MAX_METRICS_BYTES:
            return None, f"/metrics is over {MAX_METRICS_BYTES} bytes"
        return body.decode("utf-8"), ""
    except (OSError, http.client.HTTPException) as exc:
        return None, f"/metrics: {_describe(exc)}"
    except UnicodeDecodeError:
        return None, "/metrics is not UTF-8"


def _lists(body: bytes, served_model_name: str) -> bool:
    try:
        data = json.loads(body).get("data") or []
        return any(isinstance(m, dict) and m.get("id") == served_model_name for m in data)
    except (ValueError, AttributeError, TypeError, RecursionError):
        return False


def _models_probe(health_ok: bool, status: int, body: bytes, served_model_name: str) -> Probe:
    """The probe from the ``/v1/models`` answer."""
    if status == 401:
        return Probe(health_ok, Models.REJECTED, "HTTP 401 from /v1/models")
    if status != 200:
        return Probe(health_ok, Models.FAILED, f"HTTP {status} from /v1/models")
    if _lists(body, served_model_name):
        return Probe(health_ok, Models.LISTS, "" if health_ok else "/health not 200")
    return Probe(health_ok, Models.OTHER, f"{served_model_name!r} not listed")


def probe_one(target: Target, connect_timeout: float, timeout: float,
              scrape: bool = True) -> Probe:
    """``/health`` then, if it answers, ``/v1/models`` with the bearer and the scrape.

    The scrape reuses the ``/health`` connection and is sent before
    ``/v1/models``, so both answers are awaited at once: it costs the server
    no connection and the pass no round trip.
    """
    if target.endpoint is None:
        return Probe(False, Models.SKIPPED, "no public address known")
    tls = target.tls
    try:
        connection = _connect(target.endpoint, connect_timeout, timeout, tls)
    except ssl.SSLCertVerificationError as exc:
        return Probe(False, Models.REJECTED, f"a certificate the fleet CA did not sign for "
                                             f"this address ({exc.verify_message})")
    except ssl.SSLError as exc:
        if not target.plain_allowed:
            return Probe(False, Models.SKIPPED, _describe(exc))
        tls = None
        try:
            connection = _connect(target.endpoint, connect_timeout, timeout)
        except (OSError, http.client.HTTPException) as again:
            return Probe(False, Models.SKIPPED, _describe(again))
    except (OSError, http.client.HTTPException) as exc:
        return Probe(False, Models.SKIPPED, _describe(exc))
    if tls is not target.tls:
        return replace(_probe_on(connection, target, connect_timeout, timeout, scrape, tls),
                       plain_http=True)
    expires = _certificate_expiry(connection) if tls is not None else None
    probe = _probe_on(connection, target, connect_timeout, timeout, scrape, tls)
    return probe if expires is None else replace(probe, cert_not_after=expires)


def _certificate_expiry(connection: http.client.HTTPConnection) -> float | None:
    """When the certificate the box just presented (and we verified) expires."""
    try:
        return ssl.cert_time_to_seconds(connection.sock.getpeercert()["notAfter"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _probe_on(connection: http.client.HTTPConnection, target: Target, connect_timeout: float,
              timeout: float, scrape: bool, tls: ssl.SSLContext | None) -> Probe:
    """The probe on an open connection (closed when done)."""
    try:
        try:
            health_ok = _ask(connection, "/health", {})[0] == 200
        except (OSError, http.client.HTTPException) as exc:
            return Probe(False, Models.SKIPPED, _describe(exc))
        bearer = {"Authorization": f"Bearer {target.api_key}"}
        _restart_deadline(connection, connect_timeout, timeout)
        scraping = scrape and _send_scrape(connection, bearer)
        scraped_at = time.time()
        try:
            # The second connection resumes the first's TLS session: no second certificate
            # to send and verify (the box proved it a moment ago on the first).
            session = connection.sock.session if tls is not None else None
            status, body = _get(target.endpoint, "/v1/models", bearer, connect_timeout, timeout,
                                tls, session)
        except (OSError, http.client.HTTPException) as exc:
            return Probe(health_ok, Models.FAILED, _describe(exc))
        probe = _models_probe(health_ok, status, body, target.served_model_name)
        if not scraping or status != 200:
            return probe
        text, unread = _exposition(connection)
        exposition = None if text is None else read_exposition(text, SCRAPED)
        metrics, unknown = read_figures(exposition, body, target.served_model_name, scraped_at)
        reason = unread or unknown
        if reason and probe.models is Models.LISTS and not probe.detail:
            probe = replace(probe, detail=short_reason(f"figures unknown: {reason}"))
        # An answer whose figures could not be believed is not believed for its latency either.
        return replace(probe, metrics=metrics,
                       latency=None if reason else read_latency(exposition))
    finally:
        connection.close()


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


def _probe_apart(target: Target, connect_timeout: float, timeout: float,
                 scrape: bool) -> Probe:
    """:func:`probe_one`, where whatever a box's answer still raises fails that probe only.

    Every failure an answer is known to cause is caught where it happens; this is the
    wall behind them, so that an answer nobody thought of costs its server, not the pass.
    """
    try:
        return probe_one(target, connect_timeout, timeout, scrape)
    except Exception as exc:  # noqa: BLE001 (one server's answer never fails the pass)
        return Probe(False, Models.FAILED, short_reason(f"unreadable answer: {_describe(exc)}"))


def descriptor_room() -> int:
    """How many more descriptors the process may open: its soft limit less a reserve."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return DEFAULT_CONCURRENCY * SOCKETS_PER_PROBE
    return soft - RESERVED_DESCRIPTORS


def probe_many(targets: Iterable[Target], connect_timeout: float, timeout: float,
               concurrency: int = DEFAULT_CONCURRENCY, scrape: bool = True) -> dict[str, Probe]:
    """Probe (and scrape) every target concurrently; each target's key to its probe."""
    targets = list(targets)
    if not targets:
        return {}
    workers = max(1, min(concurrency, len(targets), descriptor_room() // SOCKETS_PER_PROBE))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llmao-probe") as pool:
        probes = pool.map(lambda t: _probe_apart(t, connect_timeout, timeout, scrape), targets)
        return {target.key: result for target, result in zip(targets, probes, strict=True)}
