"""Box-name normalisation and the header / X-Forwarded-For / peer precedence."""

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import (
    claimed_box_name,
    is_ip_address,
    normalize_host,
)


class Headers(dict):
    """A case-insensitive header map, as WSGI servers and http.client give one."""

    def __init__(self, **items):
        super().__init__({k.lower().replace("_", "-"): v for k, v in items.items()})

    def get(self, key, default=None):
        return super().get(key.lower(), default)


@pytest.mark.parametrize(("raw", "normal"), [
    ("203.0.113.10", "203.0.113.10"),
    ("  203.0.113.10\n", "203.0.113.10"),
    ("::ffff:203.0.113.10", "203.0.113.10"),
    ("::FFFF:203.0.113.10", "203.0.113.10"),
    ("2001:db8::1", "2001:db8::1"),
    ("abcd1234pod", "abcd1234pod"),
    ("", ""),
])
def test_normalize(raw, normal):
    assert normalize_host(raw) == normal


@pytest.mark.parametrize(("headers", "peer", "expected"), [
    (Headers(x_llmao_host="203.0.113.10"), "10.0.0.1", ("203.0.113.10", "header")),
    (Headers(x_llmao_host=" ::ffff:203.0.113.10 "), None, ("203.0.113.10", "header")),
    # Present but empty is still the only key: no fallback to the peer.
    (Headers(x_llmao_host=""), "203.0.113.10", ("", "header")),
    (Headers(x_llmao_host="nope", x_forwarded_for="203.0.113.10"), "203.0.113.10",
     ("nope", "header")),
    (Headers(x_forwarded_for="203.0.113.10, 10.0.0.2, 10.0.0.3"), "10.0.0.9",
     ("203.0.113.10", "forwarded")),
    (Headers(x_forwarded_for=" ::ffff:198.51.100.7 "), "10.0.0.9", ("198.51.100.7", "forwarded")),
    (Headers(x_forwarded_for=""), "::ffff:203.0.113.10", ("203.0.113.10", "peer")),
    (Headers(x_forwarded_for=" , 10.0.0.2"), "203.0.113.10", ("203.0.113.10", "peer")),
    (Headers(), "::ffff:203.0.113.10", ("203.0.113.10", "peer")),
    (Headers(), None, ("", "peer")),
])
def test_claimed_box_name(headers, peer, expected):
    assert claimed_box_name(headers, peer) == expected


@pytest.mark.parametrize(("name", "address"), [
    ("203.0.113.10", True), ("2001:db8::1", True), ("::1", True), ("127.0.0.1", True),
    ("abcd1234pod", False), ("localhost", False), ("box.example", False), ("", False),
    ("203.0.113.256", False), ("203.0.113.10 ", False), ("١٢٧.0.0.1", False),
])
def test_is_ip_address(name, address):
    """The one address check the inventory, the listings and the fleet CA share."""
    assert is_ip_address(name) is address
