"""llmao's 429 with ``Retry-After`` is waited out on every box call, within
LLMAO_RETRY_AFTER_MAX_S in all, and every retry of a call is one bounded loop."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from .conftest import point_box_at
from .follow_llmao import turn
from .helpers import FakeLlmao, Seen, payload, server_entry
from .test_box_tls import OPENSSL, with_tls

CONFIG, APPLIED, TURN, CERT = "/vllm/config", "/vllm/applied", "/vllm/turn", "/vllm/cert"
LIMITED = {"error": {"message": "slow down", "type": "rate_limit_error",
                     "code": "cert_rate_limited"}}


class LimitingLlmao(FakeLlmao):
    """Scripted answers, with ``Retry-After: <retry_after>`` on every 429."""

    retry_after = "1"

    def answer(self, request: Seen) -> tuple[int, bytes, dict[str, str]]:
        status, body = self.next_answer(request.path)
        return status, body, {"Retry-After": self.retry_after} if status == 429 else {}


@pytest.fixture
def limiting(box, monkeypatch) -> Iterator[LimitingLlmao]:
    with LimitingLlmao().serve() as fake:
        point_box_at(fake, monkeypatch)
        yield fake


def test_a_429_on_the_fetch_is_waited_out_and_said_in_one_line(limiting, box, run_main):
    limiting.script(CONFIG, (429, LIMITED), (200, payload(server_entry(0))))
    limiting.script(APPLIED, (200, {}))
    started = time.monotonic()
    outcome = run_main()
    assert outcome.rc == 0, outcome.err
    assert time.monotonic() - started >= 1
    assert len(limiting.requests_to(CONFIG)) == 2
    waits = [line for line in outcome.out.splitlines() if "asks this box to wait" in line]
    assert waits == [f"GET {limiting.url}{CONFIG}: llmao asks this box to wait (429 "
                     "cert_rate_limited): waiting 1 s as its Retry-After says"]


def test_a_wait_beyond_what_is_left_ends_at_once_with_exit_3(limiting, box, run_main,
                                                            monkeypatch):
    monkeypatch.setenv("LLMAO_RETRY_AFTER_MAX_S", "120")
    limiting.retry_after = "3600"
    limiting.script(CONFIG, (429, LIMITED))
    outcome = run_main()
    assert outcome.rc == 3
    assert "llmao asks this box to wait 3600 s (429 cert_rate_limited), more than the 120 s " \
           "left of LLMAO_RETRY_AFTER_MAX_S=120" in outcome.err
    assert len(limiting.seen) == 1 and box.snapshot() == {}


def test_the_report_waits_too(limiting, box, run_main):
    limiting.script(CONFIG, (200, payload(server_entry(0))))
    limiting.script(APPLIED, (429, LIMITED), (200, {}))
    outcome = run_main()
    assert outcome.rc == 0, outcome.err
    assert "reported revision rev-0001 to llmao" in outcome.out
    assert len(limiting.requests_to(APPLIED)) == 2


def test_a_turn_asked_too_often_waits_as_told(limiting, box, install_set):
    limiting.script(TURN, (429, LIMITED), (200, turn(True, "drained", True)))
    settings = install_set.read_settings(os.environ, fetching=True)
    said: list[str] = []
    answer = install_set.ask_turn(settings, said.append, "rev-2", ["model-0"])
    assert answer.apply and len(limiting.requests_to(TURN)) == 2
    assert len(said) == 1 and "waiting 1 s" in said[0]


def rate_limited_forever(install_set, retry_after: str, **options):
    """with_retries against a llmao that answers 429 forever: the waits and the calls made."""
    slept: list[float] = []
    calls = []

    def send():
        calls.append(1)
        heard["Retry-After"] = retry_after
        return 429, json.dumps(LIMITED).encode()

    heard: dict[str, str] = {}
    with pytest.raises(install_set.Unreachable) as ended:
        install_set.with_retries(send, what="GET x", say=lambda _: None, sleep=slept.append,
                                 heard=heard, **{"attempts": 3, "backoff_s": 2, **options})
    return slept, len(calls), str(ended.value)


def test_the_waits_of_one_call_stay_within_the_budget(install_set):
    slept, calls, why = rate_limited_forever(install_set, "300", rate_wait_s=900)
    assert slept == [300, 300, 300] and calls == 4
    assert "more than the 0 s left of LLMAO_RETRY_AFTER_MAX_S=900" in why
    slept, calls, _ = rate_limited_forever(install_set, "0", rate_wait_s=5)
    assert slept == [1] * 5 and calls == 6, "a zero wait is a second: the loop stays bounded"


@pytest.mark.parametrize("value", ["1.5", "-1", "+5", "", "1 2", "0x10", "٣",
                                   "Wed, 21 Oct 2015 07:28:00 GMT", "9" * 11])
def test_a_retry_after_that_is_not_whole_seconds_is_not_waited_for(install_set, value):
    """No wait is taken from it: the 429 is retried as a failure, ``attempts`` times."""
    assert install_set.retry_after({"Retry-After": value}) is None
    slept, calls, why = rate_limited_forever(install_set, value, rate_wait_s=900)
    assert slept == [2, 4] and calls == 3
    assert "still HTTP 429: slow down after 3 attempts" in why


def test_the_certificate_request_is_one_bounded_loop(limiting, box, run_main, monkeypatch):
    """llmao's "not yet" (409) and its failures (5xx) share one count of attempts: before,
    each 409 started the retries of 5xx again, attempts x attempts calls in all."""
    os.symlink(OPENSSL, box.bin / "openssl")
    monkeypatch.setenv("LLMAO_FETCH_ATTEMPTS", "4")
    limiting.script(CONFIG, (200, with_tls({"ca_sha256": "ab" * 32, "leaf_days": 3})))
    not_yet = {"error": {"message": "llmao knows no address of this box yet"}}
    limiting.script(CERT, *[(500, b"oops"), (409, not_yet)] * 8)
    outcome = run_main()
    assert outcome.rc == 3
    assert len(limiting.requests_to(CERT)) == 4
    assert "still HTTP 409: llmao knows no address of this box yet after 4 attempts" \
        in outcome.err
    assert outcome.out.count("asking again in") + outcome.out.count("retrying in") == 3
