#!/usr/bin/env python3
"""A contract fake of the LiteLLM proxy: the routes reconcile uses, nothing else.

Why: the real proxy (rig/litellm_harness.py) needs its own 750 MB virtual
environment and about 12 s to start. Unit tests and quick runs use this instead.
The contract tests in tests/integration/test_litellm_contract.py run the same
checks against both, so anything this fake answers differently from LiteLLM
fails there. What it mirrors (see rig/README-litellm.md for the observations):

- auth: `Authorization: Bearer <LITELLM_MASTER_KEY>`; no header 401, a header
  without `Bearer ` 401, another key 400 `no_db_connection` (a database-less
  proxy cannot look up virtual keys);
- `POST /model/new`, `POST /model/delete` (`{"id": ...}`), `GET /model/info` and
  `/v1/model/info` (optionally `?litellm_model_id=`), with LiteLLM's status codes
  and error shapes; `api_key` is never read back;
- `POST /v1/chat/completions` (and `/chat/completions`): forwarded to a
  deployment of the requested `model_name`, at its `api_base` with its
  `api_key`, so a chat through the fake reaches the vLLM behind it;
- `GET /health/liveliness` for readiness.

Standard library only. The master key comes from the environment, never argv:

    LITELLM_MASTER_KEY=... python3 rig/fake_litellm.py --port 4000
"""

from __future__ import annotations

import argparse
import hmac
import itertools
import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

UPSTREAM_TIMEOUT_S = 60.0
INFO_PATHS = ("/model/info", "/v1/model/info")
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
# LiteLLM takes the key from `Authorization` after any of these (Basic is for Langfuse clients).
AUTH_SCHEMES = ("Bearer ", "bearer ", "Basic ")


class ProxyErrorAnswer(Exception):
    """An answer other than 200: a status and the exact JSON body LiteLLM sends for it."""

    def __init__(self, status: int, body: dict) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


def proxy_error(status: int, message: str, kind: str, param: str | None = None) -> ProxyErrorAnswer:
    """LiteLLM's OpenAI-style error object, with the status repeated as a string `code`."""
    return ProxyErrorAnswer(
        status, {"error": {"message": message, "type": kind, "param": param, "code": str(status)}}
    )


def model_route_error(status: int, message: str) -> ProxyErrorAnswer:
    """How LiteLLM's model-management routes wrap their own refusals."""
    return proxy_error(status, str({"error": message}), "auth_error", "None")


def validation_error(*problems: tuple[str, list, str]) -> ProxyErrorAnswer:
    """FastAPI's 422 body: one entry per (type, location, message)."""
    return ProxyErrorAnswer(
        HTTPStatus.UNPROCESSABLE_ENTITY,
        {"detail": [{"type": t, "loc": loc, "msg": msg} for t, loc, msg in problems]},
    )


def not_an_object() -> ProxyErrorAnswer:
    """FastAPI's answer when a model route's body is not a JSON object (or not sent as JSON)."""
    return validation_error(
        ("model_attributes_type", ["body"],
         "Input should be a valid dictionary or object to extract fields from")
    )


def internal_error() -> ProxyErrorAnswer:
    """LiteLLM's bare 500, for bodies that crash its request types."""
    return ProxyErrorAnswer(
        HTTPStatus.INTERNAL_SERVER_ERROR,
        {"error": {"message": "Internal server error", "type": "internal_server_error"}},
    )


def check_string(value: object, loc: list, problems: list, required: bool = True) -> None:
    """Collect a pydantic-style problem when a field is not a string (or missing when required)."""
    if value is None:
        if required:
            problems.append(("missing", loc, "Field required"))
    elif not isinstance(value, str):
        problems.append(("string_type", loc, "Input should be a valid string"))


def check_object(value: object, loc: list, problems: list, required: bool = True) -> bool:
    """Collect a problem when a field is not a JSON object; True when it can be read further."""
    if value is None:
        if required:
            problems.append(("dict_type", loc, "Input should be a valid dictionary"))
        return False
    if not isinstance(value, dict):
        problems.append(("dict_type", loc, "Input should be a valid dictionary"))
        return False
    return True


