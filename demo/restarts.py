"""What a roll restarts, and why, asked of each box before llmao serves the change.

A box restarts a server when the Supervisor program it would write for the new assignment
differs from the one it runs: ``supervisorctl update`` restarts a rewritten program and nothing
else. That is not only the servers of the changed model: servers that share a card divide its
memory in proportion to their ``max_model_len`` (the box program's divide step), so changing
one model's context moves its neighbours' ``--gpu-memory-utilization`` too, and they restart.
Rather than copy that rule here, the box's own program answers: ``install_set.py --payload -
--dry-run --json`` with the new assignment writes nothing and lists each program as added,
updated, removed or unchanged, against the box's own cards and the programs it runs. The why
is read from the two assignments (the server's own recipe changed) and from each program's
before and after (its memory share, its cards).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import (
    BoxAssignment,
    IntendedServer,
)
from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import FOLLOW_PROGRAM
from rig.dockerd import docker

from .boxes import CONTAINER_PROGRAM_DIR, INSTALL_SET, box_program_env, boxes_in

DRY_RUN = ("--payload", "-", "--dry-run", "--json")
ASK_TIMEOUT_S = 60.0
UTILIZATION_RE = re.compile(r"--gpu-memory-utilization (\S+)")
DEVICES_RE = re.compile(r'CUDA_VISIBLE_DEVICES="([0-9,]+)"')

# Asks one box's program about a payload; its JSON answer.
AskBox = Callable[[str, bytes], dict[str, Any]]
# A server of the box before and after the change (None where it is not).
ServerPair = tuple[IntendedServer | None, IntendedServer | None]


class BoxNotAsked(RuntimeError):
    """The box's program did not answer the dry run; says why."""


