"""Item 1 of issue 10: idle, trickling and pipelining connections cost the server little.

The real ``llmao-server`` (two gunicorn workers) on loopback, with 1,000
connections held open by a client without a key (half silent, half trickling a
request's headers a byte at a time): a box's keyed fetch still answers 200
quickly, and every one of those connections is dropped once the read time
limit has passed, quietly. The same over HTTPS, where a silent client never
finishes its TLS handshake.
"""

from __future__ import annotations

import http.client
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rig.slow_clients import is_open, pipelining_clients, slow_clients
from rig.tls import make_server_tls
from tests.llmao_process import LlmaoServer, start_llmao_server
from tests.server.fleet_pair import KNOWN, TOKEN_HEADER, box_headers, write_pair

READ_TIMEOUT_S = 3
SLOW_CLIENTS = 1000
FETCHES = 20
# "Quickly" on a shared, loaded two-core machine; without the fix each fetch waited forever.
FETCH_LIMIT_S = 2.0
DROP_DEADLINE_S = READ_TIMEOUT_S + 12.0


def start(tmp_path: Path, tls: tuple[Path, Path, Path] | None = None) -> LlmaoServer:
    config, models = write_pair(tmp_path / "fleet")
    return start_llmao_server(Path(config), Path(models), tmp_path, tls=tls,
                              options=["--read-timeout", str(READ_TIMEOUT_S),
                                       "--state", str(tmp_path / "state.sqlite3")])


@pytest.fixture(params=["http", "https"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LlmaoServer]:
    tls = None
    if request.param == "https":
        made = make_server_tls(tmp_path / "tls", ["127.0.0.1"])
        tls = (made.ca_file, made.certfile, made.keyfile)
    with start(tmp_path, tls) as running:
        yield running


def port_of(server: LlmaoServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def timed_fetch(server: LlmaoServer) -> tuple[int, float]:
    """One keyed GET /vllm/config on a fresh connection, as a booting box makes it."""
    started = time.monotonic()
    if server.context is None:
        connection = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=10)
    else:
        connection = http.client.HTTPSConnection("127.0.0.1", port_of(server), timeout=10,
                                                 context=server.context)
    try:
        connection.request("GET", "/vllm/config", headers=box_headers(host=KNOWN))
        answer = connection.getresponse()
        answer.read()
        return answer.status, time.monotonic() - started
    finally:
        connection.close()


def test_a_keyed_fetch_answers_quickly_while_1000_slow_clients_hold_connections(
        server: LlmaoServer) -> None:
    with slow_clients("127.0.0.1", port_of(server), SLOW_CLIENTS) as clients:
        held = clients.still_open()
        fetches = [timed_fetch(server) for _ in range(FETCHES)]
        assert {status for status, _ in fetches} == {200}
        slowest = max(seconds for _, seconds in fetches)
        assert slowest < FETCH_LIMIT_S, f"a fetch took {slowest:.2f} s"
        if server.context is None:
            # Over plain HTTP every slow client really is held open meanwhile (over TLS
            # the trickled plaintext fails the handshake at once, as it should).
            assert held == SLOW_CLIENTS

        deadline = time.monotonic() + DROP_DEADLINE_S
        while clients.still_open() and time.monotonic() < deadline:
            time.sleep(0.25)
        assert clients.still_open() == 0, "the read time limit did not drop every slow client"
    assert timed_fetch(server)[0] == 200
    log = server.log()
    assert "Traceback" not in log
    assert "[ERROR]" not in log and "[WARNING]" not in log


def test_clients_pipelining_as_fast_as_they_can_do_not_starve_a_box(tmp_path: Path) -> None:
    """Each worker serves its connections in turn: a flood of pipelined requests without
    the key on a few connections (always ready to read) does not hold a worker."""
    with start(tmp_path) as server, pipelining_clients("127.0.0.1", port_of(server), 4):
        time.sleep(0.5)  # the flood is running
        fetches = [timed_fetch(server) for _ in range(FETCHES)]
    assert {status for status, _ in fetches} == {200}
    slowest = max(seconds for _, seconds in fetches)
    assert slowest < FETCH_LIMIT_S, f"a fetch took {slowest:.2f} s"


def box_token_headers(server: LlmaoServer) -> dict[str, str]:
    """The box's headers with the box token its first fetch was handed (its name bound)."""
    with urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port_of(server)}/vllm/config", headers=box_headers()),
            timeout=10) as answer:
        return {**box_headers(), TOKEN_HEADER: answer.headers[TOKEN_HEADER]}


def test_a_trickled_body_is_cut_off_at_the_read_limit(tmp_path: Path) -> None:
    """Headers in time, then a body a byte at a time: the request is abandoned, quietly."""
    with (start(tmp_path) as server,
          socket.create_connection(("127.0.0.1", port_of(server)), timeout=5) as sock):
        headers = box_token_headers(server)  # a bound box's post: its body is read
        head = ("POST /vllm/applied HTTP/1.1\r\nHost: llmao\r\nContent-Type: application/json\r\n"
                "Content-Length: 1000\r\n"
                + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
                + "\r\n")
        sock.sendall(head.encode())
        started = time.monotonic()
        while is_open(sock) and time.monotonic() - started < DROP_DEADLINE_S:
            try:
                sock.send(b" ")
            except OSError:
                break
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        assert not is_open(sock)
        assert READ_TIMEOUT_S - 1 <= elapsed < DROP_DEADLINE_S
        assert "Traceback" not in server.log()


def test_the_read_timeout_must_be_a_positive_whole_number(tmp_path: Path) -> None:
    config, models = write_pair(tmp_path / "fleet")
    with pytest.raises(RuntimeError, match="--read-timeout must be at least 1 second"):
        start_llmao_server(Path(config), Path(models), tmp_path,
                           options=["--read-timeout", "0"])
