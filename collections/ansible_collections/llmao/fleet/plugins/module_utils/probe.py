# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probing vLLM servers at their public addresses, many at once.

``/health`` takes no key and only says something answers; ``/v1/models`` with
the bearer says it is ours and serving the model. A 401 is kept apart from
every other failure because it means "someone else is here", not "down".
Probes run in a thread pool: a pass over 300 slow servers costs a few slow
answers, not 300 of them. Every server is scraped at the same time as it is
probed: its ``/metrics`` (at the server root, beside ``/v1``) read with the
``/v1/models`` answer the probe already has (docs/metrics.md).
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


def _probe(target: Target, connect_timeout: float,
           timeout: float) -> tuple[Probe, bytes | None]:
    """``/health`` then ``/v1/models`` with the bearer; its body when it answered 200."""
    if target.endpoint is None:
        return Probe(False, Models.SKIPPED, "no public address known"), None
    try:
        status = _get(target.endpoint, "/health", {}, connect_timeout, timeout)[0]
    except (OSError, http.client.HTTPException) as exc:
        return Probe(False, Models.SKIPPED, _describe(exc)), None
    health_ok = status == 200
    try:
        status, body = _get(target.endpoint, "/v1/models",
                            {"Authorization": f"Bearer {target.api_key}"}, connect_timeout,
                            timeout)
    except (OSError, http.client.HTTPException) as exc:
        return Probe(health_ok, Models.FAILED, _describe(exc)), None
    if status == 401:
        return Probe(health_ok, Models.REJECTED, "HTTP 401 from /v1/models"), None
    if status != 200:
        return Probe(health_ok, Models.FAILED, f"HTTP {status} from /v1/models"), None
    if _lists(body, target.served_model_name):
        return Probe(health_ok, Models.LISTS, "" if health_ok else "/health not 200"), body
    return Probe(health_ok, Models.OTHER, f"{target.served_model_name!r} not listed"), body


def fetch_exposition(target: Target, connect_timeout: float,
                     timeout: float) -> tuple[str | None, float]:
    """``GET /metrics`` at the server root with the bearer: its text (or None) and when.

    Whatever goes wrong (refused, timed out, not 200, too large, not text)
    leaves the figures unknown; it never fails the probe.
    """
    scraped_at = time.time()
    if target.endpoint is None:
        return None, scraped_at
    try:
        status, body = _get(target.endpoint, "/metrics",
                            {"Authorization": f"Bearer {target.api_key}"}, connect_timeout,
                            timeout, MAX_METRICS_BYTES + 1)
        if status == 200 and len(body) <= MAX_METRICS_BYTES:
            return body.decode("utf-8"), scraped_at
    except (OSError, http.client.HTTPException, UnicodeDecodeError):
        pass
    return None, scraped_at


def with_metrics(target: Target, probe: Probe, models_body: bytes | None,
                 scraped: tuple[str | None, float]) -> Probe:
    """The probe with the server's figures, kept only when it answered our bearer."""
    if models_body is None:
        return probe
    exposition, scraped_at = scraped
    return replace(probe, metrics=read_metrics(exposition, models_body,
                                               target.served_model_name, scraped_at))


def probe_one(target: Target, connect_timeout: float, timeout: float,
              scrape: bool = True) -> Probe:
    """One server alone: the probe, then, when it answered our bearer, the scrape."""
    probe, body = _probe(target, connect_timeout, timeout)
    if not scrape or body is None:
        return probe
    return with_metrics(target, probe, body, fetch_exposition(target, connect_timeout, timeout))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return type(exc).__name__ if not str(exc) else f"{type(exc).__name__}: {exc}"


def probe_many(targets: Iterable[Target], connect_timeout: float, timeout: float,
               concurrency: int = DEFAULT_CONCURRENCY, scrape: bool = True) -> dict[str, Probe]:
    """Probe (and scrape) every target concurrently; each target's key to its probe.

    Each scrape runs beside its probe in a worker of its own rather than after
    it, so reading ``/metrics`` adds no round trip to the pass; its figures are
    kept only for a server that answered ``/v1/models`` with our bearer.
    """
    targets = list(targets)
    if not targets:
        return {}
    workers = max(1, min(concurrency, len(targets)))
    with ThreadPoolExecutor(max_workers=workers * 2 if scrape else workers,
                            thread_name_prefix="llmao-probe") as pool:
        started = [(target, pool.submit(_probe, target, connect_timeout, timeout),
                    pool.submit(fetch_exposition, target, connect_timeout, timeout)
                    if scrape else None) for target in targets]
        results = {}
        for target, probed, scraped in started:
            probe, body = probed.result()
            results[target.key] = probe if scraped is None else with_metrics(
                target, probe, body, scraped.result())
        return results
