"""A fake of Vast's and RunPod's rent APIs on loopback: offers, create, list, destroy.

The real APIs cannot be reached from here. This keeps instances as the providers do and
answers in their documented shapes (rig/provider_api.py builds the listing entries): Vast's
offer search ``POST /api/v0/bundles/``, create ``PUT /api/v0/asks/{id}/`` answering
``{"success", "new_contract"}``, destroy ``DELETE /api/v0/instances/{id}/`` and the instance
list ``GET /api/v1/instances/``; RunPod v2's ``GET /v2/catalog/gpus``, ``POST /v2/pods``
(201, the pod), ``DELETE /v2/pods/{id}`` (204) and ``GET /v2/pods``.

A create calls ``starter`` (when given) with the new instance, which starts a real box
running the provider's provision script with the env it was given, and returns where its
ports are published; a destroy calls ``stopper``. A test can mark an instance interrupted
(the provider stopped it), make the next creates answer 429 with ``Retry-After``, or make
them time out after creating (the instance exists; the client never hears of it).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rig.loopback_server import serving
from rig.provider_api import problem, runpod_pod, vast_instance

MAX_BODY = 1 << 20


@dataclass
class Instance:
    """One instance the fake keeps: what it was created with and where it stands."""

    provider: str
    instance_id: str
    label: str
    image: str
    env: dict[str, str] = field(repr=False)
    onstart: str
    price: float
    gpus: int
    interruptible: bool = False
    status: str = "running"
    address: str | None = None
    ports: dict[int, int] = field(default_factory=dict)
    handle: Any = None

    def listed(self) -> dict[str, Any]:
        """The instance as its provider's listing shows it."""
        if self.provider == "vast":
            entry = vast_instance(int(self.instance_id), self.address, self.ports, self.price,
                                  self.status, self.interruptible, self.gpus)
            return {**entry, "label": self.label}
        pod = runpod_pod(self.instance_id, self.address, self.ports, self.price,
                         self.interruptible, self.status.upper(), gpus=self.gpus)
        return {**pod, "name": self.label}


@dataclass
class RentApi:
    """The fake's state and knobs; served by :func:`serve_rent_api`."""

    url: str = ""
    vast_offers: list[dict[str, Any]] = field(default_factory=list)
    runpod_gpus: list[dict[str, Any]] = field(default_factory=list)
    instances: dict[str, Instance] = field(default_factory=dict)
    starter: Callable[[Instance], None] | None = None
    stopper: Callable[[Instance], None] | None = None
    # The next creates: answered 429 with this Retry-After, or left hanging this long after
    # the instance is made (past a client's timeout).
    throttled_creates: list[int] = field(default_factory=list)
    hanging_creates: list[float] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(5001))

    @property
    def vast_url(self) -> str:
        return f"{self.url}/api/v1"

    @property
    def runpod_url(self) -> str:
        return f"{self.url}/v2"

    def interrupt(self, instance_id: str) -> None:
        """The provider stops the instance (a Vast bid outbid, a spot pod reclaimed)."""
        instance = self.instances[instance_id]
        instance.status = "exited"
        if self.stopper:
            self.stopper(instance)

    def add_unlabelled(self, provider: str, label: str = "someone-else") -> Instance:
        """An instance of the same account that llmao did not rent."""
        instance = Instance(provider, self._new_id(provider), label, "other", {}, "", 0.3, 1)
        self.instances[instance.instance_id] = instance
        return instance

    def _new_id(self, provider: str) -> str:
        number = next(self._ids)
        return str(number) if provider == "vast" else f"pod{number:x}"

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any, dict[str, str]]:
        """Status, body and headers of one call."""
        self.calls.append((method, path))
        for pattern, handler in ROUTES:
            match = re.fullmatch(pattern, f"{method} {path.partition('?')[0]}")
            if match:
                return handler(self, body, *match.groups())
        return 404, problem(404, "Not Found"), {}

    def create(self, provider: str, label: Any, image: Any, env: Any, onstart: Any,
               price: float, gpus: int, interruptible: bool) -> tuple[Instance | None, dict]:
        """A new instance, or the 429's headers when a create is throttled."""
        if self.throttled_creates:
            return None, {"Retry-After": str(self.throttled_creates.pop(0))}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            env = {}
        instance = Instance(provider, self._new_id(provider), str(label), str(image),
                            {k: v for k, v in env.items() if not k.startswith("-p ")},
                            str(onstart or ""), price, gpus, interruptible)
        with self.lock:
            self.instances[instance.instance_id] = instance
        if self.starter:
            self.starter(instance)
        if self.hanging_creates:
            time.sleep(self.hanging_creates.pop(0))
        return instance, {}

    def destroy(self, instance_id: str) -> bool:
        with self.lock:
            instance = self.instances.pop(instance_id, None)
        if instance is not None and self.stopper:
            self.stopper(instance)
        return instance is not None


def _vast_search(api: RentApi, body: Any) -> tuple[int, Any, dict]:
    return 200, {"offers": list(api.vast_offers)}, {}


