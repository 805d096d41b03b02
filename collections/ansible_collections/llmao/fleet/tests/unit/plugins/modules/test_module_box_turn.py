# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module llmao.fleet.box_turn run in-process against a contract-shaped llmao on loopback.

The fake keeps one turn per box and answers the admin routes the module uses as llmao does
(docs/rolling-changes.md: ``POST /admin/api/turns/take``, ``GET /admin/api/observations``,
``POST /admin/api/boxes/<box>/applied``, ``GET /admin/api/boxes/<box>/turn``), and refuses
any box API call: the push path speaks as the controller, never as the box. Its ``moves``
stand in for reconcile: each ask moves the turn one phase on, and a report of the applied
revision ends it as ``ends`` says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.modules import box_turn
from ansible_collections.llmao.fleet.tests.unit.compat import patch_module_args
from tests.unit.box_program.helpers import FakeLlmao, Seen

BOX = "203.0.113.10"
NOW = 5000.0
FAILED_WHY = "llmao:203.0.113.10:8001:gemma4-26b is Stalled: not answering after the grace"


@dataclass
class RollingLlmao(FakeLlmao):
    """llmao's turn routes with reconcile folded in (see the module docstring)."""

    admin_token: str = ""
    fleet_key: str = ""
    revision: str = ""
    moves: bool = True
    ends: str = "done"
    turn: dict[str, Any] | None = None
    applied: str | None = None
    notes: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)

    def answer(self, request: Seen) -> tuple[int, bytes, dict[str, str]]:
        self.notes.append(f"{request.method} {request.path}")
        route = ROUTES.get((request.method, request.path))
        if route is None:
            return 404, b'{"error": {"message": "no route"}}', {}
        if request.headers.get("authorization") != f"Bearer {self.admin_token}":
            return 403, b'{"error": {"message": "wrong key"}}', {}
        status, document = route(self, request)
        return status, json.dumps(document).encode(), {}

    def take(self, request: Seen) -> tuple[int, Any]:
        ask = json.loads(request.body)
        if ask["revision"] != self.revision:
            return 409, {"error": {"message": "not what the box is meant to run now"}}
        if self.turn is None or self.turn["revision"] != ask["revision"]:
            self.turn = {"box": ask["box"], "revision": ask["revision"],
                         "servers": [f"llmao:{BOX}:8001:{name}" for name in ask["servers"]],
                         "phase": "draining", "granted_at": NOW, "expires_at": NOW + 600,
                         "drained_at": None, "ended_at": None, "why": ""}
            apply = False
        else:
            apply = self.turn["phase"] == "drained"
            if self.moves and self.turn["phase"] == "draining":
                self.turn["phase"] = "drained"
        return 200, {"host": BOX, "revision": self.revision, "granted": True,
                     "phase": self.turn["phase"], "apply": apply, "drain_s": 0.0, "why": ""}

    def observations(self, request: Seen) -> tuple[int, Any]:
        applied = {"revision": self.applied, "applied_at": "x", "reported_at": NOW} \
            if self.applied else None
        return 200, {"now": NOW, "boxes": {BOX: {"last_fetch": NOW, "applied": applied}},
                     "verdicts": {}, "turns": [self.turn] if self.turn else []}

    def box_turn(self, request: Seen) -> tuple[int, Any]:
        return 200, {"box": BOX, "revision": self.revision, "turn": self.turn}

    def report(self, request: Seen) -> tuple[int, Any]:
        report = json.loads(request.body)
        if report["revision"] != self.revision:
            return 409, {"error": {"message": "not the intended revision"}}
        self.applied = report["revision"]
        if self.moves and self.turn and self.turn["phase"] == "drained":
            self.turn.update(phase=self.ends, why=FAILED_WHY if self.ends == "failed" else "")
        return 200, {"intended": True}


APPLIED = f"/admin/api/boxes/{BOX}/applied"
ROUTES = {("POST", "/admin/api/turns/take"): RollingLlmao.take,
          ("GET", "/admin/api/observations"): RollingLlmao.observations,
          ("GET", f"/admin/api/boxes/{BOX}/turn"): RollingLlmao.box_turn,
          ("POST", APPLIED): RollingLlmao.report}


@pytest.fixture
def llmao(write_fleet, base_config, secrets):
    fake = RollingLlmao(admin_token=secrets["admin_token"], fleet_key=secrets["fleet_key"])
    with fake.serve():
        config, models = write_fleet({**base_config, "server": {"url": fake.url}})
        fake.revision = load_fleet(config, models).assignment(BOX).revision
        fake.files = {"config": config, "models": models}
        yield fake