def answer_of(returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    """The JSON object a dry run printed, or BoxNotAsked with the program's own message."""
    try:
        answer = json.loads(stdout)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or answer.get("failed") or returncode != 0:
        said = answer.get("msg") if isinstance(answer, dict) else None
        lines = (said or stderr or stdout or f"exit {returncode}").strip().splitlines()
        raise BoxNotAsked(lines[-1] if lines else f"exit {returncode}")
    return answer


def ask_local_box(boxes_dir: Path) -> AskBox:
    """Run the box program on a local box of the demo, in the environment it boots with."""
    def ask(box: str, payload: bytes) -> dict[str, Any]:
        folder = boxes_dir / box
        done = subprocess.run(["python3", str(INSTALL_SET), *DRY_RUN], input=payload,
                              env=box_program_env(folder, box), cwd=folder,
                              capture_output=True, timeout=ASK_TIMEOUT_S, check=False)
        return answer_of(done.returncode, done.stdout.decode(errors="replace"),
                         done.stderr.decode(errors="replace"))
    return ask


def ask_container_box(containers: list[str]) -> AskBox:
    """Run the box program inside a container box of the demo, where provision.sh put it."""
    by_box = boxes_in(containers)

    def ask(box: str, payload: bytes) -> dict[str, Any]:
        done = docker("exec", "--interactive", by_box[box], "python3",
                      f"{CONTAINER_PROGRAM_DIR}/install_set.py", *DRY_RUN, input=payload,
                      check=False, timeout=ASK_TIMEOUT_S)
        return answer_of(done.returncode, done.stdout.decode(errors="replace"),
                         done.stderr.decode(errors="replace"))
    return ask


@dataclass(frozen=True)
class Program:
    """One server's program as the dry run told it: what happens to its file, its text
    before and after (the bearer masked by the box program)."""

    name: str
    change: str  # added, updated, removed, unchanged
    before: str
    after: str

    def utilization(self, text: str) -> str | None:
        found = UTILIZATION_RE.search(text)
        return found.group(1) if found else None

    def cards(self) -> frozenset[int] | None:
        """The cards it runs on; None on a box of one card (the box writes none then)."""
        found = DEVICES_RE.search(self.after or self.before)
        return frozenset(map(int, found.group(1).split(","))) if found else None


def programs_of(answer: Mapping[str, Any]) -> list[Program]:
    """The servers' programs of a dry run's answer (the follow program left out)."""
    files = {Path(entry["path"]).name: entry for entry in answer.get("diff", [])}
    programs = []
    for entry in answer.get("programs", []):
        if entry["name"] == FOLLOW_PROGRAM:
            continue
        diff = files.get(f"llmao-{entry['name']}.conf", {})
        programs.append(Program(entry["name"], entry["file"], diff.get("before", ""),
                                diff.get("after", "")))
    return programs


def recipe_change(before: IntendedServer | None, after: IntendedServer | None) -> str | None:
    """What changed in a server's own part of the assignment, without its bearer; None."""
    if before is None or after is None:
        return None
    old, new = before.public_view(), after.public_view()
    changed = [f"{key} {old.get(key)} -> {new.get(key)}" for key in sorted(old.keys() | new)
               if old.get(key) != new.get(key) and key != "args"]
    changed += ["args"] if old.get("args") != new.get("args") else []
    changed += ["its bearer"] if before.api_key != after.api_key else []
    return ", ".join(changed) or None


def shares_with(program: Program, others: list[Program]) -> list[Program]:
    """The other programs on a card of ``program``'s (all of them on a box of one card)."""
    mine = program.cards()
    return [other for other in others if other.name != program.name
            and (mine is None or other.cards() is None or mine & (other.cards() or set()))]


def label_of(name: str, server: IntendedServer | None) -> str:
    """``qwen :8002``, or ``qwen-a (qwen3-8b) :8002`` when the server is named apart."""
    if server is None:
        return name
    model = "" if server.model_name == name else f" ({server.model_name})"
    return f"{name}{model} :{server.listen_port}"


def card_words(cards: frozenset[int] | None) -> str:
    if cards is None:
        return "the box's card"
    return f"card{'s' if len(cards) > 1 else ''} {', '.join(map(str, sorted(cards)))}"


def why(program: Program, servers: Mapping[str, ServerPair], programs: list[Program]) -> str:
    """One server's line: whether it starts, stops or restarts, and why."""
    before, after = servers.get(program.name, (None, None))
    label = label_of(program.name, after or before)
    if program.change == "added":
        return f"{label} starts (new on this box)"
    if program.change == "removed":
        return f"{label} stops (no longer in the box's assignment)"
    own = recipe_change(before, after)
    if own:
        return f"{label} restarts (its recipe changed: {own})"
    old, new = program.utilization(program.before), program.utilization(program.after)
    share = f"its --gpu-memory-utilization {old} -> {new}" if old != new else \
        "its program changed"
    sharers = [other.name for other in shares_with(program, programs)
               if other.change in ("added", "removed")
               or recipe_change(*servers.get(other.name, (None, None)))]
    if not sharers:
        return f"{label} restarts ({share})"
    return (f"{label} restarts (it shares {card_words(program.cards())} with "
            f"{', '.join(sharers)}, whose recipe changed: {share})")


def restart_lines(box: str, before: BoxAssignment | None, after: BoxAssignment,
                  answer: Mapping[str, Any]) -> list[str]:
    """Every server of the box that starts, stops or restarts under ``after``, and why; or
    one line saying that none does."""
    old = {server.name: server for server in (before.servers if before else ())}
    new = {server.name: server for server in after.servers}
    servers: dict[str, ServerPair] = {name: (old.get(name), new.get(name))
                                      for name in old.keys() | new}
    programs = programs_of(answer)
    lines = [f"box {box}: {why(program, servers, programs)}" for program in programs
             if program.change != "unchanged"]
    return lines or [f"box {box}: new revision, no server restarts (its programs are the same)"]


def what_restarts(before: Fleet, after: Fleet, ask: AskBox) -> list[str]:
    """The lines for every box whose assignment changes, each box asked in turn."""
    lines = []
    for box, assignment in after.assignments.items():
        previous = before.assignments.get(box)
        if previous is not None and previous.revision == assignment.revision:
            continue
        try:
            answer = ask(box, assignment.body)
        except (BoxNotAsked, OSError, subprocess.SubprocessError) as exc:
            lines.append(f"box {box}: its program could not say what restarts: {exc}")
            continue
        lines += restart_lines(box, previous, assignment, answer)
    return lines
