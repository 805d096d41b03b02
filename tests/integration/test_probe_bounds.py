"""The probe under box TLS against boxes that speak no TLS, on real loopback sockets
(docs/box-tls.md, "No downgrade"; docs/metrics.md): it falls back to plain HTTP only on a
positive sign, the box answering the hello in HTTP, never on an EOF or a reset after the hello
(what a network that drops hellos causes), and only for a box allowed to (``plain_allowed``);
and whatever the box does with the hello or the plain requests after it, one probe ends within
its documented bound, ``2 x (connect_timeout + timeout)``."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.box_tls import box_context
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Models, Probe
from ansible_collections.llmao.fleet.plugins.module_utils.listings import Endpoint
from ansible_collections.llmao.fleet.plugins.module_utils.probe import Target, probe_one
from rig.hostile_vllm import Handler, HostileVllm
from rig.loopback_server import serving
from tests.tls_files import TestCa as FleetCa
from tests.tls_files import make_test_ca

KEY = "sk-vllm-test-bearer-0123456789"
CONNECT_S, TIMEOUT_S = 0.5, 1.0
BOUND_S = 2 * (CONNECT_S + TIMEOUT_S)
# What a loaded machine may add to the bound: a scheduling delay, not a second deadline.
SLACK_S = 0.5
TLS_HANDSHAKE = b"\x16"
# What a plain HTTP server (uvicorn, http.server) answers to a ClientHello.
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class HelloBox(Handler):
    """:mod:`rig.hostile_vllm`'s box, speaking no TLS, with a way of its own (the server's
    ``hello``) of meeting a TLS ClientHello; a plain HTTP request gets the hostile box's
    answer (its ``faults``), after the server's ``late`` delay for its path, or nothing at
    all when the server's ``stall`` is set."""

    server: PlainBox

    def handle(self) -> None:
        try:
            first = self.request.recv(1, socket.MSG_PEEK)
        except OSError:
            return
        if first == TLS_HANDSHAKE:
            self.read_record()
            getattr(self, f"hello_{self.server.hello}")()
        elif first:
            self.server.asked_in_plain += 1
            if self.server.stall:
                self.server.stopping.wait()
            else:
                super().handle()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.stopping.wait(self.server.late.get(self.path, 0.0))
        super().do_GET()

    def read_record(self) -> None:
        """The whole hello record: nothing left unread, so a close is a FIN, not a reset."""
        header = self.rfile.read(5)
        if len(header) == 5:
            self.rfile.read(struct.unpack("!H", header[3:])[0])

    def hello_silent(self) -> None:
        self.server.stopping.wait()

    def hello_eof(self) -> None:
        """Closed right after the hello (a FIN): what a network that drops hellos does."""

    def hello_reset(self) -> None:
        """Reset right after the hello: the connection is closed with no linger."""
        self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.request.close()

    def hello_http(self) -> None:
        """The positive sign: a plain HTTP server's answer to bytes it cannot read."""
        self.send(BAD_REQUEST)

    def hello_trickle(self) -> None:
        """The same answer, one byte every ``drip_s``."""
        for index, _ in zip(range(len(BAD_REQUEST)), self.drips(), strict=False):
            if not self.send(BAD_REQUEST[index:index + 1]):
                return


class PlainBox(HostileVllm):
    """The server of :class:`HelloBox`: ``asked_in_plain`` counts the connections on which a
    plain HTTP request came (the bearer went out in clear on those)."""

    def __init__(self, hello: str, drip_s: float, faults: dict[str, str], stall: bool,
                 late: dict[str, float]):
        super().__init__("127.0.0.1", 0, "m", drip_s)
        self.RequestHandlerClass = HelloBox
        self.hello, self.stall, self.late, self.asked_in_plain = hello, stall, late, 0
        self.set_faults(faults)


@contextmanager
def plain_box(hello: str, drip_s: float = 0.1, faults: dict[str, str] | None = None,
              stall: bool = False, late: dict[str, float] | None = None) -> Iterator[PlainBox]:
    """A :class:`PlainBox` answering for a ``with`` block; its waits and drips end with it."""
    box = PlainBox(hello, drip_s, faults or {}, stall, late or {})
    with serving(box, poll_interval=0.1):
        try:
            yield box
        finally:
            box.stopping.set()


@pytest.fixture(scope="module")
def fleet_ca(tmp_path_factory: pytest.TempPathFactory) -> FleetCa:
    return make_test_ca(tmp_path_factory.mktemp("ca"))