def validate_deployment(body: object) -> dict:
    """Accept what LiteLLM's `Deployment` accepts for the fields llmao sends.

    LiteLLM's own quirk is kept: a body without `model_name` or `litellm_params`
    crashes its constructor and answers a bare 500, not a 422.
    """
    if not isinstance(body, dict):
        raise not_an_object()
    if "model_name" not in body or "litellm_params" not in body:
        raise internal_error()
    problems: list[tuple[str, list, str]] = []
    check_string(body["model_name"], ["body", "model_name"], problems)
    params = body["litellm_params"]
    if check_object(params, ["body", "litellm_params"], problems):
        check_string(params.get("model"), ["body", "litellm_params", "model"], problems)
        for key in ("api_base", "api_key"):
            check_string(params.get(key), ["body", "litellm_params", key], problems, False)
    info = body.get("model_info")
    if check_object(info, ["body", "model_info"], problems, False):
        check_string(info.get("id"), ["body", "model_info", "id"], problems, False)
    if problems:
        raise validation_error(*problems)
    return body


class Deployments:
    """The proxy's deployments in insertion order, with LiteLLM's read-back rules."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, dict] = {}
        self._turn = itertools.count()

    def add(self, body: dict) -> dict:
        info = dict(body.get("model_info") or {})
        model_id = info.get("id") or str(uuid.uuid4())
        info.update(id=model_id, db_model=True, member_auto_router=False)
        entry = {
            "model_name": body["model_name"],
            "litellm_params": dict(body["litellm_params"]),
            "model_info": info,
        }
        with self._lock:
            if model_id in self._by_id:
                raise model_route_error(
                    HTTPStatus.INTERNAL_SERVER_ERROR,
                    "Failed to add model to db. Check your server logs for more details.",
                )
            self._by_id[model_id] = entry
        return {"model_id": model_id, "model_name": entry["model_name"], "model_info": info}

    def delete(self, model_id: str) -> None:
        with self._lock:
            if self._by_id.pop(model_id, None) is None:
                raise model_route_error(
                    HTTPStatus.BAD_REQUEST, f"Model with id={model_id} not found in db"
                )

    def listing(self, model_id: str | None = None) -> list[dict]:
        """What /model/info shows: everything but the key LiteLLM never reads back."""
        with self._lock:
            if model_id is None:
                entries = list(self._by_id.values())
            elif model_id in self._by_id:
                entries = [self._by_id[model_id]]
            else:
                raise ProxyErrorAnswer(
                    HTTPStatus.BAD_REQUEST,
                    {"detail": {"error": f"Model id = {model_id} not found on litellm proxy"}},
                )
        return [public_view(entry) for entry in entries]

    def pick(self, model_name: str | None) -> dict:
        """One deployment of the group, taking turns like a router spreading load."""
        with self._lock:
            group = [e for e in self._by_id.values() if e["model_name"] == model_name]
        if not group:
            message = (
                f"/chat/completions: Invalid model name passed in model={model_name}. "
                "Call `/v1/models` to view available models for your key."
            )
            raise proxy_error(HTTPStatus.BAD_REQUEST, message, "invalid_request_error")
        return group[next(self._turn) % len(group)]


def public_view(entry: dict) -> dict:
    """A copy of a deployment as /model/info shows it: the bearer is stored, never read back."""
    params = {k: v for k, v in entry["litellm_params"].items() if k != "api_key"}
    return {**entry, "litellm_params": params, "model_info": dict(entry["model_info"])}


def forward_chat(deployment: dict, request: dict) -> dict:
    """Send the chat to the deployment's vLLM with its bearer; map failures as LiteLLM does."""
    params = deployment["litellm_params"]
    upstream_model = params["model"].split("/", 1)[-1]
    payload = json.dumps({**request, "model": upstream_model}).encode()
    headers = {"Content-Type": "application/json"}
    if params.get("api_key"):
        headers["Authorization"] = f"Bearer {params['api_key']}"
    url = f"{params.get('api_base', '').rstrip('/')}/chat/completions"
    group = deployment["model_name"]
    try:
        upstream = urllib.request.Request(url, data=payload, headers=headers)
        with urllib.request.urlopen(upstream, timeout=UPSTREAM_TIMEOUT_S) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as error:
        kind = "authentication_error" if error.code == 401 else "api_error"
        message = f"upstream answered {error.code} for model group '{group}'"
        raise proxy_error(error.code, message, kind) from None
    except (OSError, ValueError) as error:
        message = f"cannot reach the deployment of model group '{group}': {type(error).__name__}"
        raise proxy_error(
            HTTPStatus.INTERNAL_SERVER_ERROR, message, "internal_server_error"
        ) from None
    return {**answer, "model": request["model"]}


