# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""STAND-IN for rollout-server's core module (CONTRACT §4): replaced by theirs on merge."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Phase(StrEnum):
    DRAINING = "draining"
    DRAINED = "drained"
    DONE = "done"
    FAILED = "failed"


ACTIVE = frozenset({Phase.DRAINING, Phase.DRAINED})


@dataclass(frozen=True)
class Turn:
    box: str
    revision: str
    servers: tuple[str, ...]
    phase: Phase
    granted_at: float
    expires_at: float
    drained_at: float | None = None
    ended_at: float | None = None
    why: str = ""

    def record(self) -> dict[str, Any]:
        return {"box": self.box, "revision": self.revision, "servers": list(self.servers),
                "phase": self.phase.value, "granted_at": self.granted_at,
                "expires_at": self.expires_at, "drained_at": self.drained_at,
                "ended_at": self.ended_at, "why": self.why}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Turn:
        return cls(str(record["box"]), str(record["revision"]),
                   tuple(str(s) for s in record["servers"]), Phase(record["phase"]),
                   float(record["granted_at"]), float(record["expires_at"]),
                   record.get("drained_at"), record.get("ended_at"), str(record.get("why") or ""))


def paused_models(fleet: Any, turns: Iterable[Turn]) -> dict[str, Turn]:
    paused = {}
    by_id = {f"llmao:{s.box}:{s.listen_port}:{s.name}": s for s in fleet.servers()}
    for turn in turns:
        assignment = fleet.assignment(turn.box)
        if turn.phase is not Phase.FAILED or assignment is None \
                or assignment.revision != turn.revision:
            continue
        for server_id in turn.servers:
            if server_id in by_id:
                paused.setdefault(by_id[server_id].model_name, turn)
    return paused
