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
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from .lifecycle import Models, Probe
from .listings import Endpoint
from .vllm_latency import read_latency
from .vllm_metrics import read_metrics

# Probing is waiting on sockets: a thread each costs little, and every extra wave of a
# fleet larger than the pool adds a whole slow answer (or a timeout) to the pass.
DEFAULT_CONCURRENCY = 256
# vLLM's exposition is some tens of kB (its histograms); one this large is not vLLM's.
MAX_METRICS_BYTES = 4 << 20


@dataclass(frozen=True)
class Target:
    """One server to probe: where, with which bearer, expecting which served name."""

    key: str
    endpoint: Endpoint | None
    served_model_name: str
    api_key: str = field(repr=False)


def _connect(endpoint: Endpoint, connect_timeout: float,
             timeout: float) -> http.client.HTTPConnection:
    connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=connect_timeout)
    try:
        connection.connect()
        connection.sock.settimeout(timeout)
    except BaseException:
        connection.close()
        raise
    return connection


def _ask(connection: http.client.HTTPConnection, path: str, headers: dict[str, str],
         limit: int = 1 << 20) -> tuple[int, bytes]:
    """One request on an open connection, its answer read; the connection stays usable."""
    connection.request("GET", path, headers=headers)
    answer = connection.getresponse()
    return answer.status, answer.read(limit)


def _get(endpoint: Endpoint, path: str, headers: dict[str, str], connect_timeout: float,
         timeout: float) -> tuple[int, bytes]:
    connection = _connect(endpoint, connect_timeout, timeout)
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


def _exposition(connection: http.client.HTTPConnection) -> str | None:
    """The ``/metrics`` answer asked for by :func:`_send_scrape`, or None.

    Whatever goes wrong (refused, timed out, not 200, too large, not text)
    leaves the figures unknown; it never fails the probe.
    """
    try:
        answer = connection.getresponse()
        body = answer.read(MAX_METRICS_BYTES + 1)
        if answer.status == 200 and len(body) <= MAX_METRICS_BYTES:
            return body.decode("utf-8")
    except (OSError, http.client.HTTPException, UnicodeDecodeError):
        pass
    return None


def _lists(body: bytes, served_model_name: str) -> bool:
    try:
        data = json.loads(body).get("data") or []
        return any(isinstance(m, dict) and m.get("id") == served_model_name for m in data)
    except (ValueError, AttributeError):
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
    try:
        connection = _connect(target.endpoint, connect_timeout, timeout)
    except (OSError, http.client.HTTPException) as exc:
        return Probe(False, Models.SKIPPED, _describe(exc))
    try:
        try:
            health_ok = _ask(connection, "/health", {})[0] == 200
        except (OSError, http.client.HTTPException) as exc:
            return Probe(False, Models.SKIPPED, _describe(exc))
        bearer = {"Authorization": f"Bearer {target.api_key}"}
        scraping = scrape and _send_scrape(connection, bearer)
        scraped_at = time.time()
        try:
            status, body = _get(target.endpoint, "/v1/models", bearer, connect_timeout, timeout)
        except (OSError, http.client.HTTPException) as exc:
            return Probe(health_ok, Models.FAILED, _describe(exc))
        probe = _models_probe(health_ok, status, body, target.served_model_name)
        if not scraping or status != 200:
            return probe
        exposition = _exposition(connection)
        return replace(probe, metrics=read_metrics(exposition, body, target.served_model_name,
                                                   scraped_at),
                       latency=read_latency(exposition))
    finally:
        connection.close()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return type(exc).__name__ if not str(exc) else f"{type(exc).__name__}: {exc}"


def probe_many(targets: Iterable[Target], connect_timeout: float, timeout: float,
               concurrency: int = DEFAULT_CONCURRENCY, scrape: bool = True) -> dict[str, Probe]:
    """Probe (and scrape) every target concurrently; each target's key to its probe."""
    targets = list(targets)
    if not targets:
        return {}
    workers = max(1, min(concurrency, len(targets)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llmao-probe") as pool:
        probes = pool.map(lambda t: probe_one(t, connect_timeout, timeout, scrape), targets)
        return {target.key: result for target, result in zip(targets, probes, strict=True)}
