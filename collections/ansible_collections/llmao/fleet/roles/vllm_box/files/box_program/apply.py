"""Applying an assignment: plan, preflight, write, hand over, record, report.

The one apply of boot, push and follow, so every path leaves byte-identical programs.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import APPLIED_PATH

from .answers import server_message
from .assignment import Assignment
from .box_files import FOLLOW_FILE
from .cards import NO_GPU_BOX, NO_NVIDIA_SMI, disk_free_gb, preflight, query_cards
from .certificate import certificate_due, ensure_certificate, require_certificate_source
from .console import Console, utc_now
from .errors import DoesNotFit, InstallError
from .llmao_api import call_llmao
from .memory import divide_cards
from .placement import NO_PLACEMENT, Placement, place_servers
from .plan import Plan, apply_changes, make_plan
from .settings import Settings
from .supervisor import hand_over


def prepare_directories(settings: Settings) -> None:
    """The folders the programs log to and cache weights in must exist before they start
    (supervisord refuses a program whose log folder is missing: the follower's too)."""
    for folder in (settings.conf_dir, settings.data_dir / "logs", settings.data_dir / "hf",
                   settings.follow_log.parent):
        folder.mkdir(parents=True, exist_ok=True)


def report_applied(settings: Settings, assignment: Assignment, applied_at: str,
                   say: Callable[[str], None], placement: Placement = NO_PLACEMENT
                   ) -> str | None:
    """POST the applied revision to llmao; returns a warning instead of raising."""
    body = json.dumps({
        "revision": assignment.revision,
        "applied_at": applied_at,
        "servers": [{"name": s.name, "port": s.port, "served_model_name": s.served_model_name}
                    for s in assignment.servers],
        **placement.record(),
    }).encode("utf-8")
    try:
        status, answer = call_llmao(settings, "POST", APPLIED_PATH, say, body,
                                    attempts=min(settings.attempts, 3))[:2]
    except InstallError as exc:
        return f"could not report the applied revision: {exc}"
    if not 200 <= status < 300:
        return f"llmao did not take the applied revision ({status}): {server_message(answer)}"
    return None


@dataclass(frozen=True)
class Mode:
    """How one apply runs: what it may touch and whom it tells."""

    fetched: bool  # from llmao: report the revision, and follow when the payload says so
    dry_run: bool = False
    handover: bool = True
    following: bool = False  # run by the follow program: its own program is handed over last
    certificate: Any = None  # the push path's: llmao's answer to the box's certificate request


def plan_assignment(assignment: Assignment, settings: Settings,
                    follow: bool) -> tuple[Placement, Plan, list[str]]:
    """Ask the cards, place the servers, divide the cards, plan every file: the apply's
    planning, and the follow loop's answer to which servers a revision changes. Notes for
    the log come back, unsaid."""
    cards, cards_note = query_cards()
    placement = Placement(cards, place_servers(assignment.servers, cards))
    notes = [cards_note, *placement.notes()]
    if cards is None and any(server.gpus > 1 for server in assignment.servers):
        notes.append("cards unknown: nothing placed; a server spanning several cards runs on "
                     "the first ones vLLM sees")
    memory = divide_cards(assignment.servers, cards, placement.servers)
    if memory:
        notes.append("gpu memory: " + ", ".join(f"{name} {value:f}"
                                                for name, value in memory.items()))
    return placement, make_plan(assignment, memory, settings, utc_now(), follow,
                                placement), notes


def apply_assignment(assignment: Assignment, settings: Settings, console: Console,
                     mode: Mode) -> None:
    """Preflight, divide, write, hand over, record, report: the one apply of boot and follow.

    The follow program is planned only for a fetched assignment that carries ``rollout``.
    """
    console.secrets.update(server.api_key for server in assignment.servers)
    console.say(f"assignment for {assignment.host}: revision {assignment.revision}, "
                f"{len(assignment.servers)} server(s)")
    if not mode.dry_run:
        require_certificate_source(settings, assignment.tls, mode.certificate)
    placement, plan = checked_plan(assignment, settings, console, mode)
    if mode.dry_run:
        show_dry_run(assignment, settings, console, mode, plan)
    else:
        carry_out(assignment, settings, console, mode, placement, plan)


def checked_plan(assignment: Assignment, settings: Settings, console: Console,
                 mode: Mode) -> tuple[Placement, Plan]:
    """The plan, its notes said; when a server's program changes, the preflight too (an
    unchanged assignment already runs and holds what it once checked for)."""
    placement, plan, notes = plan_assignment(assignment, settings,
                                             mode.fetched and assignment.rollout is not None)
    for note in notes:
        console.say(note)
    if plan.changing_servers():
        if assignment.servers and NO_NVIDIA_SMI in notes:
            raise DoesNotFit(NO_GPU_BOX)
        for note in preflight(assignment.servers, placement.cards, placement.servers,
                              disk_free_gb(settings.data_dir), settings.data_dir,
                              plan.previous):
            console.say(note)
    return placement, plan


def show_dry_run(assignment: Assignment, settings: Settings, console: Console, mode: Mode,
                 plan: Plan) -> None:
    """What a run would do, touching nothing: the certificate, each file with its diff, the
    handover."""
    if assignment.tls is not None:
        why = certificate_due(settings, assignment.tls, time.time())
        console.say(f"certificate: {why}: would ask llmao for one" if why
                    else "certificate: the box's is good")
        if why and shutil.which("openssl") is None:
            console.warn("box TLS needs the openssl command and this box has none")
    console.changes(plan.changes, dry_run=True)
    if plan.changes and mode.handover:
        console.say("would run supervisorctl reread and update")
    console.result(plan, assignment.revision, True, settings.record_path)


def carry_out(assignment: Assignment, settings: Settings, console: Console, mode: Mode,
              placement: Placement, plan: Plan) -> None:
    """Write the programs, hand over, write the record, report. When the follow program
    itself applies, a change to its own program is written and handed over last, after the
    report: handing it over stops the process doing it."""
    ensure_certificate(settings, assignment.tls, console.say, mode.certificate)
    own_path = settings.conf_dir / FOLLOW_FILE
    own = [c for c in plan.programs if mode.following and c.path == own_path]
    programs = [c for c in plan.programs if c not in own]
    prepare_directories(settings)
    apply_changes(programs)
    console.changes(programs, dry_run=False)
    handed = None
    if mode.handover and (programs or plan.record):
        handed = hand_over()
        for line in handed.said:
            console.say(line)
    if plan.record:
        apply_changes([plan.record])
        console.changes([plan.record], dry_run=False)
    if mode.fetched:
        warning = report_applied(settings, assignment, plan.applied_at, console.say, placement)
        if warning:
            console.warn(warning)
        else:
            console.say(f"reported revision {assignment.revision} to llmao")
    if own:
        apply_changes(own)
        console.changes(own, dry_run=False)
        if mode.handover:
            for line in hand_over().said:
                console.say(line)
    console.result(plan, assignment.revision, False, settings.record_path, handed)