def run(capsys, llmao: RollingLlmao, check: bool = False, **args: Any) -> dict[str, Any]:
    """The module's parsed result, after checking that no secret was printed."""
    args = {**llmao.files, "box": BOX, "poll_interval": 0.01, **args}
    if check:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        box_turn.main()
    printed = capsys.readouterr().out
    assert llmao.fleet_key not in printed and llmao.admin_token not in printed
    return json.loads(printed)


def record(llmao: RollingLlmao) -> dict[str, Any]:
    return {"revision": llmao.revision, "host": BOX, "applied_at": "2026-01-02T03:04:05Z",
            "servers": [{"name": "gemma4-26b", "model": "gemma4-26b", "port": 8001,
                         "served_model_name": "gemma4-26b"}]}


def test_a_turn_is_taken_and_waited_for_until_the_box_may_apply(capsys, llmao):
    result = run(capsys, llmao, servers=["gemma4-26b"])
    assert (result["phase"], result["apply"], result["changed"]) == ("drained", True, True)
    assert result["revision"] == llmao.revision
    asks = llmao.requests_to("/admin/api/turns/take")
    assert len(asks) == 3
    assert json.loads(asks[0].body) == {"box": BOX, "revision": llmao.revision,
                                        "servers": ["gemma4-26b"]}


def test_the_applied_revision_is_reported_as_the_controller_and_the_turn_seen_done(capsys,
                                                                                   llmao):
    run(capsys, llmao, servers=["gemma4-26b"])
    result = run(capsys, llmao, state="done", applied=record(llmao))
    assert (result["phase"], result["changed"]) == ("done", True)
    assert llmao.applied == llmao.revision
    assert not any(seen.path.startswith("/vllm/") for seen in llmao.seen)
    assert not any("x-llmao-host" in seen.headers for seen in llmao.seen)
    (report,) = llmao.requests_to(APPLIED)
    assert json.loads(report.body) == {
        "revision": llmao.revision, "applied_at": "2026-01-02T03:04:05Z",
        "servers": [{"name": "gemma4-26b", "port": 8001, "served_model_name": "gemma4-26b"}]}


def test_the_cards_and_placement_the_box_recorded_are_reported_too(capsys, llmao):
    cards = {"cards": [{"index": 0, "name": "NVIDIA L4", "memory_total_mib": 23034}],
             "placement": {"gemma4-26b": [0]}}
    run(capsys, llmao, servers=["gemma4-26b"])
    run(capsys, llmao, state="done", applied={**record(llmao), **cards})
    (report,) = llmao.requests_to(APPLIED)
    assert {key: json.loads(report.body)[key] for key in cards} == cards


def test_a_revision_llmao_knows_applied_is_not_reported_again(capsys, llmao):
    run(capsys, llmao, servers=["gemma4-26b"])
    run(capsys, llmao, state="done", applied=record(llmao))
    again = run(capsys, llmao, state="done", applied=record(llmao))
    assert (again["phase"], again["changed"]) == ("done", False)
    assert len(llmao.requests_to(APPLIED)) == 1


def test_a_failed_turn_fails_the_task_with_its_reason(capsys, llmao):
    llmao.ends = "failed"
    run(capsys, llmao, servers=["gemma4-26b"])
    result = run(capsys, llmao, state="done", applied=record(llmao))
    assert result["failed"] is True
    assert (result["phase"], result["why"]) == ("failed", FAILED_WHY)
    assert FAILED_WHY in result["msg"]


def test_a_turn_that_never_drains_times_out_naming_phase_and_reconcile(capsys, llmao):
    llmao.moves = False
    result = run(capsys, llmao, servers=["gemma4-26b"], wait_timeout=0.2)
    assert result["failed"] is True and result["phase"] == "draining"
    assert "still draining after 0 s" in result["msg"]
    assert "is reconcile running?" in result["msg"]


def test_a_record_of_another_revision_is_not_reported(capsys, llmao):
    result = run(capsys, llmao, state="done", applied={**record(llmao), "revision": "0" * 16})
    assert result["failed"] is True and "the push did not apply it" in result["msg"]
    assert llmao.requests_to(APPLIED) == []


def test_a_stale_revision_is_refused_by_llmao(capsys, llmao):
    llmao.revision = "f" * 16
    result = run(capsys, llmao, servers=["gemma4-26b"])
    assert result["failed"] is True and "HTTP 409" in result["msg"]


@pytest.mark.parametrize("state", ["drained", "done"])
def test_check_mode_only_reads(capsys, llmao, state):
    result = run(capsys, llmao, check=True, state=state, servers=["gemma4-26b"],
                 applied=record(llmao))
    assert result["changed"] is True and result["msg"].startswith("would ")
    assert {note.split()[0] for note in llmao.notes} == {"GET"}
    assert llmao.turn is None and llmao.applied is None
