"""llmao as the follow program sees it, built from the documented shapes (docs/box-protocol.md).

A real HTTP server on loopback (helpers.FakeLlmao) whose answers follow the protocol instead of
a script per path: ``GET /vllm/config`` serves the intended payload with its ``ETag`` and
answers ``304`` to an ``If-None-Match`` naming it; ``POST /vllm/turn`` answers 409 for a
revision that is not the intended one, else the next of the turn answers a test queues;
``POST /vllm/applied`` keeps the reported revision. A test changes ``intended`` between the
follower's steps (from its injected sleep) as an operator changes models.yaml.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .helpers import FakeLlmao, Seen, payload

CONFIG = "/vllm/config"
TURN = "/vllm/turn"
APPLIED = "/vllm/applied"
ROLLOUT = {"follow_s": 30.0, "drain_s": 5.0}


def following(*servers: dict[str, Any], revision: str, **rollout: float) -> dict[str, Any]:
    """A payload of a fleet whose boxes follow: ``rollout`` at the top level."""
    return {**payload(*servers, revision=revision), "rollout": {**ROLLOUT, **rollout}}


def turn(granted: bool, phase: str | None = None, apply: bool = False,
         why: str = "") -> dict[str, Any]:
    """One answer of POST /vllm/turn, without the fields llmao fills in (host, revision)."""
    return {"granted": granted, "phase": phase, "apply": apply, "why": why}


@dataclass
class ContractLlmao(FakeLlmao):
    intended: dict[str, Any] = field(default_factory=dict)
    turns: list[dict[str, Any]] = field(default_factory=lambda: [turn(True, "drained", True)])
    reported: list[str] = field(default_factory=list)

    def answer(self, request: Seen) -> tuple[int, bytes, dict[str, str]]:
        revision = self.intended.get("revision")
        if request.path == CONFIG and request.method == "GET":
            tag = {"ETag": f'"{revision}"'}
            if request.headers.get("if-none-match") == tag["ETag"]:
                return 304, b"", tag
            return 200, json.dumps(self.intended).encode(), tag
        if request.path == TURN and request.method == "POST":
            asked = json.loads(request.body)
            if asked["revision"] != revision:
                return 409, b'{"error": "stale_revision"}', {}
            decided = self.turns.pop(0) if len(self.turns) > 1 else self.turns[0]
            return 200, json.dumps({"host": self.intended["host"], "revision": revision,
                                    "drain_s": ROLLOUT["drain_s"], **decided}).encode(), {}
        if request.path == APPLIED and request.method == "POST":
            self.reported.append(json.loads(request.body)["revision"])
            return 200, json.dumps({"revision": self.reported[-1]}).encode(), {}
        return 404, b'{"error": {"message": "no route"}}', {}

    def turn_requests(self) -> list[dict[str, Any]]:
        return [json.loads(seen.body) for seen in self.requests_to(TURN)]

    def steps(self) -> list[str]:
        """What the box asked, in order: GET with or without If-None-Match, POST path."""
        return [f"{seen.method} {seen.path}" + (" (check)" if "if-none-match" in seen.headers
                                                 else "")
                for seen in self.seen]
