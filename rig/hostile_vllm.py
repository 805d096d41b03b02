"""A vLLM that answers like a hostile rented box: drips, huge bodies, absurd figures.

Why: a box is a machine rented on the internet and holds the fleet key, so whatever it answers
to a probe, a scrape or (for the box program) a fetch is hostile input. The honest double
(``stub_vllm.py``) tells the truth; this one answers ``/health``, ``/v1/models`` and ``/metrics``
honestly except on the paths its ``faults`` name (``"*"`` for every path), where it answers
with one of:

- ``drip_body``: 200 with a chunked body of no announced length, one byte every ``drip_s``
  (a length announced over a reader's cap could be refused unread; this one cannot);
- ``drip_headers``: the status line, then one header line every ``drip_s``, never ending;
- ``slow_status``: the status line itself, one byte every ``drip_s``;
- ``huge_body``: 200 with ``Content-Length`` 10^9, sent as fast as the reader takes it;
- ``status_line``: a 64 KB status line that is not HTTP;
- ``deep_json``: 200 with JSON nested 100,000 deep (Python's reader raises RecursionError);
- the expositions of :data:`EXPOSITIONS`: the issue's absurd figures (``num_gpu_blocks="²"``,
  a 5,000-digit label, two engines at 1.7e308, a 401-digit value), odd Unicode in labels,
  and one engine given twice.

It runs in the test's process, on any loopback address (``127.x.y.z`` names a box of
``rig.local_fleet``), over HTTPS when given a server context, and ``faults`` may change
between requests. Standard library only.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from rig.loopback_server import serving

HUGE = 10**9
STATUS_LINE_BYTES = 64 * 1024
HONEST_LABELS = 'engine="0",model_name="{name}"'
HONEST_CACHE = 'block_size="16",engine="0",num_gpu_blocks="{blocks}"'


def _exposition(running: str = "1.0", cache: str = HONEST_CACHE.format(blocks=4096),
                labels: str = HONEST_LABELS, extra: str = "") -> str:
    """A V1 exposition in vLLM's names; each argument replaces one honest part."""
    return (f"# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{{{labels}}} {running}\n{extra}"
            f"vllm:num_requests_waiting{{{labels}}} 0.0\n"
            f"vllm:kv_cache_usage_perc{{{labels}}} 0.25\n"
            f"vllm:generation_tokens_total{{{labels}}} 900.0\n"
            f"vllm:cache_config_info{{{cache}}} 1.0\n")


# Each the whole /metrics answer of one fault; "{name}" is the served name.
EXPOSITIONS: dict[str, str] = {
    "honest": _exposition(),
    "squared": _exposition(cache=HONEST_CACHE.format(blocks="\u00b2")),
    "long_label": _exposition(cache=HONEST_CACHE.format(blocks="9" * 5000)),
    "overflow": _exposition(extra='vllm:num_requests_running{engine="1",model_name="{name}"} '
                            "1.7e308\n", running="1.7e308"),
    "long_number": _exposition(running="9" * 401),
    "odd_unicode": _exposition(labels='engine="\u202e0\u200b",model_name="\U0001f600\\n\\"x"',
                               cache='block_size="\u0661\u0666",engine="0",num_gpu_blocks="4096"'),
    "duplicate_engines": _exposition(extra=f'vllm:num_requests_running{{{HONEST_LABELS}}} 1.0\n'),
}
STREAMED = frozenset({"drip_body", "drip_headers", "slow_status", "huge_body", "status_line"})
FAULTS = STREAMED | frozenset(EXPOSITIONS) | {"deep_json"}


class HostileVllm(ThreadingHTTPServer):
    """The server: ``faults`` maps a path (or ``"*"``) to a fault; ``served`` is listed."""

    daemon_threads = True

    def __init__(self, host: str, port: int, served: str, drip_s: float = 0.3):
        self.served, self.drip_s = served, drip_s
        self.faults: dict[str, str] = {}
        self.stopping = threading.Event()
        self.requests: list[str] = []
        super().__init__((host, port), Handler)

    def fault(self, path: str) -> str | None:
        return self.faults.get(path, self.faults.get("*"))

    def set_faults(self, faults: Mapping[str, str]) -> None:
        unknown = set(faults.values()) - FAULTS
        if unknown:
            raise ValueError(f"unknown faults: {sorted(unknown)}")
        self.faults = dict(faults)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HostileVllm

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = urlsplit(self.path).path
        self.server.requests.append(path)
        fault = self.server.fault(path)
        if fault in STREAMED:
            getattr(self, fault)()
        elif fault == "deep_json":
            self.whole(b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
        elif path == "/metrics":
            text = EXPOSITIONS[fault or "honest"].replace("{name}", self.server.served)
            self.whole(text.encode("utf-8"), "text/plain; version=0.0.4")
        elif path == "/v1/models":
            entry = {"id": self.server.served, "object": "model", "max_model_len": 8192}
            self.whole(json.dumps({"object": "list", "data": [entry]}).encode())
        else:
            self.whole(b"", "text/plain")

    do_POST = do_GET  # noqa: N815 (a box program's ask meets the same faults)

    def whole(self, body: bytes, kind: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def drips(self) -> Iterator[None]:
        """Once per ``drip_s`` until the server stops (or the reader hangs up)."""
        while not self.server.stopping.wait(self.server.drip_s):
            yield

    def send(self, data: bytes) -> bool:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            return False
        return True

    def drip_body(self) -> None:
        if self.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"):
            for _ in self.drips():
                if not self.send(b"1\r\nx\r\n"):
                    break
        self.close_connection = True

    def drip_headers(self) -> None:
        if self.send(b"HTTP/1.1 200 OK\r\n"):
            for number, _ in enumerate(self.drips()):
                if not self.send(f"X-Drip-{number}: x\r\n".encode()):
                    break
        self.close_connection = True

    def slow_status(self) -> None:
        for _ in self.drips():
            if not self.send(b"H"):
                break
        self.close_connection = True

    def huge_body(self) -> None:
        chunk = b"x" * 65536
        if self.send(f"HTTP/1.1 200 OK\r\nContent-Length: {HUGE}\r\n\r\n".encode()):
            for _ in range(HUGE // len(chunk)):
                if self.server.stopping.is_set() or not self.send(chunk):
                    break
        self.close_connection = True

    def status_line(self) -> None:
        line = b"\x1b[31m<script>" + b"A" * (STATUS_LINE_BYTES - 20) + b"\r\n"
        self.send(line + b"\r\n")
        self.close_connection = True

    def log_message(self, *args) -> None:
        pass


@contextmanager
def hostile_vllm(host: str, port: int, served: str, drip_s: float = 0.3,
                 faults: Mapping[str, str] | None = None,
                 tls: ssl.SSLContext | None = None) -> Iterator[HostileVllm]:
    """A :class:`HostileVllm` answering for a ``with`` block; its drips end with the block."""
    server = HostileVllm(host, port, served, drip_s)
    server.set_faults(faults or {})
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    with serving(server, poll_interval=0.1):
        try:
            yield server
        finally:
            # The drips notice within one period; their connections close with them.
            server.stopping.set()
            time.sleep(min(drip_s, 1.0))
