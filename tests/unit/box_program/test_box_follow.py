"""The follow loop's decisions (``install_set.py --follow``), against llmao's contract shapes.

The box is the test box of helpers.py (temp folders, fake nvidia-smi and supervisorctl); llmao
is follow_llmao.ContractLlmao on loopback. The loop runs for real; only its waits are
injected: the clock records each one, lets a test change llmao between steps, and ends the
loop after a given number of waits.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from .conftest import point_box_at
from .follow_llmao import APPLIED, CONFIG, TURN, ContractLlmao, following, turn
from .helpers import FLEET_KEY, FakeLlmao, closed_port, server_entry

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \S")
DRAW = 1.1  # what the injected jitter draws: every wait is its period times this


class Stop(Exception):
    """Ends the loop from the test's clock (the loop itself never ends)."""


@dataclass
class Clock:
    """The loop's sleep and jitter: records waits, runs a hook at a given wait, stops."""

    stop_at: int
    hooks: dict[int, Callable[[], None]] = field(default_factory=dict)
    waits: list[float] = field(default_factory=list)
    draws: list[tuple[float, float]] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.waits.append(round(seconds, 6))
        if len(self.waits) == self.stop_at:
            raise Stop
        self.hooks.get(len(self.waits), lambda: None)()

    def uniform(self, low: float, high: float) -> float:
        self.draws.append((low, high))
        return DRAW


@pytest.fixture
def follow(install_set, capsys):
    """``follow(clock)``: run the loop in this box's environment until the clock stops it;
    returns what it logged."""

    def run(clock: Clock) -> str:
        settings = install_set.read_settings(os.environ, fetching=True)
        console = install_set.Console(json_mode=False, stamped=True)
        console.secrets.add(settings.fleet_key)
        follower = install_set.Follower(settings, console, sleep=clock.sleep,
                                        uniform=clock.uniform)
        with pytest.raises(Stop):
            follower.run()
        said = capsys.readouterr()
        return said.out + said.err

    return run


def boot(contract: ContractLlmao, run_main, doc: dict) -> None:
    """The box as provision.sh leaves it: ``doc`` fetched, applied, reported."""
    contract.intended = doc
    outcome = run_main()
    assert outcome.rc == 0, outcome.err
    contract.seen.clear()
    contract.reported.clear()


def jittered(*periods: float) -> list[float]:
    return [round(period * DRAW, 6) for period in periods]


def lines_of(log: str) -> list[str]:
    """The log without its time stamps."""
    return [line.split(" ", 1)[1] for line in log.splitlines()]


TWO = (server_entry(0), server_entry(1))
CHANGED_ONE = (server_entry(0), server_entry(1, max_model_len=8192))


def test_a_current_revision_is_a_cheap_check_and_nothing_more(box, contract, run_main, follow):
    boot(contract, run_main, following(*TWO, revision="rev-1"))
    calls = box.ctl_calls()
    clock = Clock(stop_at=3)
    log = follow(clock)
    assert clock.waits == jittered(30, 30, 30)
    assert set(clock.draws) == {(0.8, 1.2)}
    assert contract.steps() == [f"GET {CONFIG} (check)"] * 2
    assert all(seen.headers["if-none-match"] == '"rev-1"' for seen in contract.seen)
    assert lines_of(log)[1:] == ["checked: revision rev-1 is current"] * 2
    assert box.ctl_calls() == calls


