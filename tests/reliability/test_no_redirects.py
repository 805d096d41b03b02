"""R8: the controller's outbound clients never follow a redirect with a credential.

A real local HTTP server answers every request with a 301, 302, 307 or 308 that
points at a second real local server, which records whatever reaches it. The
LiteLLM client (master key), the llmao admin client (admin token) and the
Vast/RunPod listing clients (provider keys) are each sent to the first one: the
second must receive nothing, and the error must name the redirect without any
secret. One case starts on https and redirects to plain http. The same clients
refuse an answer too large or too deeply nested to read, instead of crashing.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils import http_json
from ansible_collections.llmao.fleet.plugins.module_utils.config_file import Provider
from ansible_collections.llmao.fleet.plugins.module_utils.http_json import HttpCallError, call_json
from ansible_collections.llmao.fleet.plugins.module_utils.listings import read_listings
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import (
    LiteLLM,
    LiteLLMError,
)
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    LlmaoAdmin,
    LlmaoAdminError,
)
from rig.tls import make_server_tls

MASTER_KEY = "sk-master-redirect-test-0123456789abcdef"
ADMIN_TOKEN = "admin-redirect-test-0123456789abcdefghij"
VAST_KEY = "vast-redirect-test-key-0123456789"
RUNPOD_KEY = "runpod-redirect-test-key-0123456789"
LOCATION_SECRETS = ("trap-password", "trap-query-secret")
SECRETS = (MASTER_KEY, ADMIN_TOKEN, VAST_KEY, RUNPOD_KEY, *LOCATION_SECRETS)
REDIRECTS = (301, 302, 307, 308)


@dataclass
class Recorder:
    """The second server: it answers 200 ``{}`` and keeps every request's line and headers."""

    url: str = ""
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)


def serve(handler: type[BaseHTTPRequestHandler],
          tls: ssl.SSLContext | None = None) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scheme = "https" if tls else "http"
    return server, f"{scheme}://127.0.0.1:{server.server_address[1]}"