def _vast_create(api: RentApi, body: Any, offer_id: str) -> tuple[int, Any, dict]:
    offer = next((o for o in api.vast_offers if str(o.get("id")) == offer_id), None)
    if offer is None or not isinstance(body, dict) or not body.get("image"):
        return 400, {"success": False, "error": "invalid_args", "msg": "no such ask"}, {}
    bid = body.get("price")
    instance, headers = api.create("vast", body.get("label", ""), body["image"],
                                   body.get("env"), body.get("onstart"),
                                   float(bid if bid is not None else offer["dph_total"]),
                                   offer.get("num_gpus", 1), bid is not None)
    if instance is None:
        return 429, {"success": False, "error": "rate_limited"}, headers
    api.vast_offers.remove(offer)  # an ask is one machine: rented, it is no longer offered
    return 200, {"success": True, "new_contract": int(instance.instance_id)}, {}


def _vast_destroy(api: RentApi, body: Any, instance_id: str) -> tuple[int, Any, dict]:
    if not api.destroy(instance_id):
        return 404, {"success": False, "error": "no_such_instance"}, {}
    return 200, {"success": True}, {}


def _vast_list(api: RentApi, body: Any) -> tuple[int, Any, dict]:
    return 200, {"instances": [i.listed() for i in list(api.instances.values())
                               if i.provider == "vast"]}, {}


def _runpod_catalog(api: RentApi, body: Any) -> tuple[int, Any, dict]:
    return 200, {"gpus": list(api.runpod_gpus)}, {}


def _runpod_create(api: RentApi, body: Any) -> tuple[int, Any, dict]:
    gpu = body.get("gpu") if isinstance(body, dict) else None
    entry = next((g for g in api.runpod_gpus if isinstance(gpu, dict)
                  and g.get("id") == gpu.get("id")), None)
    if entry is None or not body.get("name") or not body.get("image"):
        return 400, problem(400, "Bad Request"), {}
    cloud = str(body.get("cloud") or "SECURE").lower()
    instance, headers = api.create("runpod", body["name"], body["image"], body.get("env"), "",
                                   entry["price"][cloud] * gpu.get("count", 1),
                                   gpu.get("count", 1), False)
    if instance is None:
        return 429, problem(429, "Too Many Requests"), headers
    return 201, {**instance.listed(), "status": "PROVISIONING"}, {}


def _runpod_destroy(api: RentApi, body: Any, pod_id: str) -> tuple[int, Any, dict]:
    if not api.destroy(pod_id):
        return 404, problem(404, "Not Found"), {}
    return 204, b"", {}


def _runpod_list(api: RentApi, body: Any) -> tuple[int, Any, dict]:
    return 200, {"pods": [i.listed() for i in list(api.instances.values())
                          if i.provider == "runpod"]}, {}


ROUTES: tuple[tuple[str, Callable[..., tuple[int, Any, dict]]], ...] = (
    (r"POST /api/v0/bundles/", _vast_search),
    (r"PUT /api/v0/asks/([0-9]+)/", _vast_create),
    (r"DELETE /api/v0/instances/([0-9]+)/", _vast_destroy),
    (r"GET /api/v1/instances/", _vast_list),
    (r"GET /v2/catalog/gpus", _runpod_catalog),
    (r"POST /v2/pods", _runpod_create),
    (r"DELETE /v2/pods/([a-z0-9]+)", _runpod_destroy),
    (r"GET /v2/pods", _runpod_list),
)


def vast_offer(offer_id: int, gpu_name: str, price: float, gpu_ram_gb: float = 24,
               disk_gb: float = 200, num_gpus: int = 1, min_bid: float | None = None
               ) -> dict[str, Any]:
    """One entry of Vast's offer search (``gpu_ram`` in MB, as Vast gives it)."""
    return {"id": offer_id, "ask_contract_id": offer_id, "gpu_name": gpu_name,
            "num_gpus": num_gpus, "gpu_ram": gpu_ram_gb * 1024, "disk_space": disk_gb,
            "dph_total": price, "min_bid": price / 2 if min_bid is None else min_bid,
            "rentable": True, "verified": True}


def runpod_gpu(gpu_id: str, name: str, memory: int, secure: float, community: float,
               max_count: int = 8) -> dict[str, Any]:
    """One entry of RunPod v2's GPU catalog, its list prices per cloud for one GPU."""
    return {"id": gpu_id, "name": name, "pool": None, "manufacturer": "NVIDIA",
            "memory": memory, "secure": True, "community": True,
            "price": {"secure": secure, "community": community},
            "maxCount": {"secure": max_count, "community": max_count}}


@contextmanager
def serve_rent_api(api: RentApi | None = None) -> Iterator[RentApi]:
    """A :class:`RentApi` on 127.0.0.1 for the ``with`` block."""
    api = api or RentApi()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            status, answer, headers = api.answer(self.command, self.path, body)
            payload = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            with contextlib.suppress(OSError):  # a client that gave up (a hanging create)
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    with serving(server, poll_interval=0.05):
        yield api