def test_a_new_revision_waits_for_its_turn_then_restarts_only_what_changed(
        box, contract, run_main, follow):
    boot(contract, run_main, following(*TWO, revision="rev-1"))
    untouched = box.program("model-0").stat().st_ino
    follower_file = box.conf / "llmao-follow.conf"
    follower_before = (follower_file.stat().st_ino, follower_file.read_bytes())
    contract.intended = following(*CHANGED_ONE, revision="rev-2")
    box.supervisorctl(status=0, update_says="model-1: stopped\nmodel-1: updated process group\n")
    contract.turns = [turn(False, why="max_unavailable of served-1 reached"),
                      turn(True, "draining"), turn(True, "draining"), turn(True, "drained"),
                      turn(True, "drained", apply=True)]
    clock = Clock(stop_at=6)
    log = follow(clock)

    assert clock.waits == [*jittered(30, 30), 2, 2, 2, *jittered(30)]
    assert contract.steps() == [f"GET {CONFIG} (check)", *[f"POST {TURN}"] * 5,
                                f"GET {CONFIG}", f"POST {APPLIED}"]
    assert contract.turn_requests() == [{"revision": "rev-2", "servers": ["model-1"]}] * 5
    assert contract.reported == ["rev-2"]
    assert json.loads(box.record.read_text())["revision"] == "rev-2"
    assert box.program("model-0").stat().st_ino == untouched
    assert "--max-model-len 8192" in box.program("model-1").read_text()
    assert (follower_file.stat().st_ino, follower_file.read_bytes()) == follower_before
    assert box.ctl_calls()[-2:] == ["reread", "update"] and len(box.ctl_calls()) == 4
    said = lines_of(log)
    for step in ("checked: revision rev-2 is intended, rev-1 is applied",
                 "turn: asking for revision rev-2 (servers model-1)",
                 "turn: waiting for revision rev-2: max_unavailable of served-1 reached",
                 "turn: granted for revision rev-2 (draining): waiting for the drain",
                 "turn: granted for revision rev-2 (drained): waiting for the drain",
                 "turn: granted for revision rev-2, drained: apply",
                 "applying revision rev-2", "reported revision rev-2 to llmao",
                 "applied revision rev-2"):
        assert said.count(step) == 1, (step, said)
    assert said.index("applying revision rev-2") < said.index("applied revision rev-2")
    assert "supervisorctl update: model-1: stopped; model-1: updated process group" in said
    assert all(STAMP.match(line) for line in log.splitlines()), "one stamped line per step"
    assert FLEET_KEY not in log and "sk-vllm-" not in log


def test_a_revision_that_moves_on_during_the_turn_starts_over(box, contract, run_main, follow):
    boot(contract, run_main, following(*TWO, revision="rev-1"))
    contract.intended = following(*CHANGED_ONE, revision="rev-2")
    contract.turns = [turn(True, "draining")]

    def operator_changes_it_again() -> None:
        contract.intended = following(server_entry(0, max_model_len=4096), server_entry(1),
                                      revision="rev-3")
        contract.turns = [turn(True, "drained", apply=True)]

    clock = Clock(stop_at=4, hooks={2: operator_changes_it_again})
    log = follow(clock)
    assert [asked["revision"] for asked in contract.turn_requests()] == ["rev-2", "rev-2",
                                                                          "rev-3"]
    assert contract.turn_requests()[-1]["servers"] == ["model-0"]
    assert contract.reported == ["rev-3"]
    assert "turn: revision rev-2 is no longer intended (409): checking again" in lines_of(log)
    assert "applying revision rev-2" not in lines_of(log)


def test_a_revision_that_changes_no_program_is_applied_without_a_turn(
        box, contract, run_main, follow):
    boot(contract, run_main, following(*TWO, revision="rev-1"))
    programs = {path.name: path.stat().st_ino for path in box.conf.iterdir()}
    contract.intended = following(*TWO, revision="rev-2", drain_s=60.0)
    log = follow(Clock(stop_at=2))
    assert contract.steps() == [f"GET {CONFIG} (check)", f"GET {CONFIG}", f"POST {APPLIED}"]
    assert "plan: revision rev-2 changes no server program: applying without a turn" \
        in lines_of(log)
    assert {path.name: path.stat().st_ino for path in box.conf.iterdir()} == programs
    record = json.loads(box.record.read_text())
    assert record["revision"] == "rev-2" and record["rollout"]["drain_s"] == 60.0


