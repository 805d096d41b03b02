"""Fuzzed requests to the box API: never a 5xx, never a secret without the key.

Header values are latin-1 text, as a WSGI server hands them over (PEP 3333),
and go in raw through the environ, so they may hold what a client library
would refuse to send.
"""

from __future__ import annotations

import json
import re

from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.fleet_pair import FLEET_KEY, KNOWN, SECRETS, UNKNOWN

LATIN1 = st.characters(max_codepoint=255, exclude_categories=("Cs",))
HEADER = st.one_of(st.none(), st.text(LATIN1, max_size=60),
                   st.sampled_from([KNOWN, UNKNOWN, f"::ffff:{KNOWN}", "", " ", f"{KNOWN},x"]))
AUTHORIZATION = st.one_of(
    st.none(), st.text(LATIN1, max_size=60),
    st.sampled_from([f"Bearer {FLEET_KEY}", f"bearer {FLEET_KEY}", "Bearer ", "Basic x",
                     f"Bearer {FLEET_KEY[:-1]}", f"Bearer {FLEET_KEY}\x00"]))
BODY = st.one_of(
    st.binary(max_size=300),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                 lambda inner: st.lists(inner, max_size=4)
                 | st.dictionaries(st.sampled_from(["revision", "applied_at", "servers", "name",
                                                    "port", "served_model_name"]), inner,
                                   max_size=4),
                 max_leaves=12).map(lambda doc: json.dumps(doc).encode()),
)
BEARER_SHAPE = re.compile(rb"sk-vllm-[A-Za-z0-9_\-]")


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["GET", "POST", "PUT", "HEAD", "DELETE"]),
       path=st.sampled_from(["/vllm/config", "/vllm/applied", "/vllm/", "/vllm/x", "/healthz"]),
       authorization=AUTHORIZATION, host=HEADER, forwarded=HEADER,
       peer=st.sampled_from([KNOWN, UNKNOWN, f"::ffff:{KNOWN}", "127.0.0.1", ""]),
       body=BODY)
def test_no_5xx_and_no_secret_without_the_key(app: Flask, method: str, path: str,
                                              authorization: str | None, host: str | None,
                                              forwarded: str | None, peer: str,
                                              body: bytes) -> None:
    environ = {"REMOTE_ADDR": peer}
    for key, value in (("HTTP_AUTHORIZATION", authorization), ("HTTP_X_LLMAO_HOST", host),
                       ("HTTP_X_FORWARDED_FOR", forwarded)):
        if value is not None:
            environ[key] = value
    answer = app.test_client().open(path, method=method, data=body, environ_overrides=environ)
    assert answer.status_code < 500
    data = answer.get_data()
    assert not any(secret.encode() in data for secret in SECRETS)
    key_presented = (authorization or "").partition(" ")[2].strip() == FLEET_KEY
    if not key_presented:
        assert not BEARER_SHAPE.search(data)
