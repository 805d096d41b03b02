"""A bounded, steady client load through LiteLLM's proxy, recording every request's outcome.

Why: a rolling change is only proven harmless by requests that are in flight while it happens,
plain ones and streams, some streams long enough to outlive the moment a route is deleted. The
load starts one request every ``1 / rate_per_s`` seconds in a background thread, each request
in a thread of its own (a long stream must not hold the next start back), until ``count``
requests were started or ``max_s`` seconds passed, whichever comes first. Every request ends as
an :class:`Outcome`: a plain chat fails unless it is a 200 with an answer; a stream fails when
it is refused, breaks mid-way, carries an error event, lacks ``[DONE]``, or ends with fewer
tokens than it asked for (the vLLM stub pads an answer to ``min_tokens``, so a short stream is a
cut one). The stub names the box and port in every answer, so each outcome says who answered.

    with ChatLoad(litellm.url, master_key, "stub-model", rate_per_s=2, count=200,
                  max_s=300) as load:
        ...change the fleet...
    assert not load.failures(), load.summary()
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rig import web

REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Shape:
    """One kind of request of the mix: streamed or not, padded to ``min_tokens`` words and cut
    at ``max_tokens`` (unset: the server's own limit, which for a real model may be its whole
    context, an answer far longer than any drain).

    ``words``: the server's tokens are words (the stub's), so an answer of fewer words than
    ``min_tokens`` was cut short. A real model's tokens are pieces of words, or whitespace:
    then ``min_tokens`` is only asked for, and only an answer with no text at all is short."""

    stream: bool
    min_tokens: int | None = None
    words: bool = True
    max_tokens: int | None = None

    @property
    def label(self) -> str:
        kind = "stream" if self.stream else "chat"
        return kind if self.min_tokens is None else f"{kind}/{self.min_tokens}"


# Plain and streamed, short and long: with the stub's token_delay_s at 0.05 s the long stream
# (80 tokens) runs about 4 s.
DEFAULT_MIX = (Shape(stream=False), Shape(stream=True), Shape(stream=False),
               Shape(stream=True, min_tokens=80))


@dataclass(frozen=True)
class Outcome:
    """How one request ended. Times are on the monotonic clock."""

    index: int
    shape: Shape
    started: float
    ended: float
    ok: bool
    reason: str = ""
    answered_by: str = ""

    @property
    def duration_s(self) -> float:
        return self.ended - self.started


def answer_text(received: Sequence[tuple[float, str]]) -> tuple[str, str]:
    """(the streamed text, the fault) of a stream's events; the fault is "" when it is whole."""
    if not received:
        return "", "no event at all"
    if received[-1][1] != "[DONE]":
        return "", f"ended without [DONE] after {len(received)} event(s)"
    pieces = []
    for _, data in received[:-1]:
        try:
            chunk = json.loads(data)
        except ValueError:
            return "", f"an event is not JSON: {data[:120]!r}"
        if not isinstance(chunk, dict) or "error" in chunk:
            return "", f"error event: {data[:200]}"
        for choice in chunk.get("choices") or []:
            pieces.append((choice.get("delta") or {}).get("content") or "")
    return "".join(pieces), ""


def plain_text(body: bytes) -> tuple[str, str]:
    """(the answer's text, the fault) of a whole chat completion."""
    try:
        return json.loads(body)["choices"][0]["message"]["content"] or "", ""
    except (ValueError, KeyError, IndexError, TypeError):
        return "", f"not a chat completion: {body[:200]!r}"


def who_answered(text: str) -> str:
    """``box:port`` from the stub's sentence, "" when the text is not one."""
    words = text.split()
    if len(words) >= 5 and words[:2] == ["answered", "by"] and words[3] == "port":
        return f"{words[2]}:{words[4]}"
    return ""


