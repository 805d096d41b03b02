"""``POST /vllm/cert``: a box's certificate request, signed by the fleet CA (docs/box-tls.md).

The box made its key and keeps it; it sends a request (``{"csr": PEM}``) with the
fleet key and its box token, like every box call. The leaf names the addresses
llmao attributes to the box and nothing else: its name when the name is an IP
address or a DNS name, else the address the last reconcile pass had from a
provider listing. Whoever holds the fleet key cannot get a certificate for
another box's address, a weak key, nor more than a few certificates an hour.
"""

from __future__ import annotations

import ipaddress
import json
import re
import time
from collections.abc import Mapping
from typing import Any, NoReturn

from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import is_ip_address

from ..api_errors import RequestRefused
from ..audit import audit
from ..state import ServerState, StateView
from ..store.base import IssuedLeaf, StoreError
from ..tls.fleet_ca import CsrRefused, read_csr, requested_names

# A P-256 or RSA-4096 request in PEM is 0.5 to 2 KiB; anything much larger is not a request.
CERT_REQUEST_MAX_BYTES = 8 * 1024
# Requests per box in an hour: a box renews once in two thirds of a leaf's life (days), so
# a few cover restarts and a lost answer; more is a loop or an abuse.
CERT_REQUESTS_PER_HOUR = 6
CERT_WINDOW_S = 3600.0
# Counted in the store's attempt table, shared by every worker and instance.
SCOPE_PREFIX = "cert:"
CONTROLLER_SCOPE = "controller:"
# A DNS name: dot-separated labels of letters, digits and hyphens, the last not all digits.
DNS_NAME_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+"
                         r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


class ListedAddresses(StateView):
    """Box → the public addresses the last stored pass dialled it at, kept per worker and
    per app until another pass is stored (one cheap read says which is stored), as
    :class:`.turns.AskViews` keeps its Healthy servers: a request, refused or not, never
    decodes the whole pass."""

    def __init__(self, state: ServerState):
        super().__init__(state)
        self._kept: tuple[tuple[float, float], dict[str, list[str]]] | None = None

    def of_box(self, box: str) -> list[str]:
        stamp = self.state.store.pass_stamp()
        if stamp is None:
            return []
        if self._kept is None or self._kept[0] != stamp:
            last = self.state.store.last_pass()
            kept = stamp if last is None else (last.pass_at, last.recorded_at)
            self._kept = (kept, listed_hosts(last.verdicts.values() if last else ()))
        return self._kept[1].get(box, [])


def listed_hosts(verdicts: Any) -> dict[str, list[str]]:
    """Box → the sorted hosts of the verdicts' public addresses that are IPs or DNS names."""
    listed: dict[str, set[str]] = {}
    for verdict in verdicts:
        if isinstance(verdict, Mapping) and isinstance(verdict.get("box"), str) \
                and isinstance(verdict.get("public"), str):
            # "host:port", or "[v6]:port" for an IPv6 address
            host = verdict["public"].rpartition(":")[0].removeprefix("[").removesuffix("]")
            if is_ip_address(host):
                listed.setdefault(verdict["box"], set()).add(str(ipaddress.ip_address(host)))
            elif DNS_NAME_RE.match(host):
                listed.setdefault(verdict["box"], set()).add(host)
    return {box: sorted(hosts) for box, hosts in listed.items()}


def box_addresses(state: ServerState, box: str) -> list[str]:
    """The addresses a certificate for ``box`` may name: its own name when that is an
    IP address or a DNS name, else the public address the last pass dialled it at."""
    if is_ip_address(box):
        return [str(ipaddress.ip_address(box))]
    if DNS_NAME_RE.match(box):
        return [box]
    return ListedAddresses.of(state).of_box(box)


