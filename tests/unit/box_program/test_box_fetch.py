"""Fetching the assignment: headers, retries, refusals, TLS, against a real local server."""

from __future__ import annotations

import pytest

from .helpers import BOX, FLEET_KEY, assert_sent_by_the_box, closed_port, payload, server_entry

CONFIG = "/vllm/config"


def test_a_fetch_sends_the_key_and_the_box_name_and_applies_the_answer(llmao, box, run_main):
    llmao.script(CONFIG, (200, payload(server_entry(0))))
    llmao.script("/vllm/applied", (200, {}))
    outcome = run_main()
    assert outcome.rc == 0, outcome.err
    (request,) = llmao.requests_to(CONFIG)
    assert_sent_by_the_box(request, "GET")
    assert box.program("model-0").exists()
    assert FLEET_KEY not in outcome.text


def test_without_llmao_host_no_header_is_sent(llmao, box, run_main, monkeypatch):
    monkeypatch.delenv("LLMAO_HOST")
    llmao.script(CONFIG, (200, payload(server_entry(0))))
    assert run_main("--dry-run").rc == 0
    (request,) = llmao.requests_to(CONFIG)
    assert "x-llmao-host" not in request.headers


@pytest.mark.parametrize("status, says", [
    (403, "FLEET_KEY does not match llmao's fleet.key"),
    (404, f"'{BOX}' is not in fleet.hosts; ask an admin to add it, or to approve it"),
    (400, "llmao refused the request (400): bad header"),
    (302, "redirect"),
])
def test_a_refusal_is_not_retried_and_says_what_to_check(llmao, box, run_main, status, says):
    llmao.script(CONFIG, (status, {"error": {"message": "bad header", "type": "x", "code": 1}}))
    outcome = run_main()
    assert outcome.rc == 2
    assert says in outcome.err
    assert len(llmao.seen) == 1, "a 4xx or a redirect must not be retried or followed"
    assert FLEET_KEY not in outcome.text
    assert not any(box.conf.iterdir())


def test_a_5xx_is_retried_until_an_answer_comes(llmao, box, run_main):
    llmao.script(CONFIG, (500, b"oops"), (502, b""), (200, payload(server_entry(0))))
    llmao.script("/vllm/applied", (200, {}))
    outcome = run_main()
    assert outcome.rc == 0, outcome.err
    assert len(llmao.requests_to(CONFIG)) == 3
    assert "HTTP 500; attempt 1 of 3" in outcome.out


def test_503_forever_ends_with_exit_3_after_the_bounded_attempts(llmao, box, run_main):
    llmao.script(CONFIG, (503, {"error": {"message": "fleet key not configured"}}))
    outcome = run_main()
    assert outcome.rc == 3
    assert len(llmao.requests_to(CONFIG)) == 3
    assert "fleet.key is probably not configured on the server" in outcome.err
    assert not any(box.conf.iterdir())