def probe(box: PlainBox, ca: FleetCa, plain_allowed: bool) -> tuple[Probe, float]:
    """One probe of ``box`` over HTTPS under the fleet CA, and how long it took."""
    target = Target("k", Endpoint("127.0.0.1", box.server_address[1], "given", "https"), "m",
                    KEY, box_context(str(ca.cert)), plain_allowed)
    began = time.monotonic()
    seen = probe_one(target, CONNECT_S, TIMEOUT_S)
    return seen, time.monotonic() - began


@pytest.mark.parametrize(("hello", "said"), [("eof", "EOF"), ("reset", "reset")])
def test_an_eof_or_a_reset_after_the_hello_is_no_sign_of_plain_http(fleet_ca, hello, said):
    with plain_box(hello) as box:
        seen, _elapsed = probe(box, fleet_ca, plain_allowed=True)
    assert (seen.models, seen.plain_http, seen.health_ok) == (Models.SKIPPED, False, False)
    assert said in seen.detail, seen.detail
    assert box.asked_in_plain == 0  # the bearer never went out in clear


@pytest.mark.parametrize("plain_allowed", [True, False], ids=["allowed", "not_allowed"])
def test_a_hello_answered_in_http_is_the_sign_a_box_allowed_to_falls_back_on(fleet_ca,
                                                                            plain_allowed):
    with plain_box("http") as box:
        seen, _elapsed = probe(box, fleet_ca, plain_allowed)
    if plain_allowed:
        assert (seen.models, seen.plain_http, seen.health_ok) == (Models.LISTS, True, True)
        assert seen.metrics is not None and box.asked_in_plain >= 2
    else:
        assert (seen.models, seen.plain_http) == (Models.SKIPPED, False)
        assert box.asked_in_plain == 0


@dataclass(frozen=True)
class Way:
    """A hostile box's way through a probe: what it does with the hello, with how long
    between its bytes, and with the plain requests, should the probe fall back."""

    hello: str
    drip_s: float = 0.1
    faults: dict[str, str] = field(default_factory=dict)
    stall: bool = False
    late: dict[str, float] = field(default_factory=dict)
    # Whether a probe allowed plain HTTP falls back (the box answered the hello in HTTP in
    # time), and then finds the model listed with its figures unknown (/metrics too slow).
    falls_back: bool = False
    lists: bool = False


HOSTILE = {
    "accepts_and_says_nothing": Way("silent"),
    "trickles_a_byte_a_second": Way("trickle", 1.0, {"*": "slow_status"}),
    # The hello's answer comes before the handshake's deadline: the fallback starts late and
    # its answers trickle too, so only the probe's own deadline ends it.
    "trickles_within_the_handshake": Way("trickle", 0.2, {"*": "slow_status"},
                                          falls_back=True),
    "closes_after_the_hello": Way("eof"),
    "resets_after_the_hello": Way("reset"),
    "answers_in_http_then_stalls": Way("http", stall=True, falls_back=True),
    "answers_in_http_with_a_slow_metrics": Way("http", 0.1, {"/metrics": "drip_body"},
                                                falls_back=True, lists=True),
    # The longest way: the fallback starts late, /health answers just before its deadline,
    # and /metrics, asked then, would have until long past the probe's: the bound ends it.
    "answers_late_then_slowly": Way("trickle", 0.25, {"/metrics": "drip_body"},
                                     late={"/health": 1.2}, falls_back=True, lists=True),
}


@pytest.mark.parametrize("plain_allowed", [True, False], ids=["allowed", "not_allowed"])
@pytest.mark.parametrize("name", list(HOSTILE))
def test_every_hostile_path_ends_within_the_documented_bound(fleet_ca, name, plain_allowed):
    way = HOSTILE[name]
    with plain_box(way.hello, way.drip_s, way.faults, way.stall, way.late) as box:
        seen, elapsed = probe(box, fleet_ca, plain_allowed)
    assert elapsed <= BOUND_S + SLACK_S, f"{name}: {elapsed:.2f} s > {BOUND_S} s"
    fell_back = plain_allowed and way.falls_back
    assert seen.plain_http is fell_back and (box.asked_in_plain > 0) is fell_back
    if way.lists and fell_back:
        assert (seen.models, seen.detail) == (Models.LISTS, "figures unknown: /metrics: "
                                                            "timed out")
    else:
        assert seen.models is not Models.LISTS