def take_request(state: ServerState, box: str, peer: str | None, who: str = "") -> None:
    """Count one signature for ``box``: 429 beyond the hourly limit. Only a request that
    would be signed counts, so a box waiting for its first listing (409) keeps its budget.
    The controller's requests for a box (``who`` set) draw on a budget of their own, so
    nothing a box does can keep the push path from a certificate."""
    scope = SCOPE_PREFIX + (CONTROLLER_SCOPE if who else "") + box
    try:
        count, since = state.store.claim_attempt(scope, time.time(), CERT_WINDOW_S)
    except StoreError as exc:
        raise RequestRefused(503, "store_unavailable", f"the state store cannot count "
                                                       f"certificate requests now: {exc}") from None
    if count > CERT_REQUESTS_PER_HOUR:
        wait_s = max(1, round(since + CERT_WINDOW_S - time.time()))
        audit(state.redact, "box_cert", "refused", who or f"box {box}", peer,
              **about(box, who), why=f"{count} requests in the hour")
        raise RequestRefused(429, "cert_rate_limited",
                             f"more than {CERT_REQUESTS_PER_HOUR} certificate requests from "
                             f"{box} in an hour; try again in {max(1, round(wait_s / 60))} min",
                             {"Retry-After": str(wait_s)})


def issue_certificate(state: ServerState, box: str, peer: str | None, body: Any,
                      who: str = "") -> bytes:
    """Sign the request in ``body`` for ``box``; the JSON answer, or :class:`RequestRefused`.
    ``who`` names the caller in the audit line when it is not the box itself (the push path's
    controller, ``POST /admin/api/boxes/<name>/cert``); the rules are the same."""
    tls = state.fleet.settings.box_tls
    if tls is None:
        raise RequestRefused(404, "box_tls_off", "this fleet has no box_tls section: boxes "
                                                 "serve plain HTTP and need no certificate")
    if not isinstance(body, dict) or not isinstance(body.get("csr"), str) or len(body) != 1:
        raise RequestRefused(400, "bad_cert_request",
                             'send {"csr": "<PEM certificate request>"} and nothing else')
    try:
        csr = read_csr(body["csr"])
        asked = requested_names(csr)
    except CsrRefused as exc:
        refuse(state, box, peer, 400, "bad_csr", str(exc), who)
    addresses = box_addresses(state, box)
    if not addresses:
        refuse(state, box, peer, 409, "no_address_yet",
               f"llmao knows no address of {box} yet (its name is not an IP address or DNS "
               "name, and no provider listing has given one); ask again after the next "
               "reconcile pass", who)
    foreign = sorted(asked - set(addresses) - {box.lower()})
    if foreign:
        refuse(state, box, peer, 403, "address_not_attributed",
               f"{', '.join(foreign)} is not an address llmao attributes to {box} (it would "
               f"sign for: {', '.join(addresses)})", who)
    take_request(state, box, peer, who)
    issued = state.ca_signer().sign(csr, addresses, tls.leaf_days)
    try:  # unrecorded, a leaf could not be refused after a release: it is not handed out
        state.store.record_leaf(IssuedLeaf(str(issued.serial), box,
                                           issued.not_after.timestamp(), time.time(), bool(who)))
    except StoreError as exc:
        raise RequestRefused(503, "store_unavailable", f"the state store cannot record "
                                                       f"the certificate now: {exc}") from None
    not_after = issued.not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
    audit(state.redact, "box_cert", "issued", who or f"box {box}", peer, **about(box, who),
          names=",".join(addresses), not_after=not_after)
    return json.dumps({"certificate": issued.pem, "ca": tls.ca_pem,
                       "not_after": not_after}).encode("utf-8")


def refuse(state: ServerState, box: str, peer: str | None, status: int, code: str,
           message: str, who: str = "") -> NoReturn:
    """Audit and raise one refusal: nothing is signed."""
    audit(state.redact, "box_cert", "refused", who or f"box {box}", peer, **about(box, who),
          why=code)
    raise RequestRefused(status, code, message)


def about(box: str, who: str) -> dict[str, str]:
    """The audit line's ``box`` when someone other than the box asked for its certificate."""
    return {"box": box} if who else {}