class ChatLoad:
    """The load, its thread and the outcomes so far (see the module's docstring)."""

    def __init__(self, url: str, key: str, model: str, *, rate_per_s: float, count: int,
                 max_s: float, mix: Sequence[Shape] = DEFAULT_MIX,
                 request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        if rate_per_s <= 0 or count < 1 or max_s <= 0 or not mix:
            raise ValueError("a load needs a positive rate, count, time bound and mix")
        self.url = f"{url.rstrip('/')}/v1/chat/completions"
        self.headers = web.authorization(key)
        self.model = model
        self.rate_per_s = rate_per_s
        self.count = count
        self.max_s = max_s
        self.mix = tuple(mix)
        self.request_timeout_s = request_timeout_s
        self._outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._requests: list[threading.Thread] = []
        self._pacer = threading.Thread(target=self._run, name="chat-load", daemon=True)

    def __enter__(self) -> ChatLoad:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        self._pacer.start()

    def stop(self) -> None:
        """Start no more requests, and wait for those in flight (each bounded by its timeout)."""
        self._stop.set()
        if self._pacer.ident is not None:
            self.join()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the load ran its course (count or time) and every request ended; True
        when it did within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._pacer.join(timeout)
        for request in list(self._requests):
            request.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self._pacer.is_alive() and not any(r.is_alive() for r in self._requests)

    def outcomes(self) -> list[Outcome]:
        with self._lock:
            return sorted(self._outcomes, key=lambda outcome: outcome.index)

    def failures(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes() if not outcome.ok]

    def in_flight(self) -> int:
        return sum(request.is_alive() for request in self._requests)

    def summary(self) -> str:
        """One paragraph: counts by shape, who answered, the slowest request, every failure."""
        outcomes = self.outcomes()
        failed = [outcome for outcome in outcomes if not outcome.ok]
        by_shape = Counter(outcome.shape.label for outcome in outcomes)
        by_server = Counter(outcome.answered_by for outcome in outcomes if outcome.ok)
        slowest = max((outcome.duration_s for outcome in outcomes), default=0.0)
        lines = [f"{len(outcomes)} request(s) ended ({self.in_flight()} in flight), "
                 f"{len(failed)} failed; by shape {dict(sorted(by_shape.items()))}; answered by "
                 f"{dict(sorted(by_server.items()))}; slowest {slowest:.1f} s"]
        lines += [f"  #{outcome.index} {outcome.shape.label} failed after "
                  f"{outcome.duration_s:.1f} s: {outcome.reason}" for outcome in failed]
        return "\n".join(lines)

    def _run(self) -> None:
        began = time.monotonic()
        for index in range(self.count):
            start_at = began + index / self.rate_per_s
            if self._stop.wait(max(0.0, start_at - time.monotonic())):
                return
            if time.monotonic() - began > self.max_s:
                return
            shape = self.mix[index % len(self.mix)]
            request = threading.Thread(target=self._one, args=(index, shape),
                                       name=f"chat-load-{index}", daemon=True)
            self._requests.append(request)
            request.start()

    def _one(self, index: int, shape: Shape) -> None:
        started = time.monotonic()
        try:
            text, fault = self._ask(shape)
        except (OSError, http.client.HTTPException) as exc:
            text, fault = "", f"{type(exc).__name__}: {exc}"
        if not fault and shape.min_tokens and shape.words and \
                len(text.split()) < shape.min_tokens:
            fault = f"cut short: {len(text.split())} of {shape.min_tokens} token(s)"
        if not fault and not text:
            fault = "an empty answer"
        outcome = Outcome(index, shape, started, time.monotonic(), not fault, fault,
                          who_answered(text))
        with self._lock:
            self._outcomes.append(outcome)

    def _ask(self, shape: Shape) -> tuple[str, str]:
        body: dict = {"model": self.model, "stream": shape.stream,
                      "messages": [{"role": "user", "content": "who answers?"}]}
        if shape.min_tokens is not None:
            body["min_tokens"] = shape.min_tokens
        if shape.max_tokens is not None:
            body["max_tokens"] = shape.max_tokens
        if shape.stream:
            status, received = web.events(self.url, headers=self.headers, body=body,
                                          timeout=self.request_timeout_s)
            if status != 200:
                return "", f"HTTP {status}: {received[-1][1][:200] if received else ''}"
            return answer_text(received)
        status, answer = web.call(self.url, headers=self.headers, body=body,
                                  timeout=self.request_timeout_s)
        if status != 200:
            return "", f"HTTP {status}: {answer[:200]!r}"
        return plain_text(answer)
