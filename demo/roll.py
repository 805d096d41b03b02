"""`make demo-roll`: change a model's max_model_len in the running demo and watch it roll.

The change is the one an operator makes: edit the demo's models.yaml, send llmao-server a
SIGHUP (it reads its files again and serves the new revision), and let the boxes follow.
Before the SIGHUP it prints every server that will restart and why, as each box's own program
answers a dry run of the new assignment (``restarts.py``): a box whose servers share a card
restarts the neighbours of the changed model too, their memory shares having moved. The
progress is read from llmao's admin API and told with the core's rollout rows, the lines
reconcile prints, until every box of the model runs the new revision and a reconcile pass that
began after the last box applied it finds the model's servers Healthy.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.http_json import HttpCallError
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import State
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    LlmaoAdmin,
    LlmaoAdminError,
    ServerObservations,
)
from ansible_collections.llmao.fleet.plugins.module_utils.rollout_status import rollout_rows
from rig.fleet_files import WrittenFleet

from .paths import demo_dir, shown
from .processes import Record
from .restarts import ask_container_box, ask_local_box, what_restarts
from .run import running

ROLL_TIMEOUT_S = 300.0
POLL_S = 2.0
# A context at or below this doubles, above it halves: running the target again rolls back.
HALVE_ABOVE = 4096


class NoChange(RuntimeError):
    """models.yaml has no such model, or no max_model_len to change."""


def changed_max_model_len(text: str, model: str | None) -> tuple[str, str, int, int]:
    """``text`` (a models.yaml) with ``model``'s max_model_len halved (doubled when small),
    and the model's name, the old and the new value. The first model with one when ``model``
    is None. A text edit, so the file's comments and layout stay as the operator wrote them."""
    entries = list(re.finditer(r"^\s*- model_name:\s*(\S+)\s*$", text, re.MULTILINE))
    for index, entry in enumerate(entries):
        if model is not None and entry.group(1) != model:
            continue
        end = entries[index + 1].start() if index + 1 < len(entries) else len(text)
        found = re.compile(r"^(\s*max_model_len:\s*)(\d+)\s*$", re.MULTILINE).search(
            text, entry.end(), end)
        if found is None:
            if model is not None:
                raise NoChange(f"model {model} has no max_model_len in models.yaml")
            continue
        old = int(found.group(2))
        new = old // 2 if old > HALVE_ABOVE else old * 2
        return (text[:found.start(2)] + str(new) + text[found.end(2):], entry.group(1), old,
                new)
    raise NoChange(f"no model {model} in models.yaml" if model else
                   "no model of models.yaml has a max_model_len")


def model_boxes(fleet: Fleet, model: str) -> dict[str, str]:
    """Each box serving ``model``, with the revision it is meant to run."""
    return {box: assignment.revision for box, assignment in fleet.assignments.items()
            if any(server.model_name == model for server in assignment.servers)}


def healthy(fleet: Fleet, model: str, seen: ServerObservations) -> bool:
    return all(str((seen.verdicts.get(server.id) or {}).get("state")) ==
               State.HEALTHY.value
               for server in fleet.servers() if server.model_name == model)


def watch(admin: LlmaoAdmin, fleet: Fleet, model: str, timeout_s: float = ROLL_TIMEOUT_S) -> int:
    """Print where the model's rollout stands whenever it changes, until it is done (0),
    paused (1) or not done within ``timeout_s`` (1)."""
    targets = model_boxes(fleet, model)
    began = time.monotonic()
    applied_by: float | None = None  # llmao's time when every box had applied the revision
    last = ""
    while time.monotonic() - began < timeout_s:
        seen = admin.observations()
        states = {key: str(verdict.get("state")) for key, verdict in seen.verdicts.items()}
        rows = [row for row in rollout_rows(fleet, seen.turns, seen.applied, states)
                if row.model == model]
        line = rows[0].line() if rows else f"{model}: every box on the new revision"
        if line != last:
            print(f"[{time.monotonic() - began:4.0f} s] {line}", flush=True)
            last = line
        if rows and rows[0].paused is not None:
            print("the rollout is paused: fix models.yaml and run this again, or see the "
                  "dashboard's Rollout panel", file=sys.stderr)
            return 1
        if all(seen.applied.get(box) == revision for box, revision in targets.items()):
            applied_by = applied_by or seen.now
            if seen.pass_at is not None and seen.pass_at > applied_by \
                    and healthy(fleet, model, seen):
                print(f"rolled: {len(targets)} box(es) of {model} on the new revision and "
                      f"Healthy in {time.monotonic() - began:.0f} s", flush=True)
                return 0
        time.sleep(POLL_S)
    print(f"not rolled within {timeout_s:.0f} s: the dashboard's Rollout panel and "
          f"{shown(demo_dir() / 'logs')}/ say where it stands", file=sys.stderr)
    return 1


def tell_restarts(before: Fleet, after: Fleet, record: Record) -> None:
    """Print every server the change restarts and why, each box's program asked before
    llmao serves the change (a box that shares a card restarts its other servers too)."""
    ask = ask_container_box(record.containers) if record.mode == "container" else \
        ask_local_box(demo_dir() / "boxes")
    print("what restarts (each box's own program asked, with the new assignment, in a dry run):",
          flush=True)
    for line in what_restarts(before, after, ask):
        print(f"  {line}", flush=True)


def roll(model: str | None = None) -> int:
    """Change the model's max_model_len in the running demo, reload llmao-server, watch."""
    folder = demo_dir()
    record = Record.load(folder / "pids.json")
    if record is None or not running(record):
        print("no llmao demo is running: start one with `make demo`, then run "
              "`make demo-roll` again", file=sys.stderr)
        return 2
    server = next(entry for entry in record.processes if entry.role == "llmao-server")
    files = WrittenFleet(folder / "fleet")
    before = files.models_path.read_text()
    try:
        text, name, old, new = changed_max_model_len(before, model)
    except NoChange as exc:
        print(f"demo-roll: {exc} ({shown(files.models_path)})", file=sys.stderr)
        return 2
    running_fleet = files.load()
    files.models_path.write_text(text)
    fleet = files.load()  # what llmao-server will load: a file it refuses stops us here
    tell_restarts(running_fleet, fleet, record)
    os.kill(server.pid, signal.SIGHUP)
    print(f"{name}: max_model_len {old} -> {new} in {shown(files.models_path)}; "
          f"kill -HUP {server.pid} (llmao-server reads its files again)", flush=True)
    os.environ["SSL_CERT_FILE"] = str(folder / "tls" / "ca.pem")  # the demo's own CA
    try:
        return watch(LlmaoAdmin.from_settings(fleet.settings), fleet, name)
    except (HttpCallError, LlmaoAdminError) as exc:
        print(f"demo-roll: llmao's admin API: {exc}", file=sys.stderr)
        return 1
