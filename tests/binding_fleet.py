"""A real ``llmao-server`` (two workers) on the test fleet, for the box identity tests: its
boxes' program runs, and calls from chosen loopback peers (docs/box-identity.md).

The server sees the TCP peer's address, and every 127.x.y.z address is local: a call made from
``127.0.0.66`` is another peer than one from ``127.0.0.1``, which is how these tests play a box,
a thief and the controller on one machine.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.llmao_process import LlmaoServer, start_llmao_server
from tests.reliability.box_runs import Ending, run_box
from tests.server.fleet_pair import (
    ADMIN_TOKEN,
    CONFIG,
    FLEET_KEY,
    KNOWN,
    TOKEN_HEADER,
    box_headers,
    write_pair,
)
from tests.unit.box_program.helpers import Box

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


class Fleet:
    """A real server on a fleet, boxes in folders of their own, and every output seen.

    ``document`` is the config to serve (the test fleet's by default); its store is ``state``
    and its ``fleet.binding`` is ``binding`` when given."""

    def __init__(self, folder: Path, state: str, binding: str | None = None,
                 document: dict[str, Any] | None = None):
        self.folder = folder
        document = json.loads(json.dumps(document or CONFIG))
        document["server"] = {"state": state}
        if binding is not None:
            document["fleet"]["binding"] = binding
        config, models = write_pair(folder / "fleet", document)
        self.paths = Path(config), Path(models)
        self.state = state
        self.outputs: list[str] = []
        self.logs: list[str] = []
        self.server = self.start()

    def start(self) -> LlmaoServer:
        return start_llmao_server(*self.paths, self.folder, workers=2)

    def restart(self) -> None:
        self.server.stop()
        self.logs.append(self.server.log())
        self.server = self.start()

    def box(self, name: str) -> Box:
        root = self.folder / name
        root.mkdir()
        return Box(root)

    def run(self, box: Box, host: str = KNOWN, *args: str) -> Ending:
        ending = run_box(box, "--no-handover", *args, env={
            "LLMAO_URL": self.server.url, "FLEET_KEY": FLEET_KEY, "LLMAO_HOST": host})
        self.outputs.append(ending.out + ending.err)
        return ending

    def call(self, method: str, path: str, headers: dict[str, str], *,
             peer: str = "127.0.0.1", body: Any = None) -> tuple[int, dict, str]:
        """One request on a connection of its own from ``peer`` (``body`` sent as JSON): the
        status, the JSON answer and the box token it hands out ("" when none)."""
        connection = self.connection(peer)
        try:
            return exchange(connection, method, path, headers, body)
        finally:
            connection.close()

    def at_once(self, peers: Sequence[str], method: str, path: str,
                headers: dict[str, str]) -> list[tuple[int, dict, str]]:
        """The same request from every peer at the same moment (:meth:`call`'s answers, in
        the peers' order): every connection is open before any request goes out, and fresh
        connections land on both workers."""
        start = threading.Barrier(len(peers))

        def one(peer: str) -> tuple[int, dict, str]:
            connection = self.connection(peer, timeout=20)
            try:
                connection.connect()
                start.wait(timeout=20)
                return exchange(connection, method, path, headers)
            finally:
                connection.close()

        with ThreadPoolExecutor(len(peers)) as pool:
            return list(pool.map(one, peers))

    def connection(self, peer: str, timeout: float = 10) -> http.client.HTTPConnection:
        host, port = self.server.url.removeprefix("http://").rsplit(":", 1)
        return http.client.HTTPConnection(host, int(port), timeout=timeout,
                                          source_address=(peer, 0))

    def fetch(self, host: str, token: str | None = None, **headers: str) -> tuple[int, str]:
        sent = {**box_headers(host), **headers}
        if token:
            sent[TOKEN_HEADER] = token
        status, _, issued = self.call("GET", "/vllm/config", sent)
        return status, issued

    def release(self, host: str) -> dict:
        status, body, _ = self.call("DELETE", f"/admin/api/boxes/{host}/binding", ADMIN)
        assert status == 200, body
        return body

    def everything_said(self) -> str:
        return "\n".join([*self.logs, self.server.log(), *self.outputs])


def exchange(connection: http.client.HTTPConnection, method: str, path: str,
             headers: dict[str, str], body: Any = None) -> tuple[int, dict, str]:
    """Send one request on ``connection``: the status, the JSON answer and the box token it
    hands out ("" when none)."""
    sent, data = dict(headers), None
    if body is not None:
        data, sent["Content-Type"] = json.dumps(body), "application/json"
    connection.request(method, path, body=data, headers=sent)
    answer = connection.getresponse()
    read = answer.read()
    return answer.status, json.loads(read) if read else {}, answer.getheader(TOKEN_HEADER) or ""


def token_of(box: Box) -> str | None:
    """The box token the box program kept, if any."""
    path = box.data / "llmao" / "box-token"
    return path.read_text().strip() if path.exists() else None
