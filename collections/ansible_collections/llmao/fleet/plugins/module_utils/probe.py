# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probing vLLM servers at their public addresses, many at once.

``/health`` takes no key and only says something answers; ``/v1/models`` with
the bearer says it is ours and serving the model. A 401 is kept apart from
every other failure because it means "someone else is here", not "down".
Probes run in a thread pool: a pass over 300 slow servers costs a few slow
answers, not 300 of them. A server that answers with our bearer is scraped in
the same worker: its ``/metrics`` (at the server root, beside ``/v1``) read with
the ``/v1/models`` answer the probe already has (docs/metrics.md).
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .lifecycle import Models, Probe
from .listings import Endpoint
from .vllm_metrics import ServerMetrics, read_metrics

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


def _get(endpoint: Endpoint, path: str, headers: dict[str, str], connect_timeout: float,
         timeout: float, limit: int = 1 << 20) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=connect_timeout)
    try:
        connection.connect()
        connection.sock.settimeout(timeout)
        connection.request("GET", path, headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.read(limit)
    finally:
        connection.close()


def _lists(body: bytes, served_model_name: str) -> bool:
    try:
        data = json.loads(body).get("data") or []
        return any(isinstance(m, dict) and m.get("id") == served_model_name for m in data)
    except (ValueError, AttributeError):
        return False


def probe_one(target: Target, connect_timeout: float, timeout: float,
              scrape: bool = True) -> Probe:
    """``/health`` then, if it answers, ``/v1/models`` with the bearer; then the scrape."""
    if target.endpoint is None:
        return Probe(False, Models.SKIPPED, "no public address known")
    try:
        status = _get(target.endpoint, "/health", {}, connect_timeout, timeout)[0]
    except (OSError, http.client.HTTPException) as exc:
        return Probe(False, Models.SKIPPED, _describe(exc))
    health_ok = status == 200
    try:
        status, body = _get(target.endpoint, "/v1/models",
                            {"Authorization": f"Bearer {target.api_key}"}, connect_timeout,
                            timeout)
    except (OSError, http.client.HTTPException) as exc:
        return Probe(health_ok, Models.FAILED, _describe(exc))
    if status == 401:
        return Probe(health_ok, Models.REJECTED, "HTTP 401 from /v1/models")
    if status != 200:
        return Probe(health_ok, Models.FAILED, f"HTTP {status} from /v1/models")
    metrics = scrape_metrics(target, body, connect_timeout, timeout) if scrape else None
    if _lists(body, target.served_model_name):
        return Probe(health_ok, Models.LISTS, "" if health_ok else "/health not 200", metrics)
    return Probe(health_ok, Models.OTHER, f"{target.served_model_name!r} not listed", metrics)


def scrape_metrics(target: Target, models_body: bytes, connect_timeout: float,
                   timeout: float) -> ServerMetrics:
    """The server's figures: ``GET /metrics`` with the bearer, and its ``/v1/models`` answer.

    Whatever goes wrong (refused, timed out, not 200, too large, not text)
    leaves the exposition's figures unknown; it never fails the probe.
    """
    scraped_at = time.time()
    exposition = None
    try:
        status, body = _get(target.endpoint, "/metrics",
                            {"Authorization": f"Bearer {target.api_key}"}, connect_timeout,
                            timeout, MAX_METRICS_BYTES + 1)
        if status == 200 and len(body) <= MAX_METRICS_BYTES:
            exposition = body.decode("utf-8")
    except (OSError, http.client.HTTPException, UnicodeDecodeError):
        pass
    return read_metrics(exposition, models_body, target.served_model_name, scraped_at)


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
