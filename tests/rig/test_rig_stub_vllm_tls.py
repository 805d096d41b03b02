"""The vLLM stub serves HTTPS with --ssl-keyfile/--ssl-certfile and, with
--enable-ssl-refresh, takes a renewed certificate for new connections while a stream that
began before the renewal runs to its end."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time

import pytest
from cryptography import x509

from tests.rig.test_rig_stub_vllm import read_answers
from tests.tls_files import make_test_ca

KEY = "sk-vllm-test-bearer-0123456789"


def serial_seen(port: int, ca) -> int:
    context = ssl.create_default_context(cafile=str(ca.cert))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("GET", "/health")
        assert connection.getresponse().status == 200
        der = connection.sock.getpeercert(binary_form=True)
    finally:
        connection.close()
    return x509.load_der_x509_certificate(der).serial_number


@pytest.fixture
def tls_stub(local_stub_factory, tmp_path):
    ca = make_test_ca(tmp_path / "ca")
    key, cert = ca.leaf(tmp_path / "box", "127.0.0.1")
    stub = local_stub_factory(served_name="m", model="org/weights", api_key=KEY,
                              args=["--ssl-keyfile", str(key), "--ssl-certfile", str(cert),
                                    "--enable-ssl-refresh"],
                              behaviour={"*": {"token_delay_s": 0.1}})
    return stub, ca, tmp_path / "box"


def test_https_verifies_against_the_fleet_ca_and_plain_http_gets_nothing(tls_stub, tmp_path):
    stub, ca, _ = tls_stub
    assert serial_seen(stub.port, ca) > 0
    other = make_test_ca(tmp_path / "other")
    with pytest.raises(ssl.SSLCertVerificationError):
        serial_seen(stub.port, other)
    plain = http.client.HTTPConnection("127.0.0.1", stub.port, timeout=5)
    with pytest.raises((http.client.HTTPException, OSError)):
        plain.request("GET", "/health")
        plain.getresponse()
    plain.close()


def test_a_renewal_reaches_new_connections_and_drops_no_stream(tls_stub):
    stub, ca, folder = tls_stub
    before = serial_seen(stub.port, ca)
    context = ssl.create_default_context(cafile=str(ca.cert))
    stream = http.client.HTTPSConnection("127.0.0.1", stub.port, context=context, timeout=30)
    body = {"model": "m", "stream": True, "min_tokens": 30, "max_tokens": 30,
            "messages": [{"role": "user", "content": "count"}]}
    stream.request("POST", "/v1/chat/completions", json.dumps(body),
                   {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    answer = stream.getresponse()
    assert answer.status == 200
    ca.leaf(folder, "127.0.0.1")
    deadline = time.monotonic() + 10
    while serial_seen(stub.port, ca) == before:
        assert time.monotonic() < deadline, "the renewed certificate was never served"
        time.sleep(0.2)
    text = answer.read().decode()
    stream.close()
    assert text.rstrip().endswith("data: [DONE]")


def test_round_trip_delays_the_handshake_and_answers_a_pipelined_flight_together(
        local_stub_factory, tmp_path):
    """round_trip_s under TLS: the box's first handshake flight comes a round trip after the
    ClientHello, and requests pipelined once the handshake is done come back one round trip
    later: two round trips in all, where a slow box (answer_delay_s) would take four."""
    ca = make_test_ca(tmp_path / "ca")
    key, cert = ca.leaf(tmp_path / "box", "127.0.0.1")
    stub = local_stub_factory(served_name="m", model="m", api_key=KEY,
                              args=["--ssl-keyfile", str(key), "--ssl-certfile", str(cert)],
                              behaviour={"*": {"round_trip_s": 0.4}})
    context = ssl.create_default_context(cafile=str(ca.cert))
    request = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{stub.port}\r\n\r\n".encode()
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", stub.port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        shaken = time.monotonic() - started
        sock.sendall(request * 3)
        seen = read_answers(sock, 3)
    answered = time.monotonic() - started - shaken
    assert seen.count(b"HTTP/1.1 200 OK") == 3
    assert shaken >= 0.4
    assert 0.4 <= answered < 0.8


def handshake_fails(port: int, ca) -> bool:
    try:
        serial_seen(port, ca)
    except (ssl.SSLError, OSError):
        return True
    return False


def test_a_certificate_that_does_not_fit_the_key_fails_handshakes_until_a_pair_fits(
        tls_stub, tmp_path):
    """As the real vLLM 0.32 (tests/integration/test_real_vllm_fleet.py): its refresh loads the
    files into the live context, so a certificate without its key leaves no usable pair."""
    stub, ca, folder = tls_stub
    before = serial_seen(stub.port, ca)
    key, cert = ca.leaf(tmp_path / "next", "127.0.0.1")
    (folder / "cert.pem").write_bytes(cert.read_bytes())
    deadline = time.monotonic() + 10
    while not handshake_fails(stub.port, ca):
        assert time.monotonic() < deadline, "the stub kept serving a pair that no longer is"
        time.sleep(0.2)
    (folder / "key.pem").write_bytes(key.read_bytes())
    deadline = time.monotonic() + 10
    while handshake_fails(stub.port, ca):
        assert time.monotonic() < deadline, "the fitting pair was never served"
        time.sleep(0.2)
    assert serial_seen(stub.port, ca) not in (before, 0)
