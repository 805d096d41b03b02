"""A fake of the providers' listing APIs (Vast, RunPod) on loopback, for tests.

The real APIs cannot be reached from here. This serves whatever documented JSON shape
a test puts on a path (Vast: ``GET <base>/instances/`` pages with ``next_token``;
RunPod v2: ``GET <base>/pods`` answering ``{"pods": [...]}``), records every request's
path and ``Authorization`` header, and counts requests, so a test can check what a
listing client asked, with which key, and how often.

It behaves as the documented APIs do where a client must cope: RunPod leaves the pods
of Instant Clusters (those with a ``clusterId``) out unless asked with
``includeClusterPods=true``; a throttled path answers 429 with a problem+JSON body and
the headers a test gives (``Retry-After``, RunPod's IETF ``RateLimit`` fields); errors
are problem+JSON (``type``, ``title``, ``status``, ``detail``). Helpers below build the
documented shapes so tests do not each spell them out.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rig.loopback_server import serving

NOT_FOUND = {"type": "about:blank", "title": "Not Found", "status": 404}


class ProviderApi:
    """Path to ``(status, body)``; a body of bytes is sent as it is.

    A request is answered by the route of its path with its query when there is one,
    else by the route of its path alone. ``throttle`` makes the next requests to a path
    fail first (429 or 5xx), as a provider under load does.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.routes: dict[str, tuple[int, Any]] = {}
        self.seen: list[tuple[str, str | None]] = []
        self.failures: dict[str, list[tuple[int, dict[str, str]]]] = {}

    def answer(self, path: str, body: Any, status: int = 200) -> None:
        self.routes[path] = (status, body)

    def throttle(self, path: str, times: int, status: int = 429,
                 headers: dict[str, str] | None = None) -> None:
        """The next ``times`` requests to ``path`` (any query) answer ``status`` first."""
        self.failures.setdefault(path, []).extend([(status, dict(headers or {}))] * times)

    def requests_to(self, path: str) -> int:
        return sum(1 for seen_path, _key in self.seen if seen_path == path)

    def reply(self, target: str) -> tuple[int, Any, dict[str, str]]:
        """What the fake answers to ``target`` (path and query): status, body, headers."""
        path, _mark, query = target.partition("?")
        pending = self.failures.get(path)
        if pending:
            status, headers = pending.pop(0)
            return status, problem(status, "Too Many Requests" if status == 429
                                   else "Service Unavailable"), headers
        status, body = self.routes.get(target) or self.routes.get(path) or (404, NOT_FOUND)
        if path.endswith("/pods") and isinstance(body, dict) and \
                isinstance(body.get("pods"), list):
            asked = urllib.parse.parse_qs(query).get("includeClusterPods") == ["true"]
            body = {**body, "pods": [pod for pod in body["pods"]
                                     if asked or not isinstance(pod, dict)
                                     or not pod.get("clusterId")]}
        return status, body, {}


def problem(status: int, title: str) -> dict[str, Any]:
    """An RFC 9457 problem+JSON error body, as RunPod's v2 API answers its errors."""
    return {"type": "about:blank", "title": title, "status": status,
            "detail": f"{title.lower()}: try again later"}


def vast_instance(instance_id: int, address: str | None, ports: dict[int, int],
                  price: float | None = None, status: str | None = None,
                  bid: bool = False, gpus: Any = None) -> dict[str, Any]:
    """One entry of Vast's instance list: Docker-style ``ports``, ``dph_total`` when priced,
    ``actual_status`` (running when it has an address, else loading, unless given),
    ``is_bid`` (an interruptible instance) and ``num_gpus`` when given (any value, so a
    test can serve nonsense)."""
    instance: dict[str, Any] = {
        "id": instance_id, "public_ipaddr": address,
        "actual_status": status or ("running" if address else "loading"),
        "is_bid": bid,
        "ports": {f"{listen}/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(public)}]
                  for listen, public in ports.items()} or None,
    }
    if price is not None:
        instance["dph_total"] = price
    if gpus is not None:
        instance["num_gpus"] = gpus
    return instance


def runpod_pod(pod_id: str, address: str | None, ports: dict[int, int],
               cost: float = 0.0, interruptible: bool = False, status: str | None = None,
               cluster: str | None = None, gpus: Any = None) -> dict[str, Any]:
    """One entry of RunPod v2's pod list; ``runtime`` is null for a pod that is not running.

    ``desiredStatus`` is RUNNING when it has an address, else EXITED, unless given; a pod
    of an Instant Cluster carries its ``clusterId``; ``gpuCount`` is there when given.
    """
    runtime = None if address is None else {"uptime": 60, "ports": [
        {"private": listen, "public": public, "type": "tcp", "ip": address}
        for listen, public in ports.items()]}
    pod: dict[str, Any] = {"id": pod_id, "name": pod_id,
                           "desiredStatus": status or ("RUNNING" if address else "EXITED"),
                           "interruptible": interruptible, "cost": cost, "runtime": runtime}
    if cluster is not None:
        pod["clusterId"] = cluster
    if gpus is not None:
        pod["gpuCount"] = gpus
    return pod


@contextmanager
def serve_provider_api() -> Iterator[ProviderApi]:
    """A :class:`ProviderApi` on 127.0.0.1 for the ``with`` block."""
    api: ProviderApi

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            api.seen.append((self.path, self.headers.get("Authorization")))
            status, body, headers = api.reply(self.path)
            payload = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if status < 400
                             else "application/problem+json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api = ProviderApi(f"http://127.0.0.1:{server.server_address[1]}")
    with serving(server):
        yield api
