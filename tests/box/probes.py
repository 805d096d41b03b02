"""What a box serves, asked from outside over HTTP: shared by the box tests and Molecule's verifier.

Every probe goes to a base URL on 127.0.0.1 (the port the engine published a listen port
on), the way LiteLLM and reconcile reach a box through its provider's mapping.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable

from ansible_collections.llmao.fleet.plugins.module_utils.intent import IntendedServer

WAIT_S = 40.0


def wait_for(what: str, check: Callable[[], bool], timeout: float = WAIT_S) -> None:
    """Poll ``check`` until it holds; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.5)


def get(url: str, bearer: str | None = None) -> tuple[int, bytes]:
    """One GET; any HTTP answer is (status, body), a network fault raises OSError."""
    request = urllib.request.Request(url)
    if bearer is not None:
        request.add_header("Authorization", f"Bearer {bearer}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as answer:
        return answer.code, answer.read()


def answers_health(base_url: str) -> bool:
    try:
        return get(f"{base_url}/health")[0] == 200
    except OSError:
        return False


def assert_serves(base_url: str, bearer: str, served_model_name: str) -> None:
    """``/health`` answers; ``/v1/models`` refuses no or a wrong bearer, lists the name with it."""
    wait_for(f"{base_url}/health", lambda: answers_health(base_url))
    assert get(f"{base_url}/v1/models")[0] == 401
    assert get(f"{base_url}/v1/models", bearer="sk-vllm-not-the-key")[0] == 401
    status, body = get(f"{base_url}/v1/models", bearer=bearer)
    assert status == 200
    assert [model["id"] for model in json.loads(body)["data"]] == [served_model_name]


# Every process's command line, one a line. Read back to the controller and checked there:
# grepping on the box would put the bearer on grep's own command line.
COMMAND_LINES = "for f in /proc/[0-9]*/cmdline; do tr '\\000' ' ' < $f; echo; done"


def assert_no_bearer_on_command_lines(listing: str, servers: Iterable[IntendedServer]) -> None:
    """Each server's vLLM runs (its port is on a command line) and no command line holds a
    bearer."""
    for server in servers:
        assert f"--port {server.listen_port}" in listing, f"no vLLM on {server.listen_port}"
        assert server.api_key not in listing, f"the bearer of {server.name} is on a command line"
