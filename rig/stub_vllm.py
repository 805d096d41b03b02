#!/usr/bin/env python3
"""A test double of vLLM's OpenAI-compatible server, run as `vllm serve MODEL ...`.

Why: test boxes have no GPU, so this stands in for the process Supervisor runs. It keeps what the
fleet relies on: the port is bound only once the "model" has loaded (as vLLM does), `/health` and
`/metrics` need no key, everything under `/v1` needs `Authorization: Bearer $VLLM_API_KEY`, and
`/v1/models` lists the served name. Chat answers name the box and the listen port, so a test can
tell which server a request reached. Standard library only: it runs in a bare Debian box.

Faults and slowness come from a JSON file (env STUB_VLLM_BEHAVIOUR, default
/etc/llmao-stub/vllm.json; missing means defaults) keyed by listen port, with "*" for all:

    {"*": {"answer_delay_s": 0.2}, "8002": {"load_delay_s": 5, "fail": "reject"}}

- load_delay_s: sleep before binding the port;
- fail: null, "exit" (exit 1 at start), "health_500" (/health answers 500), or "reject"
  (/v1 answers 401 to every key);
- answer_delay_s: sleep before every answer.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, fields
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

DEFAULT_BEHAVIOUR_FILE = "/etc/llmao-stub/vllm.json"
FAILURE_MODES = (None, "exit", "health_500", "reject")
DEFAULT_MAX_MODEL_LEN = 8192


def say(message: str) -> None:
    print(f"stub-vllm: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Behaviour:
    load_delay_s: float = 0.0
    fail: str | None = None
    answer_delay_s: float = 0.0


def load_behaviour(path: str, port: int) -> Behaviour:
    """The knobs for this listen port: defaults, then the "*" entry, then the port's own entry."""
    try:
        with open(path, encoding="utf-8") as handle:
            table = json.load(handle)
    except FileNotFoundError:
        return Behaviour()
    except (OSError, ValueError) as exc:
        raise SystemExit(f"stub-vllm: cannot read behaviour file {path}: {exc}") from exc
    if not isinstance(table, dict):
        raise SystemExit(f'stub-vllm: {path}: expected an object keyed by port or "*"')
    merged = {**table.get("*", {}), **table.get(str(port), {})}
    known = {field.name for field in fields(Behaviour)}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise SystemExit(f"stub-vllm: {path}: unknown key(s) {unknown}; known: {sorted(known)}")
    if merged.get("fail") not in FAILURE_MODES:
        raise SystemExit(f"stub-vllm: {path}: fail must be one of {list(FAILURE_MODES)}")
    return Behaviour(**merged)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """vLLM's `serve` command line; flags the stub has no use for are accepted and returned."""
    parser = argparse.ArgumentParser(prog="vllm", allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", allow_abbrev=False)
    serve.add_argument("model")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", nargs="+")
    serve.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    serve.add_argument("--max-model-len", type=int, default=DEFAULT_MAX_MODEL_LEN)
    serve.add_argument("--api-key", help=argparse.SUPPRESS)
    return parser.parse_known_args(argv)


class Stub:
    """What the handlers answer from: the launch arguments, the key and the counters."""

    def __init__(self, args: argparse.Namespace, behaviour: Behaviour) -> None:
        self.model: str = args.model
        self.served_names: list[str] = args.served_model_name or [args.model]
        self.port: int = args.port
        self.max_model_len: int = args.max_model_len
        self.gpu_memory_utilization: float = args.gpu_memory_utilization
        self.behaviour = behaviour
        key = os.environ.get("VLLM_API_KEY", "")
        self.expected_auth = f"Bearer {key}".encode() if key else None
        self.box = os.environ.get("LLMAO_BOX_NAME") or socket.gethostname()
        self.created = int(time.time())
        self.lock = threading.Lock()
        self.running = 0
        self.finished = 0

    def authorized(self, header: str | None) -> bool:
        """vLLM's rule: with a key configured, the whole header must be `Bearer <key>`."""
        if self.behaviour.fail == "reject":
            return False
        if self.expected_auth is None:
            return True
        return hmac.compare_digest((header or "").encode(), self.expected_auth)

    def models(self) -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "vllm",
                    "root": self.model,
                    "parent": None,
                    "max_model_len": self.max_model_len,
                }
                for name in self.served_names
            ],
        }

    def completion(self, request: dict) -> dict:
        content = f"answered by {self.box} port {self.port}"
        prompt_words = sum(
            len(str(message.get("content", "")).split())
            for message in request.get("messages", [])
            if isinstance(message, dict)
        )
        return {
            "id": f"chatcmpl-{os.urandom(16).hex()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or self.served_names[0],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_words,
                "completion_tokens": len(content.split()),
                "total_tokens": prompt_words + len(content.split()),
            },
        }

    def metrics(self) -> str:
        label = f'model_name="{self.served_names[0]}"'
        with self.lock:
            running, finished = self.running, self.finished
        return (
            "# HELP vllm:num_requests_running Number of requests currently running.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{{{label}}} {running}\n"
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{label}}} 0\n"
            "# HELP vllm:gpu_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            "# TYPE vllm:gpu_cache_usage_perc gauge\n"
            f"vllm:gpu_cache_usage_perc{{{label}}} 0.0\n"
            "# HELP vllm:request_success_total Count of successfully processed requests.\n"
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{finished_reason="stop",{label}}} {finished}\n'
        )


