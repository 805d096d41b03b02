"""The steady chat load of the acceptance tests, against vLLM stubs on loopback: it keeps its
pace and bounds, tells whole answers from cut or refused ones, and says who answered."""

from __future__ import annotations

import json
import time

import pytest

from rig.chat_load import ChatLoad, Shape, answer_text, who_answered

KEY = "sk-vllm-chat-load-test-0123456789"
PACE_S = 0.05


def event(content: str) -> tuple[float, str]:
    return (0.0, json.dumps({"choices": [{"index": 0, "delta": {"content": content}}]}))


@pytest.mark.parametrize(
    ("received", "text", "fault"),
    [
        ([event("answered"), event(" by"), (0.0, "[DONE]")], "answered by", ""),
        ([event("answered")], "", "ended without [DONE] after 1 event(s)"),
        ([], "", "no event at all"),
        ([(0.0, '{"error": {"message": "upstream gone"}}'), (0.0, "[DONE]")], "",
         'error event: {"error": {"message": "upstream gone"}}'),
        ([(0.0, "not json"), (0.0, "[DONE]")], "", "an event is not JSON: 'not json'"),
    ],
    ids=["whole", "no-done", "empty", "error-event", "not-json"],
)
def test_a_stream_is_whole_only_with_done_and_no_error(received, text, fault):
    assert answer_text(received) == (text, fault)


def test_who_answered_reads_the_stubs_sentence():
    assert who_answered("answered by box-a port 8001 token token") == "box-a:8001"
    assert who_answered("something else entirely") == ""


@pytest.fixture
def paced(local_stub_factory):
    return local_stub_factory(served_name="m", model="org/m", api_key=KEY, box_name="box-a",
                              behaviour={"*": {"token_delay_s": PACE_S}})


def test_every_request_of_a_mixed_load_is_answered_whole(paced):
    mix = (Shape(stream=False), Shape(stream=True), Shape(stream=True, min_tokens=20))
    started = time.monotonic()
    with ChatLoad(paced.url, KEY, "m", rate_per_s=10, count=9, max_s=30, mix=mix) as load:
        assert load.join(timeout=60)
    elapsed = time.monotonic() - started
    outcomes = load.outcomes()
    assert [outcome.index for outcome in outcomes] == list(range(9)), load.summary()
    assert load.failures() == [], load.summary()
    assert {outcome.answered_by for outcome in outcomes} == {f"box-a:{paced.port}"}
    longest = max(outcome.duration_s for outcome in outcomes if outcome.shape.min_tokens)
    assert longest >= 20 * PACE_S * 0.8
    # Long streams never hold the pace back: 9 starts at 10/s overlap them.
    assert elapsed < 0.8 + 3 * longest, load.summary()
    assert "9 request(s) ended (0 in flight), 0 failed" in load.summary()


def test_a_stream_cut_mid_way_and_a_refused_connection_are_failures_with_reasons(paced):
    long = Shape(stream=True, min_tokens=200)  # 10 s of tokens
    with ChatLoad(paced.url, KEY, "m", rate_per_s=10, count=2, max_s=10, mix=(long,)) as load:
        time.sleep(1.0)
        paced.stop()
    failures = load.failures()
    assert len(failures) == 2, load.summary()
    assert all(outcome.duration_s < 5 for outcome in failures), load.summary()
    assert all(outcome.reason for outcome in failures)
    assert "2 failed" in load.summary() and "#0 stream/200 failed" in load.summary()

    refused = ChatLoad(paced.url, KEY, "m", rate_per_s=10, count=1, max_s=5)
    refused.start()
    assert refused.join(timeout=30)
    (outcome,) = refused.failures()
    assert "Connection refused" in outcome.reason


def test_a_wrong_key_is_a_failure_naming_the_status(paced):
    with ChatLoad(paced.url, "sk-wrong", "m", rate_per_s=10, count=2, max_s=5,
                  mix=(Shape(stream=False), Shape(stream=True))) as load:
        assert load.join(timeout=30)
    reasons = [outcome.reason for outcome in load.failures()]
    assert len(reasons) == 2 and all(reason.startswith("HTTP 401") for reason in reasons)


def test_the_load_stops_at_its_time_bound_or_when_stopped(paced):
    bounded = ChatLoad(paced.url, KEY, "m", rate_per_s=4, count=1000, max_s=1.0,
                       mix=(Shape(stream=False),))
    bounded.start()
    assert bounded.join(timeout=30)
    assert 4 <= len(bounded.outcomes()) <= 5, bounded.summary()

    stopped = ChatLoad(paced.url, KEY, "m", rate_per_s=4, count=1000, max_s=600,
                       mix=(Shape(stream=False),))
    stopped.start()
    time.sleep(0.6)
    began = time.monotonic()
    stopped.stop()
    assert time.monotonic() - began < 5
    assert 2 <= len(stopped.outcomes()) <= 4 and stopped.failures() == []


def test_a_load_needs_positive_bounds(paced):
    with pytest.raises(ValueError, match="positive"):
        ChatLoad(paced.url, KEY, "m", rate_per_s=0, count=1, max_s=1)