class FakeLiteLLM(ThreadingHTTPServer):
    """The HTTP server: holds the master key and the deployments."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], master_key: str) -> None:
        super().__init__(address, Handler)
        self.master_key = master_key.encode()
        self.deployments = Deployments()

    def authorize(self, header: str | None) -> None:
        """LiteLLM's answers without a database: only the master key gets in."""
        if header is None:
            raise proxy_error(
                HTTPStatus.UNAUTHORIZED,
                "Authentication Error, No api key passed in.", "auth_error", "None",
            )
        key = presented_key(header)
        if not key:
            raise proxy_error(
                HTTPStatus.UNAUTHORIZED,
                "Authentication Error, Malformed API Key passed in. "
                "Ensure Key has `Bearer ` prefix.",
                "auth_error", "None",
            )
        if not hmac.compare_digest(key.encode(), self.master_key):
            raise proxy_error(HTTPStatus.BAD_REQUEST, "No connected db.", "no_db_connection")


def presented_key(header: str) -> str:
    """The key after one of the schemes LiteLLM strips; empty for any other scheme."""
    for scheme in AUTH_SCHEMES:
        if header.startswith(scheme):
            return header[len(scheme):]
    return ""


class Handler(BaseHTTPRequestHandler):
    server: FakeLiteLLM
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.answer(self.route_get)

    def do_POST(self) -> None:
        self.answer(self.route_post)

    def route_get(self, path: str, query: dict[str, list[str]]) -> object:
        if path == "/health/liveliness":
            return "I'm alive!"
        if path in INFO_PATHS:
            self.server.authorize(self.headers.get("Authorization"))
            wanted = query.get("litellm_model_id", [None])[0]
            return {"data": self.server.deployments.listing(wanted)}
        raise ProxyErrorAnswer(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})

    def route_post(self, path: str, query: dict[str, list[str]]) -> object:
        routes = {"/model/new": self.model_new, "/model/delete": self.model_delete}
        routes.update(dict.fromkeys(CHAT_PATHS, self.chat))
        if path not in routes:
            raise ProxyErrorAnswer(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})
        sent_as_json, body = self.read_body(path)
        self.server.authorize(self.headers.get("Authorization"))
        return routes[path](sent_as_json, body)

    def model_new(self, sent_as_json: bool, body: object) -> dict:
        if not sent_as_json:
            raise not_an_object()
        return self.server.deployments.add(validate_deployment(body))

    def model_delete(self, sent_as_json: bool, body: object) -> dict:
        if not sent_as_json:
            raise not_an_object()
        model_id = body.get("id") if isinstance(body, dict) else None
        problems: list[tuple[str, list, str]] = []
        check_string(model_id, ["body", "id"], problems)
        if problems:
            raise validation_error(*problems)
        self.server.deployments.delete(model_id)
        return {"message": f"Model: {model_id} deleted successfully"}

    def chat(self, sent_as_json: bool, body: object) -> dict:
        """LiteLLM reads a chat body only when it is sent as JSON, and checks it in this order."""
        request = body if sent_as_json else {}
        if not isinstance(request, dict):
            raise internal_error()
        if "messages" not in request:
            raise proxy_error(
                HTTPStatus.BAD_REQUEST,
                "/chat/completions: Missing required parameter: 'messages'.",
                "invalid_request_error", "messages",
            )
        model = request.get("model")
        if model is not None and not isinstance(model, str):
            raise proxy_error(
                HTTPStatus.BAD_REQUEST, "'model' must be a string.", "bad_request_error", "model"
            )
        return forward_chat(self.server.deployments.pick(model), request)

    def read_body(self, path: str) -> tuple[bool, object]:
        """(sent as JSON, parsed body). Broken JSON is refused before auth, as LiteLLM does."""
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not (self.headers.get("Content-Type") or "").startswith("application/json"):
            return False, None
        try:
            return True, json.loads(raw)
        except json.JSONDecodeError as error:
            if path in CHAT_PATHS:
                raise proxy_error(
                    HTTPStatus.BAD_REQUEST, f"Invalid JSON payload: {error}",
                    "invalid_request_error", "request_body",
                ) from None
            problem = ("json_invalid", ["body", error.pos], "JSON decode error")
            raise validation_error(problem) from None

    def answer(self, route) -> None:  # one of the route_* methods
        split = urlsplit(self.path)
        try:
            status, body = HTTPStatus.OK, route(split.path, parse_qs(split.query))
        except ProxyErrorAnswer as error:
            status, body = error.status, error.body
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # http.server's signature
        """The request line and status only: headers (the master key) are never logged."""
        sys.stderr.write(f"fake-litellm: {self.address_string()} {format % args}\n")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    master_key = os.environ.get("LITELLM_MASTER_KEY")
    if not master_key:
        print("fake-litellm: set LITELLM_MASTER_KEY in the environment", file=sys.stderr)
        return 2
    try:
        server = FakeLiteLLM((args.host, args.port), master_key)
    except OSError as exc:
        print(f"fake-litellm: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"fake-litellm: serving on {args.host}:{args.port}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
