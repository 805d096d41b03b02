"""A fake of the providers' listing APIs (Vast, RunPod) on loopback, for tests.

The real APIs cannot be reached from here. This serves whatever documented JSON shape
a test puts on a path (Vast: ``GET <base>/instances/`` pages with ``next_token``;
RunPod v2: ``GET <base>/pods`` answering ``{"pods": [...]}``), records every request's
path and ``Authorization`` header, and counts requests, so a test can check what a
listing client asked, with which key, and how often. Helpers below build the
documented shapes so tests do not each spell them out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rig.loopback_server import serving


class ProviderApi:
    """Path (with its query) to ``(status, body)``; a body of bytes is sent as it is."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.routes: dict[str, tuple[int, Any]] = {}
        self.seen: list[tuple[str, str | None]] = []

    def answer(self, path: str, body: Any, status: int = 200) -> None:
        self.routes[path] = (status, body)

    def requests_to(self, path: str) -> int:
        return sum(1 for seen_path, _key in self.seen if seen_path == path)


def vast_instance(instance_id: int, address: str | None, ports: dict[int, int],
                  price: float | None = None) -> dict[str, Any]:
    """One entry of Vast's instance list: Docker-style ``ports``, ``dph_total`` when priced."""
    instance: dict[str, Any] = {
        "id": instance_id, "public_ipaddr": address,
        "actual_status": "running" if address else "loading",
        "ports": {f"{listen}/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(public)}]
                  for listen, public in ports.items()} or None,
    }
    if price is not None:
        instance["dph_total"] = price
    return instance


def runpod_pod(pod_id: str, address: str | None, ports: dict[int, int],
               cost: float = 0.0) -> dict[str, Any]:
    """One entry of RunPod v2's pod list; ``runtime`` is null for a pod that is not running."""
    runtime = None if address is None else {"uptime": 60, "ports": [
        {"private": listen, "public": public, "type": "tcp", "ip": address}
        for listen, public in ports.items()]}
    return {"id": pod_id, "name": pod_id, "status": "RUNNING" if address else "EXITED",
            "cost": cost, "runtime": runtime}


@contextmanager
def serve_provider_api() -> Iterator[ProviderApi]:
    """A :class:`ProviderApi` on 127.0.0.1 for the ``with`` block."""
    api: ProviderApi

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            api.seen.append((self.path, self.headers.get("Authorization")))
            status, body = api.routes.get(self.path, (404, {"title": "Not Found",
                                                            "status": 404}))
            payload = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api = ProviderApi(f"http://127.0.0.1:{server.server_address[1]}")
    with serving(server):
        yield api