def test_connection_refused_is_retried_then_exit_3(box, run_main, monkeypatch):
    monkeypatch.setenv("LLMAO_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("FLEET_KEY", FLEET_KEY)
    outcome = run_main()
    assert outcome.rc == 3
    assert "no answer after 3 attempts" in outcome.err
    assert outcome.out.count("retrying in") == 2


def test_backoff_doubles_and_is_capped(install_set):
    slept: list[float] = []

    def refused():
        raise ConnectionRefusedError("refused")

    with pytest.raises(install_set.Unreachable):
        install_set.with_retries(refused, attempts=9, backoff_s=10, what="GET x",
                                 say=lambda _: None, sleep=slept.append)
    assert slept == [10, 20, 40, 60, 60, 60, 60, 60]


@pytest.mark.parametrize("body", [b"not json", b"", b"\xff\xfe"])
def test_an_answer_that_is_not_json_is_refused(llmao, box, run_main, body):
    llmao.script(CONFIG, (200, body))
    outcome = run_main()
    assert outcome.rc == 2
    assert "is not valid JSON" in outcome.err


def test_a_malformed_assignment_is_refused_and_nothing_written(llmao, box, run_main):
    llmao.script(CONFIG, (200, {"host": BOX, "servers": [{"name": "x"}]}))
    outcome = run_main()
    assert outcome.rc == 2
    assert "servers[0].host: must be a box name" in outcome.err
    assert not any(box.conf.iterdir()) and not box.data.exists()


def test_tls_verified_with_the_ca_given_in_ssl_cert_file(llmao_tls, local_ca, box, run_main,
                                                          monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(local_ca.ca_file))
    llmao_tls.script(CONFIG, (200, payload(server_entry(0))))
    llmao_tls.script("/vllm/applied", (200, {}))
    outcome = run_main()
    assert outcome.rc == 0, outcome.err
    assert len(llmao_tls.requests_to(CONFIG)) == 1
    assert len(llmao_tls.requests_to("/vllm/applied")) == 1


def test_tls_without_the_ca_is_refused_at_once(llmao_tls, box, run_main):
    llmao_tls.script(CONFIG, (200, payload(server_entry(0))))
    outcome = run_main()
    assert outcome.rc == 2
    assert "TLS verification failed" in outcome.err and "SSL_CERT_FILE" in outcome.err
    assert llmao_tls.seen == [], "nothing may be sent over an unverified connection"
    assert "retrying" not in outcome.out


@pytest.mark.parametrize("variable", ["LLMAO_URL", "FLEET_KEY"])
def test_fetching_needs_the_url_and_the_key(llmao, box, run_main, monkeypatch, variable):
    monkeypatch.delenv(variable)
    outcome = run_main()
    assert outcome.rc == 2
    assert f"{variable} is not set" in outcome.err
    assert llmao.seen == []


@pytest.mark.parametrize("url, says", [
    ("http://192.0.2.7:8080", "must use https"),
    ("ftp://llmao.example", "must be an https:// URL"),
    ("https://user:pw@llmao.example", "plain base URL"),
    ("llmao.example", "must be an https:// URL"),
])
def test_an_unsafe_or_odd_url_is_refused_before_any_request(box, run_main, monkeypatch, url,
                                                             says):
    monkeypatch.setenv("LLMAO_URL", url)
    monkeypatch.setenv("FLEET_KEY", FLEET_KEY)
    outcome = run_main()
    assert outcome.rc == 2
    assert says in outcome.err


@pytest.mark.parametrize("hostname, loopback", [
    ("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("localhost", True),
    ("10.0.0.1", False), ("llmao.example", False),
])
def test_loopback_detection(install_set, hostname, loopback):
    assert install_set.is_loopback(hostname) is loopback


@pytest.mark.parametrize("name, value, says", [
    ("LLMAO_FETCH_ATTEMPTS", "0", "must be from 1 to 100"),
    ("LLMAO_FETCH_ATTEMPTS", "10000000", "must be from 1 to 100"),
    ("LLMAO_FETCH_ATTEMPTS", "many", "is not a int"),
    ("LLMAO_FETCH_BACKOFF_S", "-1", "must be from 0 to 3600"),
    ("LLMAO_FETCH_BACKOFF_S", "nan", "must be from 0 to 3600"),
    ("LLMAO_FETCH_TIMEOUT_S", "1e999", "must be from 0.001 to 3600"),
    ("DATA_DIRECTORY", "relative/data", "must be an absolute path"),
    ("DATA_DIRECTORY", "/data dir", "must be an absolute path"),
    ("SUPERVISOR_CONF_DIR", "conf.d", "must be an absolute path"),
])
def test_a_bad_environment_is_refused(box, run_main, monkeypatch, name, value, says):
    monkeypatch.setenv(name, value)
    outcome = run_main("--payload", str(box.write_payload(payload(server_entry(0)))))
    assert outcome.rc == 2
    assert says in outcome.err
