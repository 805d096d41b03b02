"""The bearer derivation against the shared vectors every implementation must match."""

import json
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.bearer import (
    BearerError,
    derive_vllm_api_key,
    is_placeholder,
)

VECTORS = json.loads((Path(__file__).parent / "data" / "bearer_vectors.json").read_text())


@pytest.mark.parametrize("vector", VECTORS["vectors"],
                         ids=lambda v: f"{v['host']}:{v['listen_port']}")
def test_vector(vector):
    assert derive_vllm_api_key(vector["salt"], vector["host"], vector["listen_port"]) == \
        vector["api_key"]


@pytest.mark.parametrize("vector", VECTORS["errors"], ids=lambda v: v["error"])
def test_error_vector(vector):
    with pytest.raises(BearerError, match=vector["error"]):
        derive_vllm_api_key(vector["salt"], vector["host"], vector["listen_port"])


@pytest.mark.parametrize("port", [True, -1, 1.5, None])
def test_port_must_be_positive_int(port):
    with pytest.raises(BearerError, match="positive int"):
        derive_vllm_api_key("salt", "203.0.113.10", port)


def test_whitespace_host_is_empty():
    with pytest.raises(BearerError, match="host is empty"):
        derive_vllm_api_key("salt", "   ", 8001)


def test_error_never_quotes_the_salt():
    with pytest.raises(BearerError) as caught:
        derive_vllm_api_key("CHANGE_ME_but_secretish", "203.0.113.10", 8001)
    assert "secretish" not in str(caught.value)


@pytest.mark.parametrize(("secret", "placeholder"), [
    (None, True), ("", True), ("CHANGE_ME", True), ("CHANGE_ME_FLEET_KEY", True),
    ("real-secret", False), ("change_me", False),
])
def test_placeholder(secret, placeholder):
    assert is_placeholder(secret) is placeholder
