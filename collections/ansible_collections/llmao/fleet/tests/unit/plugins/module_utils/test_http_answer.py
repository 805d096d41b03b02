"""The probe's HTTP/1.1 answer reader: fed bytes as they arrive, bounded in every part."""

from __future__ import annotations

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.http_answer import (
    MAX_HEADERS,
    MAX_LINE_BYTES,
    Answer,
    BadAnswer,
    BadStatusLine,
    RemoteDisconnected,
    TooLarge,
)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"


def fed(data: bytes, limit: int = 1 << 20, step: int = 0) -> tuple[Answer, bytes]:
    """The answer read from ``data``, given whole or ``step`` bytes at a time; what was left."""
    answer, rest = Answer(limit), b""
    pieces = [data] if not step else [data[at:at + step] for at in range(0, len(data), step)]
    for piece in pieces:
        rest = answer.feed(piece)
        if answer.done:
            break
    return answer, rest


@pytest.mark.parametrize("step", [0, 1, 3])
def test_an_answer_with_a_length_is_read_whatever_the_pieces(step):
    answer, rest = fed(OK, step=step)
    assert (answer.done, answer.status, bytes(answer.body), answer.reusable) == \
        (True, 200, b"hello", True)
    assert rest == b""


def test_what_follows_an_answer_is_handed_back_for_the_next_one():
    answer, rest = fed(OK + b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
    assert bytes(answer.body) == b"hello"
    second, left = fed(rest)
    assert (second.done, second.status, left) == (True, 401, b"")


@pytest.mark.parametrize("step", [0, 2])
def test_a_chunked_answer_is_read_with_its_trailers(step):
    data = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: y\r\n\r\n")
    answer = fed(data, step=step)[0]
    assert (answer.done, bytes(answer.body), answer.reusable) == (True, b"abcde", True)


def test_an_interim_answer_is_skipped():
    answer = fed(b"HTTP/1.1 100 Continue\r\n\r\n" + OK)[0]
    assert (answer.status, bytes(answer.body)) == (200, b"hello")


def test_a_body_to_the_close_ends_with_it_and_the_connection():
    answer = Answer(100)
    assert answer.feed(b"HTTP/1.1 200 OK\r\n\r\npartial") == b"" and not answer.done
    answer.feed_eof()
    assert (answer.done, bytes(answer.body), answer.reusable) == (True, b"partial", False)


@pytest.mark.parametrize("data, reusable", [
    (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.1 204 No Content\r\n\r\n", True),
])
def test_whether_the_connection_may_carry_another_answer(data, reusable):
    answer = fed(data)[0]
    assert answer.done and answer.reusable is reusable


def test_a_length_over_the_cap_is_refused_before_the_body():
    answer = Answer(10)
    with pytest.raises(TooLarge):
        answer.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")


@pytest.mark.parametrize("data", [
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\nghijkl\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n",
    b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 11,
])
def test_a_body_without_an_honest_length_is_cut_at_the_cap(data):
    with pytest.raises(TooLarge):
        fed(data, limit=10)


@pytest.mark.parametrize("data, fault", [
    (b"\x1b[31m<script>" + b"A" * 65536 + b"\r\n", BadStatusLine),
    (b"SSH-2.0-OpenSSH_9.6\r\n", BadStatusLine),
    (b"HTTP/1.1 2000 OK\r\n", BadStatusLine),
    (b"HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n", BadAnswer),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", BadAnswer),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", BadAnswer),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", BadAnswer),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", BadAnswer),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", BadAnswer),
    (b"HTTP/1.1 200 OK\r\n" + b"X-Many: y\r\n" * (MAX_HEADERS + 1), BadAnswer),
    (b"HTTP/1.1 200 OK\r\nX-Long: " + b"y" * MAX_LINE_BYTES, BadAnswer),
])
def test_what_is_not_http_raises_a_fault_that_does_not_quote_the_box(data, fault):
    with pytest.raises(fault) as raised:
        fed(data)
    assert len(str(raised.value)) < 60 and "script" not in str(raised.value)


@pytest.mark.parametrize("data", [b"", b"HTTP/1.1 200 OK\r\n", OK[:-2]])
def test_a_close_before_the_end_is_a_fault(data):
    answer = Answer(100)
    answer.feed(data)
    with pytest.raises(RemoteDisconnected):
        answer.feed_eof()
