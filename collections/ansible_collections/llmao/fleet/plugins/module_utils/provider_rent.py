# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Renting and returning a pool's boxes: Vast's and RunPod's create and destroy calls.

Shapes are the providers' own OpenAPI documents. Vast: offers from ``POST /api/v0/bundles/``
(filters of ``{"op": value}``; ``gpu_ram`` in MB), an instance from ``PUT
/api/v0/asks/{offer_id}/`` (``image``, ``disk``, ``env``, ``onstart``, ``label``, ``price`` the
bid of an interruptible one) answering ``new_contract``, and ``DELETE
/api/v0/instances/{id}/``. RunPod REST v2: GPU types and their list prices per cloud from
``GET /v2/catalog/gpus``, a pod from ``POST /v2/pods`` (``name``, ``image``, ``gpu: {id,
count}``, ``cloud``, ``disk``, ``ports``, ``env``; RunPod has no labels, so the pod's ``name``
carries llmao's) and ``DELETE /v2/pods/{id}``.

Every call goes through :func:`http_json.call_json`, the one call that never follows a
redirect and bounds what it reads. Every failure is a :class:`RentError` with a kind and a
reason naming no secret: a provider that echoes what it was sent cannot put the fleet key or
a bootstrap token into a message. A create that timed out may have created the instance:
it is never tried again in the same pass, and the planner finds it by its label. A destroy
refuses any instance that does not carry the label of the pool asking.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .config_file import LISTEN_PORTS, Provider
from .http_json import HttpCallError, call_json
from .json_values import is_integer, is_number
from .listings import RUNPOD_DEFAULT_URL, VAST_DEFAULT_URL, ListedBox
from .pool_config import instance_label, read_label

# The most offers read from one search: the cheapest are first, the rest are not needed.
MAX_OFFERS = 200
RENT_TIMEOUT_S = 30.0
# RunPod's clouds, the cheaper first when both serve a GPU type at one price.
RUNPOD_CLOUDS = ("COMMUNITY", "SECURE")


class RentError(RuntimeError):
    """A rent, a search or a return failed; ``kind`` says how, and the reason names no secret.

    ``throttled`` (429; ``retry_after`` the seconds asked), ``refused`` (another 4xx),
    ``provider`` (5xx), ``unreachable`` (no answer, a timeout), ``answer`` (an answer without
    the documented shape), ``unlabelled`` (a return of an instance without the pool's
    label: never sent). ``maybe_created``: a create whose outcome is unknown.
    """

    def __init__(self, kind: str, reason: str, retry_after: float | None = None,
                 maybe_created: bool = False) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.retry_after = retry_after
        self.maybe_created = maybe_created


@dataclass(frozen=True)
class RentOffer:
    """One way to rent a box: the provider's id of it (a Vast ask, a RunPod GPU type), what
    it has, and what it costs an hour (the bid, for an interruptible Vast instance)."""

    provider: str
    offer_id: str
    gpu_name: str
    num_gpus: int
    gpu_ram_gb: float
    usd_per_hour: float
    cloud: str = ""
    # A Vast bid: the create names ``usd_per_hour`` as its ``price``.
    bid: bool = False


@dataclass(frozen=True)
class Need:
    """What a pool's box must have: the offer's GPUs and the recipes' memory and disk."""

    gpu_names: tuple[str, ...]
    num_gpus: int
    gpu_ram_gb: float
    disk_gb: float
    max_usd_per_hour: float
    interruptible: bool = False


@dataclass(frozen=True)
class RentRequest:
    """One instance to create: for ``box`` of ``pool``, from ``image``, with the env the
    provision script reads (the fleet key and the box's bootstrap token among it)."""

    pool: str
    box: str
    image: str
    disk_gb: float
    env: Mapping[str, str] = field(repr=False)
    onstart: str = ""

    @property
    def label(self) -> str:
        return instance_label(self.pool, self.box)


@dataclass(frozen=True)
class Rented:
    """An instance a create made: its provider id, the box it is, the offer it came from."""

    instance_id: str
    box: str
    offer: RentOffer


def _error(exc: HttpCallError, what: str, secrets: tuple[str, ...],
           creating: bool = False) -> RentError:
    """The :class:`RentError` of a failed call: its kind by status, any secret scrubbed."""
    reason = f"{what}: {exc}"
    for secret in secrets:
        if secret:
            reason = reason.replace(secret, "***")
    status = exc.status
    if status == 429:
        return RentError("throttled", reason, exc.retry_after)
    if status is None:
        return RentError("unreachable", reason, maybe_created=creating)
    if 500 <= status < 600:
        return RentError("provider", reason, exc.retry_after, maybe_created=creating)
    return RentError("refused", reason)


def _name(value: Any) -> str | None:
    """A GPU name or id as an offer gives it: printable, at most 100 characters, or None."""
    return value if isinstance(value, str) and 0 < len(value) <= 100 and value.isprintable() \
        else None


def _number(value: Any) -> float | None:
    return float(value) if is_number(value) and value >= 0 else None


class _Client:
    """One provider's calls with its key; every call bounded by ``timeout``."""

    kind = ""

    def __init__(self, provider: Provider, timeout: float = RENT_TIMEOUT_S) -> None:
        self._key = provider.api_key or ""
        self.timeout = timeout
        self.base = self._base(provider.url)

    def _base(self, url: str | None) -> str:
        raise NotImplementedError

    def _call(self, method: str, path: str, body: Any, what: str,
              secrets: tuple[str, ...] = (), creating: bool = False) -> Any:
        try:
            return call_json(method, self.base + path, self._key, body, self.timeout)
        except HttpCallError as exc:
            raise _error(exc, f"{self.kind}: {what}", (self._key, *secrets), creating) from None

    def destroy(self, listed: ListedBox, pool: str) -> None:
        """Return ``listed`` to the provider, only when it carries ``pool``'s label."""
        mark = read_label(listed.tag)
        if listed.provider != self.kind or mark is None or mark[0] != pool:
            raise RentError("unlabelled", f"{listed.label} does not carry the label of pool "
                                          f"{pool}: llmao never destroys it")
        self._delete(listed.names[0])

    def _delete(self, instance_id: str) -> None:
        raise NotImplementedError


class VastRent(_Client):
    """Vast's v0 offer search, create and destroy (the listing reads its v1 instance list)."""

    kind = "vast"

    def _base(self, url: str | None) -> str:
        parts = urllib.parse.urlsplit(url or VAST_DEFAULT_URL)
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/api/v0", "", ""))

    def offers(self, need: Need) -> list[RentOffer]:
        """Offers that fit ``need``, cheapest first; each checked here too (a provider may
        ignore a filter), and one that cannot be read costs only itself."""
        query = {"gpu_name": {"in": list(need.gpu_names)}, "num_gpus": {"eq": need.num_gpus},
                 "gpu_ram": {"gte": need.gpu_ram_gb * 1024},
                 "disk_space": {"gte": need.disk_gb}, "rentable": {"eq": True},
                 "rented": {"eq": False}, "verified": {"eq": True},
                 "type": "bid" if need.interruptible else "on-demand",
                 "order": [["dph_total", "asc"]], "limit": MAX_OFFERS}
        answer = self._call("POST", "/bundles/", query, "offer search")
        offers = answer.get("offers") if isinstance(answer, dict) else None
        if not isinstance(offers, list):
            raise RentError("answer", "vast: offer search: the answer has no 'offers' list")
        found = (self._offer(entry, need) for entry in offers[:MAX_OFFERS])
        return sorted((offer for offer in found if offer), key=lambda o: o.usd_per_hour)

    def _offer(self, entry: Any, need: Need) -> RentOffer | None:
        if not isinstance(entry, dict) or not is_integer(entry.get("id")) or entry["id"] <= 0:
            return None
        ram_mb, disk = _number(entry.get("gpu_ram")), _number(entry.get("disk_space"))
        price = _number(entry.get("min_bid") if need.interruptible else entry.get("dph_total"))
        fits = (entry.get("gpu_name") in need.gpu_names and entry.get("num_gpus") ==
                need.num_gpus and ram_mb is not None and ram_mb >= need.gpu_ram_gb * 1024
                and disk is not None and disk >= need.disk_gb and price is not None
                and price <= need.max_usd_per_hour)
        if not fits:
            return None
        return RentOffer("vast", str(entry["id"]), entry["gpu_name"], need.num_gpus,
                         ram_mb / 1024, price, bid=need.interruptible)

    def create(self, offer: RentOffer, request: RentRequest) -> Rented:
        """Accept ``offer`` as ``request``'s instance; its id is Vast's ``new_contract``."""
        body: dict[str, Any] = {
            "image": request.image, "disk": request.disk_gb, "label": request.label,
            "env": {**{f"-p {port}:{port}": "1" for port in LISTEN_PORTS},
                    **request.env},
            "onstart": request.onstart, "runtype": "args"}
        if offer.bid:
            body["price"] = offer.usd_per_hour
        answer = self._call("PUT", f"/asks/{urllib.parse.quote(offer.offer_id)}/", body,
                            f"create on offer {offer.offer_id}",
                            tuple(request.env.values()), creating=True)
        contract = answer.get("new_contract") if isinstance(answer, dict) else None
        if not is_integer(contract) or contract <= 0:
            raise RentError("answer", f"vast: create on offer {offer.offer_id}: the answer has "
                                      "no new_contract", maybe_created=True)
        return Rented(str(contract), request.box, offer)

    def _delete(self, instance_id: str) -> None:
        self._call("DELETE", f"/instances/{urllib.parse.quote(instance_id)}/", None,
                   f"destroy instance {instance_id}")


class RunPodRent(_Client):
    """RunPod v2's GPU catalog, pod create and pod delete."""

    kind = "runpod"

    def _base(self, url: str | None) -> str:
        return (url or RUNPOD_DEFAULT_URL).rstrip("/")

    def offers(self, need: Need) -> list[RentOffer]:
        """Each (GPU type, cloud) that fits ``need`` at its list price, cheapest first."""
        answer = self._call("GET", "/catalog/gpus", None, "GPU catalog")
        gpus = answer.get("gpus") if isinstance(answer, dict) else None
        if not isinstance(gpus, list):
            raise RentError("answer", "runpod: GPU catalog: the answer has no 'gpus' list")
        offers = [offer for entry in gpus[:MAX_OFFERS] if isinstance(entry, dict)
                  for offer in self._offers(entry, need)]
        return sorted(offers, key=lambda o: (o.usd_per_hour, RUNPOD_CLOUDS.index(o.cloud)))

    @staticmethod
    def _offers(entry: dict[str, Any], need: Need) -> list[RentOffer]:
        gpu_id, memory = _name(entry.get("id")), _number(entry.get("memory"))
        named = gpu_id in need.gpu_names or entry.get("name") in need.gpu_names
        if not isinstance(gpu_id, str) or not named or memory is None \
                or memory < need.gpu_ram_gb:
            return []
        prices = entry.get("price") if isinstance(entry.get("price"), dict) else {}
        counts = entry.get("maxCount") if isinstance(entry.get("maxCount"), dict) else {}
        offers = []
        for cloud in RUNPOD_CLOUDS:
            each, most = _number(prices.get(cloud.lower())), counts.get(cloud.lower())
            if entry.get(cloud.lower()) is not True or each is None or \
                    not is_integer(most) or most < need.num_gpus:
                continue
            price = each * need.num_gpus
            if price <= need.max_usd_per_hour:
                offers.append(RentOffer("runpod", gpu_id, _name(entry.get("name")) or gpu_id,
                                        need.num_gpus, memory, price, cloud))
        return offers

    def create(self, offer: RentOffer, request: RentRequest) -> Rented:
        """A pod of ``offer``'s GPU type in its cloud, named by llmao's label."""
        body = {"name": request.label, "image": request.image,
                "gpu": {"id": offer.offer_id, "count": offer.num_gpus}, "cloud": offer.cloud,
                "disk": max(1, math.ceil(request.disk_gb)),
                "ports": [f"{port}/tcp" for port in LISTEN_PORTS],
                "env": dict(request.env)}
        answer = self._call("POST", "/pods", body, f"create a {offer.gpu_name} pod",
                            tuple(request.env.values()), creating=True)
        pod_id = answer.get("id") if isinstance(answer, dict) else None
        if not isinstance(pod_id, str) or not pod_id.strip() or len(pod_id) > 100:
            raise RentError("answer", f"runpod: create a {offer.gpu_name} pod: the answer has "
                                      "no pod id", maybe_created=True)
        return Rented(pod_id, request.box, offer)

    def _delete(self, instance_id: str) -> None:
        self._call("DELETE", f"/pods/{urllib.parse.quote(instance_id)}", None,
                   f"terminate pod {instance_id}")


RENT_CLIENTS: Mapping[str, type[_Client]] = {"vast": VastRent, "runpod": RunPodRent}


def rent_client(provider: Provider, timeout: float = RENT_TIMEOUT_S) -> VastRent | RunPodRent:
    """The rent client of ``provider`` (``vast`` or ``runpod``)."""
    return RENT_CLIENTS[provider.kind](provider, timeout)  # type: ignore[return-value]
