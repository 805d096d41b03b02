"""What an assignment changes on disk, worked out before anything is touched.

The plan compares the wanted programs and the applied record with ours on disk (a
foreign file in the way is refused), so a dry run shows exactly what a run writes and
an unchanged assignment writes nothing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import FOLLOW_PROGRAM

from .assignment import Assignment
from .box_files import FOLLOW_FILE, MARKER, PROGRAM_GLOB, atomic_write, program_path
from .errors import Refused
from .placement import NO_PLACEMENT, Placement
from .programs import program_name, render_follow_program, render_program
from .settings import Settings


@dataclass(frozen=True)
class FileChange:
    """One file to write (``after``) or remove (``after`` is None)."""

    path: Path
    before: str | None
    after: str | None
    mode: int = 0o600


@dataclass(frozen=True)
class ProgramStatus:
    """One Supervisor program and what happens to its file: added, updated, removed, unchanged."""

    name: str
    file: str


@dataclass
class Plan:
    programs: list[FileChange] = field(default_factory=list)
    record: FileChange | None = None
    unchanged: list[Path] = field(default_factory=list)
    applied_at: str = ""
    previous: dict[str, Any] | None = None
    statuses: list[ProgramStatus] = field(default_factory=list)

    @property
    def changes(self) -> list[FileChange]:
        return self.programs + ([self.record] if self.record else [])

    def changing_servers(self) -> list[str]:
        """The servers whose programs this plan adds, rewrites or removes (not the follower)."""
        return [status.name for status in self.statuses
                if status.file != "unchanged" and status.name != FOLLOW_PROGRAM]


def is_ours(text: str) -> bool:
    return text.split("\n", 1)[0] == MARKER


def read_ours(conf_dir: Path) -> dict[Path, str]:
    """The program files an earlier run wrote (marker on the first line), by path."""
    ours = {}
    if conf_dir.is_dir():
        for path in sorted(conf_dir.glob(PROGRAM_GLOB)):
            text = path.read_text(encoding="utf-8", errors="replace")
            if is_ours(text):
                ours[path] = text
    return ours


def plan_programs(conf_dir: Path, wanted: dict[Path, str]) -> tuple[list[FileChange], list[Path]]:
    """Compare the wanted programs with ours on disk; a foreign file in the way is refused."""
    ours = read_ours(conf_dir)
    for path in wanted:
        if path.exists() and path not in ours:
            raise Refused(f"{path} exists and was not written by install_set.py (no marker "
                          "line); move it away or rename the server")
    changes = [FileChange(path, ours.get(path), text)
               for path, text in wanted.items() if ours.get(path) != text]
    changes += [FileChange(path, text, None) for path, text in ours.items() if path not in wanted]
    unchanged = [path for path, text in wanted.items() if ours.get(path) == text]
    return changes, unchanged


def program_statuses(programs: Iterable[tuple[str, Path]],
                     changes: Iterable[FileChange]) -> list[ProgramStatus]:
    """Each wanted program (name, file), then each one of an earlier assignment it removes."""
    by_path = {change.path: change for change in changes}
    statuses = []
    for name, path in programs:
        change = by_path.get(path)
        kind = "unchanged" if change is None else "added" if change.before is None else "updated"
        statuses.append(ProgramStatus(name, kind))
    for change in by_path.values():
        gone = program_name(change.before or "") if change.after is None else None
        if gone is not None:
            statuses.append(ProgramStatus(gone, "removed"))
    return statuses


def build_record(assignment: Assignment, memory: Mapping[str, Decimal],
                 applied_at: str, placement: Placement = NO_PLACEMENT) -> dict[str, Any]:
    """What the box applied, without any secret: for operators, for drift checks, and for the
    follow program (the revision it names in its checks, ``rollout.follow_s`` its period)."""
    servers = []
    for server in assignment.servers:
        entry: dict[str, Any] = {"name": server.name, "model": server.model,
                                 "served_model_name": server.served_model_name,
                                 "port": server.port}
        if memory.get(server.name) is not None:
            entry["gpu_memory_utilization"] = float(memory[server.name])
        servers.append(entry)
    record = {"revision": assignment.revision, "host": assignment.host,
              "applied_at": applied_at, "servers": servers,
              **placement.record(with_uuid=True)}
    if assignment.rollout is not None:
        record["rollout"] = dataclasses.asdict(assignment.rollout)
    if assignment.tls is not None:
        record["tls"] = dataclasses.asdict(assignment.tls)
    return record


def record_text(record: Mapping[str, Any]) -> str:
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def read_record(path: Path) -> tuple[str | None, dict[str, Any] | None]:
    """The applied record on disk as (text, data); (None, None) when absent or unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError):
        return None, None
    return text, data if isinstance(data, dict) else None


def plan_record(path: Path, previous: tuple[str | None, dict[str, Any] | None],
                assignment: Assignment, memory: Mapping[str, Decimal], now: str,
                programs_changed: bool, placement: Placement = NO_PLACEMENT
                ) -> tuple[FileChange | None, str]:
    """The record to write, if any, and the applied_at it carries.

    Unchanged programs and the same content keep the first applied_at, so a
    re-run rewrites nothing.
    """
    before, existing = previous
    if existing is not None and not programs_changed:
        kept = build_record(assignment, memory, existing.get("applied_at", ""), placement)
        if kept == existing:
            return None, kept["applied_at"]
    after = record_text(build_record(assignment, memory, now, placement))
    return FileChange(path, before, after, mode=0o644), now


def make_plan(assignment: Assignment, memory: Mapping[str, Decimal], settings: Settings,
              now: str, follow: bool, placement: Placement = NO_PLACEMENT) -> Plan:
    """Every file this assignment needs written or removed, touching nothing yet.

    ``follow``: the follow program is wanted too (a fetched assignment with ``rollout``).
    """
    names = {s.name: program_path(settings.conf_dir, s.name) for s in assignment.servers}
    wanted = {names[s.name]: render_program(s, memory.get(s.name), settings,
                                            placement.devices(s.name),
                                            assignment.tls is not None)
              for s in assignment.servers}
    if follow:
        names[FOLLOW_PROGRAM] = settings.conf_dir / FOLLOW_FILE
        wanted[names[FOLLOW_PROGRAM]] = render_follow_program(settings)
    programs, unchanged = plan_programs(settings.conf_dir, wanted)
    previous = read_record(settings.record_path)
    record, applied_at = plan_record(settings.record_path, previous, assignment, memory, now,
                                     bool(programs), placement)
    if record is None:
        unchanged.append(settings.record_path)
    return Plan(programs=programs, record=record, unchanged=unchanged, applied_at=applied_at,
                previous=previous[1],
                statuses=program_statuses(names.items(), programs))


def apply_changes(changes: Iterable[FileChange]) -> None:
    for change in changes:
        if change.after is None:
            change.path.unlink(missing_ok=True)
        else:
            atomic_write(change.path, change.after, change.mode)