def test_a_revision_without_rollout_removes_the_follower_last(box, contract, run_main, follow):
    boot(contract, run_main, following(*TWO, revision="rev-1"))
    assert (box.conf / "llmao-follow.conf").exists()
    calls = len(box.ctl_calls())
    contract.intended = {key: value for key, value in following(*TWO, revision="rev-2").items()
                         if key != "rollout"}
    log = follow(Clock(stop_at=2))
    assert not (box.conf / "llmao-follow.conf").exists()
    assert box.program("model-0").exists() and box.program("model-1").exists()
    assert box.ctl_calls()[calls:] == ["reread", "update", "reread", "update"]
    said = lines_of(log)
    removed = f"removed {box.conf / 'llmao-follow.conf'}"
    assert said.index("reported revision rev-2 to llmao") < said.index(removed), \
        "handing over its own removal stops the follower: it must come after the report"


def test_an_unreachable_llmao_is_one_line_per_error_and_a_bounded_backoff(
        box, contract, run_main, follow, monkeypatch):
    boot(contract, run_main, following(*TWO, revision="rev-1"))
    port = closed_port()
    monkeypatch.setenv("LLMAO_URL", f"http://127.0.0.1:{port}")
    clock = Clock(stop_at=8)
    log = follow(clock)
    assert clock.waits == jittered(30, 60, 120, 240, 480, 900, 900, 900)
    errors = [line for line in lines_of(log) if line.startswith("error: ")]
    assert len(errors) == 7 and len(log.splitlines()) == 8
    assert errors[0].startswith(f"error: GET http://127.0.0.1:{port}{CONFIG}: no answer after "
                                "1 attempts: ")
    assert errors[0].endswith("; next check in 66 s") and errors[-1].endswith("in 990 s")
    assert "Traceback" not in log and FLEET_KEY not in log


def test_a_refusal_is_one_line_and_the_loop_goes_on(box, follow, monkeypatch):
    with FakeLlmao().serve() as llmao:
        point_box_at(llmao, monkeypatch)
        llmao.script(CONFIG, (403, {"error": {"message": "bad key"}}))
        clock = Clock(stop_at=3)
        log = follow(clock)
    assert len(llmao.requests_to(CONFIG)) == 2
    assert "if-none-match" not in llmao.seen[0].headers, "no applied revision to name"
    assert clock.waits == jittered(60, 120, 240), \
        "without an applied record the period is the fallback, 60 s"
    errors = [line for line in lines_of(log) if line.startswith("error: ")]
    assert errors == ["error: llmao refused the fleet key (403): the template's FLEET_KEY does "
                      "not match llmao's fleet.key; next check in 132 s",
                      "error: llmao refused the fleet key (403): the template's FLEET_KEY does "
                      "not match llmao's fleet.key; next check in 264 s"]


def test_a_malformed_turn_answer_is_an_error_line_not_a_traceback(
        box, contract, run_main, follow):
    boot(contract, run_main, following(*TWO, revision="rev-1"))
    contract.intended = following(*CHANGED_ONE, revision="rev-2")
    contract.turns = [{"granted": "yes"}]
    log = follow(Clock(stop_at=2))
    assert any(line.startswith(f"error: llmao's answer from {contract.url}{TURN} is not a turn")
               for line in lines_of(log))
    assert contract.reported == [] and json.loads(box.record.read_text())["revision"] == "rev-1"


def test_a_failed_certificate_renewal_is_one_line_and_the_check_goes_on(
        box, contract, run_main, follow):
    """The test box has no openssl command: the renewal fails as it would on any error."""
    boot(contract, run_main, following(*TWO, revision="rev-1"))
    record = json.loads(box.record.read_text())
    record["tls"] = {"ca_sha256": "ab" * 32, "leaf_days": 7}
    box.record.write_text(json.dumps(record))
    contract.intended = following(*TWO, revision="rev-2")
    log = follow(Clock(stop_at=2))
    said = lines_of(log)
    assert said[1] == "certificate: no certificate yet: asking llmao for one"
    assert said[2].startswith("error: certificate renewal failed: ")
    assert said[2].endswith("; checking for a new revision anyway")
    assert contract.steps()[0] == f"GET {CONFIG} (check)"
    assert json.loads(box.record.read_text())["revision"] == "rev-2", \
        "the revision that fixes the box still lands"
    assert "Traceback" not in log
