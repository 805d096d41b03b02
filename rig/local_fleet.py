"""A fleet whose boxes are vLLM stubs on loopback addresses, for reconcile's tests and benchmark.

Every box is named by a loopback address of its own (``127.x.y.z``: Linux answers on all of
127/8), and its servers listen there on the real listen ports 8001-8003. Without a provider
configured the fleet is local, so public equals listen and the probes, LiteLLM and the stubs
meet on exactly the addresses config.yaml names: no listing or port map is needed, and no
traffic leaves the machine.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import LISTEN_PORTS
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import IntendedServer
from rig.boxes import LocalStub, start_local_stub
from rig.fleet_files import FleetFolder, recipe, strong_secret, write_fleet

MODEL = "stub-model"
WEIGHTS = "example/stub-model"


def loopback_boxes(count: int, seed: int | None = None) -> list[str]:
    """``count`` distinct random ``127.x.y.z`` names (never 127.0.0.x, which others use)."""
    pick = random.Random(seed)
    names: set[str] = set()
    while len(names) < count:
        names.add(f"127.{pick.randint(1, 254)}.{pick.randint(0, 255)}.{pick.randint(1, 254)}")
    return sorted(names)


def models_document(names: Sequence[str] = (MODEL,),
                    recipes: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """One self-hosted entry per name; ``recipes`` adds vLLM recipe keys (args, max_model_len)."""
    recipes = recipes or {}
    return {"models": [recipe(name, f"example/{name}", **recipes.get(name, {}))
                       for name in names]}


@dataclass
class LocalFleet(FleetFolder):
    """The two files, the secrets a test needs to act as each party, and the loaded fleet."""

    folder: Path
    hosts: dict[str, list[list[Any]]]
    settings: dict[str, Any] = field(default_factory=dict)
    models: Sequence[str] = (MODEL,)
    recipes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    salt: str = field(default_factory=lambda: strong_secret("salt-"))
    fleet_key: str = field(default_factory=lambda: strong_secret("fleet-"))
    admin_token: str = field(default_factory=lambda: strong_secret("admin-"))

    def write(self, **sections: Any) -> Fleet:
        """Write config.yaml, models.yaml and an inventory source; ``sections`` merge in."""
        self.settings.update(sections)
        fleet_section = {"key": self.fleet_key, "vllm_api_salt": self.salt, "hosts": self.hosts,
                         **self.settings.get("fleet", {})}
        config = {**{k: v for k, v in self.settings.items() if k != "fleet"},
                  "fleet": fleet_section,
                  "admin": {"token": self.admin_token}}
        write_fleet(self.folder, config, models_document(self.models, self.recipes),
                    inventory=True)
        return self.load()

    def write_reconciled(self, litellm_url: str, master_key: str, llmao_port: int,
                         state: Path, **sections: Any) -> Fleet:
        """:meth:`write` for reconcile passes: the LiteLLM at ``litellm_url``, and an
        llmao-server on loopback at ``llmao_port`` keeping its store in ``state``."""
        return self.write(litellm={"url": litellm_url, "master_key": master_key},
                          server={"url": f"http://127.0.0.1:{llmao_port}", "state": str(state)},
                          **sections)

    def of_boxes(self, boxes: Iterable[str], name: str) -> Fleet:
        """These boxes alone, written beside this fleet (in ``folder/name``) with its salt, so
        their servers' bearers are this fleet's: what a test starts stubs for."""
        return LocalFleet(self.folder / name, {box: self.hosts[box] for box in boxes},
                          salt=self.salt).write()

    def secrets(self) -> list[str]:
        """Every secret of this fleet, to check that none shows anywhere."""
        fleet = self.load()
        found = [self.salt, self.fleet_key, self.admin_token]
        found += [server.api_key for server in fleet.servers()]
        master = fleet.settings.litellm.master_key
        return found + ([master] if master else [])


def one_model_hosts(boxes: Sequence[str], servers_per_box: int = 1,
                    model: str = MODEL) -> dict[str, list[list[Any]]]:
    """Each box runs ``servers_per_box`` servers of one model, named apart by their port."""
    return {box: [[model, port, f"{model}-{port}"] for port in LISTEN_PORTS[:servers_per_box]]
            for box in boxes}


def stub_args(server: IntendedServer) -> list[str]:
    """What a box passes to `vllm serve` beyond the address: the context, the recipe's args."""
    recipe = server.entry.vllm
    context = recipe.numbers.get("max_model_len")
    return [*(["--max-model-len", str(context)] if context else []), *recipe.args]


def tls_args(files: tuple[Path, Path] | None) -> list[str]:
    """The flags a box under box TLS gives vLLM: its key and certificate, reloaded in place."""
    if files is None:
        return []
    key, cert = files
    return ["--ssl-keyfile", str(key), "--ssl-certfile", str(cert), "--enable-ssl-refresh"]


def start_stubs(fleet: Fleet, behaviours: Mapping[str, Mapping] | None = None,
                keys: Mapping[str, str] | None = None,
                tls: Mapping[str, tuple[Path, Path]] | None = None) -> list[LocalStub]:
    """One stub per intended server, on its box address and listen port, with its bearer.

    ``behaviours`` and ``keys`` (by box name) change what a box's stubs do or which key they
    require; ``tls`` (box name to its key and certificate files) makes them serve HTTPS as a
    box under box TLS does. All start at once (``wait=False``) and are then waited for together.
    """
    behaviours, keys, tls = behaviours or {}, keys or {}, tls or {}
    stubs: list[LocalStub] = []
    try:
        for server in fleet.servers():
            stubs.append(start_local_stub(
                server.listen_port, served_name=server.served_model_name,
                model=server.entry.vllm.model, api_key=keys.get(server.box, server.api_key),
                behaviour=behaviours.get(server.box), box_name=server.box, host=server.box,
                wait=False, args=[*stub_args(server), *tls_args(tls.get(server.box))]))
        for stub in stubs:
            stub.wait_ready()
    except BaseException:
        stop_stubs(stubs)
        raise
    return stubs


def stop_stubs(stubs: Sequence[LocalStub]) -> None:
    for stub in stubs:
        stub.stop()


@contextmanager
def running_stubs(fleet: Fleet) -> Iterator[list[LocalStub]]:
    """``start_stubs`` for the block: stopped when it ends."""
    stubs = start_stubs(fleet)
    try:
        yield stubs
    finally:
        stop_stubs(stubs)