def recorder_handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Record(BaseHTTPRequestHandler):
        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            recorder.seen.append((self.command, self.path, dict(self.headers)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_POST = answer

        def log_message(self, *args: object) -> None:
            pass

    return Record


def redirect_handler(status: int, target: str) -> type[BaseHTTPRequestHandler]:
    """Every request is sent on to ``target`` (with a user, password and query to hide)."""
    location = target.replace("://", f"://thief:{LOCATION_SECRETS[0]}@", 1)

    class Redirect(BaseHTTPRequestHandler):
        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            self.send_response(status)
            self.send_header("Location", f"{location}{self.path}?k={LOCATION_SECRETS[1]}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = answer

        def log_message(self, *args: object) -> None:
            pass

    return Redirect


@pytest.fixture(scope="module")
def recorder() -> Iterator[Recorder]:
    record = Recorder()
    server, record.url = serve(recorder_handler(record))
    yield record
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def redirectors(recorder: Recorder) -> Iterator[dict[int, str]]:
    """One redirecting server per status, all pointing at the recorder."""
    servers = {status: serve(redirect_handler(status, recorder.url)) for status in REDIRECTS}
    yield {status: url for status, (_, url) in servers.items()}
    for server, _ in servers.values():
        server.shutdown()
        server.server_close()


def litellm_read(url: str) -> None:
    LiteLLM(url, MASTER_KEY, timeout=5).routes()


def litellm_register(url: str) -> None:
    LiteLLM(url, MASTER_KEY, timeout=5).register({"model_name": "m",
                                                  "model_info": {"id": "llmao:x"}})


def admin_read(url: str) -> None:
    LlmaoAdmin(url, ADMIN_TOKEN, timeout=5).observations()


def admin_post(url: str) -> None:
    LlmaoAdmin(url, ADMIN_TOKEN, timeout=5).post_verdicts({"pass_at": 1.0, "verdicts": {},
                                                           "drift": []})


def listings(url: str) -> None:
    """The listings keep a failure per provider instead of raising: raise it here."""
    found = read_listings({"vast": Provider("vast", api_key=VAST_KEY, url=url),
                           "runpod": Provider("runpod", api_key=RUNPOD_KEY, url=url)},
                          timeout=5)
    assert set(found.failed) == {"vast", "runpod"}, found.failed
    raise HttpCallError("listings", " / ".join(found.failed.values()))


CLIENTS: dict[str, tuple[Callable[[str], None], type[Exception]]] = {
    "litellm-get": (litellm_read, LiteLLMError),
    "litellm-post": (litellm_register, LiteLLMError),
    "admin-get": (admin_read, LlmaoAdminError),
    "admin-post": (admin_post, LlmaoAdminError),
    "listings": (listings, HttpCallError),
}


def assert_refused(client: str, url: str, status: int, recorder: Recorder) -> None:
    call, error = CLIENTS[client]
    before = len(recorder.seen)
    with pytest.raises(error) as refused:
        call(url)
    message = str(refused.value)
    assert f"HTTP {status} redirect" in message and "not followed" in message, message
    assert url in message, "the error names the URL that redirected"
    assert recorder.url in message, "the error names where it wanted to send us"
    assert not [secret for secret in SECRETS if secret in message], message
    assert recorder.seen[before:] == [], "nothing reached the other server"


def test_the_recorder_sees_a_direct_call(recorder: Recorder):
    """The control: called directly, the recorder does see the bearer, so it can catch a leak."""
    call_json("GET", recorder.url + "/direct", MASTER_KEY, timeout=5)
    method, path, headers = recorder.seen.pop()
    assert (method, path, headers["Authorization"]) == ("GET", "/direct", f"Bearer {MASTER_KEY}")


@pytest.mark.parametrize("status", REDIRECTS)
@pytest.mark.parametrize("client", CLIENTS)
def test_a_redirect_is_never_followed(client: str, status: int, redirectors: dict[int, str],
                                      recorder: Recorder):
    assert_refused(client, redirectors[status], status, recorder)


def test_https_is_never_sent_on_as_http(tmp_path: Path, recorder: Recorder,
                                        monkeypatch: pytest.MonkeyPatch):
    """An https server (trusted CA) redirecting to plain http: refused like any redirect."""
    made = make_server_tls(tmp_path / "tls", ["127.0.0.1"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(made.certfile, made.keyfile)
    server, url = serve(redirect_handler(302, recorder.url), tls=context)
    monkeypatch.setenv("SSL_CERT_FILE", str(made.ca_file))
    try:
        for client in CLIENTS:
            assert_refused(client, url, 302, recorder)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("url", ["file:///etc/hostname", "ftp://127.0.0.1/x"])
def test_only_http_urls_are_called(url: str):
    with pytest.raises(HttpCallError, match="must be http:// or https://"):
        call_json("GET", url, MASTER_KEY, timeout=5)


def answering(body: bytes) -> type[BaseHTTPRequestHandler]:
    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Answer


@pytest.mark.parametrize(("body", "says"), [
    (b"[" * 10_000 + b"]" * 10_000, "nested too deeply"),
    (b'"' + b"x" * 2**20 + b'"', "the answer is over 65536 bytes"),
])
def test_a_hostile_answer_is_an_error_not_a_crash(body: bytes, says: str,
                                                  monkeypatch: pytest.MonkeyPatch):
    """A compromised LiteLLM or provider API: an endless or bottomless answer is refused."""
    monkeypatch.setattr(http_json, "MAX_ANSWER_BYTES", 65536)
    server, url = serve(answering(body))
    try:
        with pytest.raises(HttpCallError, match=says):
            call_json("GET", url + "/model/info", MASTER_KEY, timeout=5)
    finally:
        server.shutdown()
        server.server_close()
