"""One HTTP request as the demo and the tests make it, always straight to the address given.

Every address they dial is on this machine (loopback, or the bridge of our own engine), so proxy
variables from the environment are ignored: a proxy would send the request elsewhere.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any


def _opener(context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                       urllib.request.HTTPSHandler(context=context))


def call(url: str, *, headers: Mapping[str, str] | None = None, body: Any = None,
         raw: bytes | None = None, method: str | None = None,
         context: ssl.SSLContext | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    """One request (POST with a JSON body when ``body`` or ``raw`` bytes are given, unless
    ``method`` says otherwise); any HTTP answer is returned as (status, body), a network fault
    raises OSError."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=dict(headers or {}), method=method)
    if data is not None and not request.has_header("Content-type"):
        request.add_header("Content-Type", "application/json")
    try:
        with _opener(context).open(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as answer:
        with answer:
            return answer.code, answer.read()


def authorization(key: str | None = None, header: str | None = None) -> dict[str, str]:
    """The Authorization header: ``header`` as given, else ``Bearer key``, else none."""
    if header is not None:
        return {"Authorization": header}
    return {} if key is None else {"Authorization": f"Bearer {key}"}


def answers(url: str, context: ssl.SSLContext | None = None) -> bool:
    """True when url answers 200."""
    try:
        return call(url, context=context, timeout=2)[0] == 200
    except OSError:
        return False


def wait_answering(url: str, timeout: float, context: ssl.SSLContext | None = None) -> None:
    """Poll ``url`` until it answers 200 (a server coming up); TimeoutError after ``timeout``
    seconds."""
    deadline = time.monotonic() + timeout
    while not answers(url, context):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer 200 in {timeout} s")
        time.sleep(0.5)


def events(url: str, *, headers: Mapping[str, str] | None = None, body: Any = None,
           context: ssl.SSLContext | None = None,
           timeout: float = 30.0) -> tuple[int, list[tuple[float, str]]]:
    """POST ``body`` as JSON and read a server-sent event stream: (status, [(arrival time on the
    monotonic clock, data of one `data:` line)...]). Arrival times let a test see that tokens
    came one by one; an answer that is not a stream comes back as one entry, its whole body."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **dict(headers or {})})
    try:
        answer = _opener(context).open(request, timeout=timeout)
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, [(time.monotonic(), refused.read().decode())]
    received = []
    with answer:
        if not answer.headers.get("Content-Type", "").startswith("text/event-stream"):
            return answer.status, [(time.monotonic(), answer.read().decode())]
        for line in answer:
            text = line.decode().rstrip("\r\n")
            if text.startswith("data:"):
                received.append((time.monotonic(), text[len("data:"):].strip()))
    return answer.status, received
