# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Box names: how a name is normalised, and how a request says which box it is.

A box name is a ``fleet.hosts`` key: an address (IPv4, IPv6) or a provider id
such as a RunPod pod id. The same normalisation runs when the config is loaded,
when a request is resolved and when a bearer is derived, so the three always
agree on what a name is.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from .box_protocol import HOST_HEADER

MAPPED_IPV4_PREFIX = "::ffff:"
FORWARDED_HEADER = "X-Forwarded-For"


def normalize_host(name: str) -> str:
    """Strip whitespace and drop a leading ``::ffff:`` (an IPv4 peer seen on a v6 socket)."""
    name = name.strip()
    if name[: len(MAPPED_IPV4_PREFIX)].lower() == MAPPED_IPV4_PREFIX:
        name = name[len(MAPPED_IPV4_PREFIX):]
    return name


def is_ip_address(name: str) -> bool:
    """Whether ``name`` is an IPv4 or IPv6 address (a box dialled where it is named), not a
    provider id or a DNS name: the one check the inventory, the listings and the fleet CA
    share."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def claimed_box_name(headers: Mapping[str, str], peer: str | None) -> tuple[str, str]:
    """The box a request speaks for, and where the name came from.

    ``X-LLMAO-Host`` wins whenever it is present, even empty: a box that names
    itself must never be served another box's assignment by a fallback. Without
    it, the leftmost ``X-Forwarded-For`` entry (the client as the first proxy saw
    it), else the TCP peer. ``headers`` must look names up case-insensitively,
    as WSGI and http.client header maps do.
    """
    claimed = headers.get(HOST_HEADER)
    if claimed is not None:
        return normalize_host(claimed), "header"
    forwarded = headers.get(FORWARDED_HEADER)
    if forwarded:
        leftmost = forwarded.split(",", 1)[0]
        if leftmost.strip():
            return normalize_host(leftmost), "forwarded"
    return normalize_host(peer or ""), "peer"
