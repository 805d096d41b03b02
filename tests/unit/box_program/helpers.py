"""Building blocks for the box program's tests: the module, payloads, a scripted llmao, a box.

The box program is a single file meant to be copied to boxes, not a package, so the tests load
it from its path. llmao is played by a real HTTP(S) server on 127.0.0.1; the GPU and
supervisorctl, which cannot exist here, by small shell scripts on PATH that log their calls.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import ssl
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

from rig.loopback_server import serving

ROOT = Path(__file__).resolve().parents[3]
FILES = ROOT / "roles" / "vllm_box" / "files"
INSTALL_SET = FILES / "install_set.py"
VAST_PROVISION = FILES / "provision" / "vast" / "provision.sh"
RUNPOD_PROVISION = FILES / "provision" / "runpod" / "provision.sh"
RUNPOD_DOCKERFILE = FILES / "provision" / "runpod" / "Dockerfile"

FLEET_KEY = "fleet-key-TEST-9f8e7d6c5b4a"
BEARERS = ("sk-vllm-TESTbearerONE_abc", "sk-vllm-TESTbearerTWO-def", "sk-vllm-TESTbearerTHREE")
BOX = "203.0.113.10"


def load_install_set() -> ModuleType:
    """Import install_set.py from its path (registered, so its dataclasses resolve)."""
    spec = importlib.util.spec_from_file_location("llmao_install_set", INSTALL_SET)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def server_entry(index: int = 0, **overrides: Any) -> dict[str, Any]:
    """One server as llmao's payload carries it; index picks name, port and bearer."""
    entry: dict[str, Any] = {
        "name": f"model-{index}",
        "model": f"org/model-{index}",
        "served_model_name": f"served-{index}",
        "host": BOX,
        "port": 8001 + index,
        "api_key": BEARERS[index],
        "args": [],
    }
    entry.update(overrides)
    return {key: value for key, value in entry.items() if value is not None}


def payload(*servers: dict[str, Any], revision: str | None = "rev-0001") -> dict[str, Any]:
    doc: dict[str, Any] = {"host": BOX, "servers": list(servers)}
    if revision is not None:
        doc["revision"] = revision
    return doc


# --------------------------------------------------------------------------- llmao


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes


@dataclass
class FakeLlmao:
    """A real HTTP(S) server on loopback answering from a script per path.

    ``script(path, (status, body), ...)`` queues answers; the last one repeats.
    Every request is kept in ``seen``.
    """

    tls: ssl.SSLContext | None = None
    seen: list[Seen] = field(default_factory=list)
    answers: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)

    def script(self, path: str, *answers: tuple[int, Any]) -> None:
        self.answers[path] = [(status, body if isinstance(body, bytes)
                               else json.dumps(body).encode()) for status, body in answers]

    def next_answer(self, path: str) -> tuple[int, bytes]:
        queue = self.answers.get(path) or [(404, b'{"error": {"message": "no route"}}')]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def answer(self, request: Seen) -> tuple[int, bytes, dict[str, str]]:
        """Status, body and extra headers for a request: the next scripted answer here."""
        return (*self.next_answer(request.path), {})

    def requests_to(self, path: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.path == path]

    @contextmanager
    def serve(self) -> Iterator[FakeLlmao]:
        llmao = self

        class Handler(BaseHTTPRequestHandler):
            def handle_one(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Seen(self.command, self.path,
                               {k.lower(): v for k, v in self.headers.items()},
                               self.rfile.read(length))
                llmao.seen.append(request)
                status, body, headers = llmao.answer(request)
                self.send_response(status)
                if 300 <= status < 400 and status != 304:
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = handle_one

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that refuses our certificate is part of the test

        server = Server(("127.0.0.1", 0), Handler)
        if self.tls is not None:
            server.socket = self.tls.wrap_socket(server.socket, server_side=True)
        scheme = "https" if self.tls else "http"
        self.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
        with serving(server, poll_interval=0.05):
            yield self


def assert_sent_by_the_box(request: Seen, method: str) -> None:
    """The request came from the box program: its method, the fleet key, the box's name."""
    assert request.method == method
    assert request.headers["authorization"] == f"Bearer {FLEET_KEY}"
    assert request.headers["x-llmao-host"] == BOX


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --------------------------------------------------------------------------- box


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@dataclass
class Box:
    """A box in a temp folder: data and conf dirs, fake nvidia-smi and supervisorctl on PATH.

    The fakes use shell builtins only, so PATH can be just their folder: nothing from the
    machine running the tests (a real supervisorctl, say) can leak in.
    """

    root: Path

    def __post_init__(self) -> None:
        self.bin = self.root / "bin"
        self.data = self.root / "data"
        self.conf = self.root / "conf.d"
        self.ctl_log = self.root / "supervisorctl.log"
        self.bin.mkdir()
        self.conf.mkdir()
        self.supervisorctl(status=0)
        self.gpu(total_mib=81920, free_mib=81920)

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": str(self.bin), "DATA_DIRECTORY": str(self.data),
                "SUPERVISOR_CONF_DIR": str(self.conf), "LLMAO_FETCH_ATTEMPTS": "3",
                "LLMAO_FETCH_BACKOFF_S": "0.01", "LLMAO_FETCH_TIMEOUT_S": "10", **extra}

    def gpu(self, total_mib: int, free_mib: int, count: int = 1) -> None:
        self.cards(*[(total_mib, free_mib)] * count)

    def cards(self, *sizes: tuple[int, int]) -> None:
        """nvidia-smi's answer to the box program's query: one line per (total, free) MiB."""
        lines = "".join(f'echo "{index}, GPU-{index:08d}-test, NVIDIA Test GPU, {total}, '
                        f'{free}"\n' for index, (total, free) in enumerate(sizes))
        write_script(self.bin / "nvidia-smi", lines)

    def gpu_output(self, body: str) -> None:
        write_script(self.bin / "nvidia-smi", body)

    def no_gpu(self) -> None:
        (self.bin / "nvidia-smi").unlink(missing_ok=True)

    def supervisorctl(self, status: int, update_says: str | None = None) -> None:
        """Log each call; ``update`` answers ``update_says`` (supervisorctl's lines) if given."""
        said = self.root / "update.out"
        said.unlink(missing_ok=True)
        if update_says is not None:
            said.write_text(update_says)
        write_script(self.bin / "supervisorctl",
                     f'printf "%s\\n" "$*" >> "{self.ctl_log}"\n'
                     f'if [ "$1" = update ] && [ -f "{said}" ]; then\n'
                     f'  while IFS= read -r line; do echo "$line"; done < "{said}"\n'
                     f'else\n  echo "$1: ok"\nfi\nexit {status}\n')

    def ctl_calls(self) -> list[str]:
        return self.ctl_log.read_text().splitlines() if self.ctl_log.exists() else []

    def write_payload(self, doc: Any, name: str = "payload.json") -> Path:
        path = self.root / name
        path.write_text(json.dumps(doc))
        return path

    def program(self, name: str) -> Path:
        return self.conf / f"llmao-{name}.conf"

    @property
    def record(self) -> Path:
        return self.data / "llmao" / "applied.json"

    def snapshot(self) -> dict[str, tuple[int, int, bytes]]:
        """Every file under conf and data with its inode and mtime: what a rewrite changes."""
        files = {}
        for folder in (self.conf, self.data):
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    stat = path.stat()
                    files[str(path)] = (stat.st_ino, stat.st_mtime_ns, path.read_bytes())
        return files