def error_body(status: HTTPStatus, message: str, kind: str) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": status.value}}


class Handler(BaseHTTPRequestHandler):
    """Routes vLLM's endpoints; every answer goes through `answer` (delay, length, keep-alive)."""

    protocol_version = "HTTP/1.1"
    server_version = "stub-vllm"
    stub: Stub

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/health":
            self.health()
        elif path == "/metrics":
            self.answer(HTTPStatus.OK, self.stub.metrics().encode(), "text/plain; version=0.0.4")
        elif path == "/v1/models":
            if self.check_auth():
                self.answer_json(HTTPStatus.OK, self.stub.models())
        elif path == "/v1/chat/completions":
            self.answer_json(HTTPStatus.METHOD_NOT_ALLOWED, {"detail": "Method Not Allowed"})
        else:
            self.answer_json(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urlsplit(self.path).path
        if path == "/v1/chat/completions":
            if self.check_auth():
                self.chat(body)
        elif path in ("/health", "/metrics", "/v1/models"):
            self.answer_json(HTTPStatus.METHOD_NOT_ALLOWED, {"detail": "Method Not Allowed"})
        else:
            self.answer_json(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})

    def health(self) -> None:
        if self.stub.behaviour.fail == "health_500":
            self.answer(HTTPStatus.INTERNAL_SERVER_ERROR, b"")
        else:
            self.answer(HTTPStatus.OK, b"")

    def check_auth(self) -> bool:
        if self.stub.authorized(self.headers.get("Authorization")):
            return True
        self.answer_json(HTTPStatus.UNAUTHORIZED, {"error": "Unauthorized"})
        return False

    def chat(self, body: bytes) -> None:
        try:
            request = json.loads(body or b"null")
        except ValueError:
            request = None
        if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
            self.answer_json(
                HTTPStatus.BAD_REQUEST,
                error_body(
                    HTTPStatus.BAD_REQUEST,
                    "expected a JSON object with messages",
                    "BadRequestError",
                ),
            )
            return
        model = request.get("model")
        if model is not None and model not in self.stub.served_names:
            self.answer_json(
                HTTPStatus.NOT_FOUND,
                error_body(
                    HTTPStatus.NOT_FOUND, f"The model `{model}` does not exist.", "NotFoundError"
                ),
            )
            return
        if request.get("stream"):
            self.answer_json(
                HTTPStatus.BAD_REQUEST,
                error_body(
                    HTTPStatus.BAD_REQUEST, "the vLLM stub does not stream", "BadRequestError"
                ),
            )
            return
        with self.stub.lock:
            self.stub.running += 1
        try:
            self.answer_json(HTTPStatus.OK, self.stub.completion(request))
        finally:
            with self.stub.lock:
                self.stub.running -= 1
                self.stub.finished += 1

    def answer_json(self, status: HTTPStatus, payload: object) -> None:
        self.answer(status, json.dumps(payload).encode(), "application/json")

    def answer(self, status: HTTPStatus, body: bytes, content_type: str = "text/plain") -> None:
        if self.stub.behaviour.answer_delay_s:
            time.sleep(self.stub.behaviour.answer_delay_s)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # The request line and status only: headers (and so the bearer) are never logged.
        say(f"{self.address_string()} {format % args}")


class StubServer(ThreadingHTTPServer):
    daemon_threads = True
    # The stdlib default backlog (5) drops connections when many probes arrive at once.
    request_queue_size = 128


def make_server(stub: Stub, host: str) -> StubServer:
    handler = type("BoundHandler", (Handler,), {"stub": stub})
    server_class = StubServer
    if ":" in host:
        server_class = type("StubServerV6", (StubServer,), {"address_family": socket.AF_INET6})
    return server_class((host, stub.port), handler)


def serve(argv: list[str]) -> int:
    args, ignored = parse_args(argv)
    behaviour_file = os.environ.get("STUB_VLLM_BEHAVIOUR", DEFAULT_BEHAVIOUR_FILE)
    behaviour = load_behaviour(behaviour_file, args.port)
    if args.api_key is not None:
        say("--api-key on the command line is ignored: pass the key in VLLM_API_KEY")
    if ignored:
        say(f"ignoring arguments the stub has no use for: {' '.join(ignored)}")
    if behaviour.fail == "exit":
        say("failing at start, as the behaviour file says (fail=exit)")
        return 1
    stub = Stub(args, behaviour)
    say(f"loading {stub.model} (takes {behaviour.load_delay_s} s)")
    time.sleep(behaviour.load_delay_s)
    try:
        server = make_server(stub, args.host)
    except OSError as exc:
        say(f"cannot listen on {args.host}:{args.port}: {exc}")
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    say(f"serving {', '.join(stub.served_names)} on {args.host}:{args.port} for box {stub.box}")
    try:
        server.serve_forever()
    finally:
        server.server_close()
        say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
