# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What llmao intends a box to run, and the payload that tells the box.

An :class:`IntendedServer` joins a ``fleet.hosts`` row with its recipe and
bearer. A :class:`BoxAssignment` is one box's servers plus the exact bytes
``GET /vllm/config`` answers and their ``revision``: built once at load, so a
fetch is a lookup and the push path ships the very same content.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .models_file import RECIPE_NUMBERS, ModelEntry

REVISION_LENGTH = 16
# The mark of llmao's own LiteLLM deployments: every ``model_info.id`` it registers starts so.
ID_PREFIX = "llmao:"


def deployment_id(box: str, listen_port: int, name: str) -> str:
    """The ``model_info.id`` of a server's deployment: stable across runs and restarts."""
    return f"{ID_PREFIX}{box}:{listen_port}:{name}"


@dataclass(frozen=True)
class IntendedServer:
    """One vLLM process llmao wants on one box, on one listen port."""

    box: str
    name: str
    model_name: str
    listen_port: int
    entry: ModelEntry = field(repr=False)
    api_key: str = field(repr=False)
    legacy: bool = False
    seed_public_port: int | None = None

    @property
    def id(self) -> str:
        """This server's id everywhere: its LiteLLM deployment, its verdict, its probe."""
        return deployment_id(self.box, self.listen_port, self.name)

    @property
    def served_model_name(self) -> str:
        return self.entry.vllm.served_model_name

    @property
    def gpus(self) -> int:
        """The cards this server spans (its recipe's ``vllm.gpus``, default 1)."""
        return self.entry.vllm.numbers.get("gpus", 1)

    def payload_entry(self) -> dict[str, Any]:
        """This server as the seed's JSON shape (with the bearer: box-facing only)."""
        recipe = self.entry.vllm
        entry: dict[str, Any] = {
            "name": self.name,
            "model": recipe.model,
            "served_model_name": recipe.served_model_name,
            "host": self.box,
            "port": self.listen_port,
            "api_key": self.api_key,
            "args": list(recipe.args),
        }
        entry.update((key, recipe.numbers[key]) for key in RECIPE_NUMBERS if key in recipe.numbers)
        return entry

    def public_view(self) -> dict[str, Any]:
        """The same facts without the bearer: for inventories, dashboards and logs."""
        entry = self.payload_entry()
        del entry["api_key"]
        entry["model_name"] = self.model_name
        entry["legacy"] = self.legacy
        return entry


@dataclass(frozen=True)
class BoxAssignment:
    """A box's servers in row order, its revision and the encoded answer."""

    box: str
    servers: tuple[IntendedServer, ...]
    revision: str
    body: bytes = field(repr=False)
    # The answer's HTTP entity tag: the revision, quoted (a strong tag). Made here, once,
    # because the config server sends it with every fetch.
    etag: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "etag", f'"{self.revision}"')

    @property
    def cards_needed(self) -> int:
        """The fewest cards a box needs for this assignment: its widest server's ``gpus``
        (servers may share cards, so more is not needed by count alone)."""
        return max((server.gpus for server in self.servers), default=0)

    def short_of_cards(self, reported: int | None, listed: int | None = None) -> str | None:
        """Why a box that reported ``reported`` cards cannot run this assignment, or None.

        Before the box has reported (``reported`` None), what its provider listing says
        it has (``listed`` GPUs) is weighed instead, so a row that cannot fit is flagged
        before the box even boots; the box's own report, once there, is the word that
        counts. None also when neither says.
        """
        count = reported if reported is not None else listed
        if count is None or count >= self.cards_needed:
            return None
        widest = max(self.servers, key=lambda server: server.gpus)
        said = f"the box reported {reported}" if reported is not None else \
            f"the provider lists {listed} GPU{'' if listed == 1 else 's'}"
        return f"{widest.name} needs {widest.gpus} cards (vllm.gpus of {widest.model_name}), {said}"


def revision_of(box: str, entries: list[dict[str, Any]],
                rollout: Mapping[str, float] | None = None,
                tls: Mapping[str, object] | None = None) -> str:
    """A stable content hash of what the box is told, secrets included in the input.

    Including the bearer means a salt rotation shows up as a new revision the
    box has not applied; the hash never reveals it. The ``rollout`` object is
    covered only when it is sent, so a fleet that does not follow keeps its
    revisions; so is ``tls``, so that turning box TLS on rolls box by box.
    """
    told: dict[str, Any] = {"host": box, "servers": entries}
    if rollout is not None:
        told["rollout"] = dict(rollout)
    if tls is not None:
        told["tls"] = dict(tls)
    canonical = json.dumps(told, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:REVISION_LENGTH]


def assign(box: str, servers: tuple[IntendedServer, ...],
           rollout: Mapping[str, float] | None = None,
           tls: Mapping[str, object] | None = None) -> BoxAssignment:
    """Build the payload once: ``{"host", "servers", "revision"}`` as bytes,
    ``"rollout"`` when boxes follow (:meth:`config_file.Rollout.payload`) and ``"tls"``
    when they serve HTTPS (:meth:`box_tls.BoxTls.payload`)."""
    entries = [server.payload_entry() for server in servers]
    revision = revision_of(box, entries, rollout, tls)
    payload: dict[str, Any] = {"host": box, "servers": entries, "revision": revision}
    if rollout is not None:
        payload["rollout"] = dict(rollout)
    if tls is not None:
        payload["tls"] = dict(tls)
    body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    return BoxAssignment(box, servers, revision, body)
