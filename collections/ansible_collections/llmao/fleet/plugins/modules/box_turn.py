#!/usr/bin/python
# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module ``llmao.fleet.box_turn``: a pushed box's rollout turn, taken and seen through."""

from __future__ import annotations

DOCUMENTATION = r"""
module: box_turn
short_description: Take a box's rollout turn before a push, and see it through after
version_added: 0.2.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - The push path's side of a rolling change (C(playbooks/provision.yml)). A box whose servers
    are about to change first gets its turn from llmao, so that its routes are gone from LiteLLM
    and the requests in flight have finished before anything restarts; after the push, llmao
    learns that the box applied the revision, and the task waits until reconcile saw every
    server of the turn Healthy and routed again.
  - With I(state=drained), asks for the box's turn (C(POST /admin/api/turns/take), admin token)
    for I(servers) and asks again every I(poll_interval) seconds until llmao answers that the
    box may apply (reconcile moved the turn to C(drained) and C(rollout.drain_s) has passed).
    The same rules as a following box's own C(POST /vllm/turn) apply; a model whose rollout is
    paused gets no turn.
  - With I(state=done), reports I(applied) as the controller (C(POST
    /admin/api/boxes/<box>/applied), admin token), which starts the box's servers' Loading
    window as a pull box's fetch does; it never speaks as the box, so it needs no box token.
    When the box holds a turn for the revision, it then waits (C(GET
    /admin/api/boxes/<box>/turn)) until reconcile moved the turn to C(done), and fails with
    the turn's reason when it C(failed).
  - The revision is the one llmao's files on the controller give the box; llmao must serve the
    same files (reload it after a change) or it refuses the turn as stale.
  - A wait longer than I(wait_timeout) fails, naming the turn's phase and llmao's reason.
  - Reports a change when it took a new turn or reported a revision llmao did not know the box
    applied.
  - In check mode nothing is asked or reported; llmao's observations are only read, and the
    result says what the task would do.
extends_documentation_fragment:
  - llmao.fleet.fleet_files
  - llmao.fleet.controller
  - llmao.fleet.llmao_timeout
options:
  box:
    description:
      - The box's name in C(fleet.hosts).
    type: str
    required: true
  state:
    description:
      - C(drained) takes the box's turn and waits until it may apply; C(done) reports the
        applied revision and waits until the turn is done.
    type: str
    choices: [drained, done]
    default: drained
  servers:
    description:
      - With I(state=drained), the names of the box's servers whose programs the push adds,
        rewrites or removes (M(llmao.fleet.box_program) in check mode lists them). When empty, the
        box is drained at once.
    type: list
    elements: str
    default: []
  applied:
    description:
      - With I(state=done), the applied record the box holds after the push (the C(applied)
        result of M(llmao.fleet.box_program)), with C(revision), C(applied_at) and C(servers).
      - Its revision must be the one llmao intends for the box.
    type: dict
  wait_timeout:
    description:
      - Seconds to wait for the turn (I(state=drained)) or for it to be done (I(state=done)).
    type: float
    default: 600
  poll_interval:
    description:
      - Seconds between two asks to llmao while waiting.
    type: float
    default: 2
notes:
  - Reconcile (C(playbooks/reconcile.yml), on a timer) moves the turns on; without it running a
    wait ends in I(wait_timeout).
seealso:
  - module: llmao.fleet.box_program
  - module: llmao.fleet.fleet_observe
"""

EXAMPLES = r"""
- name: Take the box's turn and wait while llmao drains it
  llmao.fleet.box_turn:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
    box: "{{ llmao_box }}"
    servers: [gemma-8001]
  delegate_to: localhost

- name: Report the applied revision and wait until the box is routed again
  llmao.fleet.box_turn:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
    box: "{{ llmao_box }}"
    state: done
    applied: "{{ programs.applied }}"
  delegate_to: localhost
"""

RETURN = r"""
box:
  description: The box, as C(fleet.hosts) names it.
  returned: success
  type: str
revision:
  description: The revision llmao intends for the box (a content hash, no secret).
  returned: success
  type: str
  sample: 5e0c9a1f2b3d4e6f
phase:
  description: The phase of the box's turn for the revision when the task ended (null without
    one); C(drained) or C(done) on success.
  returned: success
  type: str
  sample: drained
apply:
  description: Whether llmao lets the box apply now (I(state=drained)).
  returned: success
  type: bool
drain_s:
  description: The drain llmao waits after the box's routes are gone (I(state=drained)).
  returned: success
  type: float
why:
  description: llmao's reason for the last wait, or the turn's own reason.
  returned: always
  type: str
waited:
  description: Seconds the task waited for llmao and reconcile.
  returned: success
  type: float
msg:
  description: One line saying what happened or would happen.
  returned: always
  type: str
"""

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import (
    TIMEOUT_OPTION,
    load_reconcile_fleet,
    module_args,
)
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    LlmaoAdmin,
    LlmaoAdminError,
    TurnAnswer,
)
from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Phase, Turn

OPTIONS: dict[str, dict[str, Any]] = {
    "box": {"type": "str", "required": True},
    "state": {"type": "str", "choices": ["drained", "done"], "default": "drained"},
    "servers": {"type": "list", "elements": "str", "default": []},
    "applied": {"type": "dict"},
    "wait_timeout": {"type": "float", "default": 600.0},
    "poll_interval": {"type": "float", "default": 2.0},
    **TIMEOUT_OPTION,
}
RULES = {"required_if": [("state", "done", ("applied",))]}
STALL_HINT = "is reconcile running? It moves turns on (playbooks/reconcile.yml)"


class TurnUnfinished(RuntimeError):
    """The turn cannot be seen through; ``phase`` and ``why`` are the turn's as llmao says.

    Not the core's ``rollout.TurnError`` (a turn that may not move so): this one is the
    module's, a turn that failed, stalled, or whose push did not apply.
    """

    def __init__(self, message: str, phase: str | None = None, why: str = "") -> None:
        super().__init__(message)
        self.phase = phase
        self.why = why


@dataclass(frozen=True)
class Waiting:
    """How long to wait and how often to ask; the clock and the pause are the test's to set."""

    timeout_s: float
    poll_s: float
    clock: Callable[[], float] = time.monotonic
    pause: Callable[[float], None] = time.sleep


def still_waiting(box: str, revision: str, phase: str | None, why: str,
                  waiting: Waiting) -> TurnUnfinished:
    """The timeout's error: where the turn stands and llmao's own reason."""
    where = f"still {phase}" if phase else "not granted"
    return TurnUnfinished(f"{box}'s turn for revision {revision} is {where} after "
                          f"{waiting.timeout_s:.0f} s: {why or 'llmao gave no reason'}; "
                          f"{STALL_HINT}", phase, why)


def wait_drained(admin: LlmaoAdmin, box: str, revision: str, servers: Sequence[str],
                 waiting: Waiting) -> tuple[TurnAnswer, float]:
    """Ask for the turn until llmao lets the box apply; the last answer and the wait."""
    began = waiting.clock()
    while True:
        answer = admin.take_turn(box, revision, servers)
        waited = waiting.clock() - began
        if answer.apply:
            return answer, waited
        if answer.phase == Phase.FAILED:
            raise TurnUnfinished(f"{box}'s turn for revision {revision} failed: {answer.why}",
                                 answer.phase, answer.why)
        if waited >= waiting.timeout_s:
            raise still_waiting(box, revision, answer.phase, answer.why, waiting)
        waiting.pause(waiting.poll_s)


def box_turn(admin: LlmaoAdmin, box: str, revision: str) -> Turn | None:
    """The box's stored turn for ``revision``, if it has one."""
    turn = admin.box_turn(box)
    return turn if turn is not None and turn.revision == revision else None


def wait_done(admin: LlmaoAdmin, box: str, revision: str,
              waiting: Waiting) -> tuple[Turn | None, float]:
    """Wait until the box's turn for ``revision`` is done (None: the box holds no turn)."""
    began = waiting.clock()
    while True:
        turn = box_turn(admin, box, revision)
        waited = waiting.clock() - began
        if turn is None or turn.phase is Phase.DONE:
            return turn, waited
        if turn.phase is Phase.FAILED:
            raise TurnUnfinished(f"{box}'s turn for revision {revision} failed: {turn.why}",
                                 turn.phase.value, turn.why)
        if waited >= waiting.timeout_s:
            raise still_waiting(box, revision, turn.phase.value, turn.why, waiting)
        waiting.pause(waiting.poll_s)


def report_applied(admin: LlmaoAdmin, box: str, revision: str,
                   record: Mapping[str, Any]) -> None:
    """Tell llmao the box applied ``record``, as the controller.

    llmao starts the Loading window of the box's servers from this report, as it does from
    a pull box's fetch: without it, a pushed server restarting would be judged a Healthy
    server failing, not one starting up. llmao refuses a revision it does not intend. The
    record's cards and placement go along, as a pull box reports them.
    """
    if record.get("revision") != revision:
        raise TurnUnfinished(f"{box} records revision {record.get('revision') or 'none'}, "
                             f"llmao intends {revision}: the push did not apply it")
    report = {"revision": revision, "applied_at": record.get("applied_at"),
              "servers": [{key: server.get(key) for key in ("name", "port",
                                                            "served_model_name")}
                          for server in record.get("servers") or []
                          if isinstance(server, Mapping)]}
    # The box's cards and the placement, as the box program recorded them (llmao checks them).
    report.update((key, record[key]) for key in ("cards", "placement") if key in record)
    admin.report_applied(box, report)


def take(module: AnsibleModule, admin: LlmaoAdmin, box: str, revision: str,
         waiting: Waiting) -> dict[str, Any]:
    """``state=drained``: the turn taken and drained (in check mode, what is stored)."""
    servers = module.params["servers"]
    if module.check_mode:
        turn = box_turn(admin, box, revision)
        return {"changed": turn is None, "phase": turn.phase.value if turn else None,
                "apply": False, "why": turn.why if turn else "", "waited": 0.0,
                "msg": f"would ask for {box}'s turn for revision {revision} "
                       f"({', '.join(servers) or 'no server to drain'})"}
    turn = box_turn(admin, box, revision)
    answer, waited = wait_drained(admin, box, revision, servers, waiting)
    return {"changed": turn is None or not turn.active, "phase": answer.phase,
            "apply": answer.apply, "drain_s": answer.drain_s, "why": answer.why,
            "waited": round(waited, 1),
            "msg": f"{box} is drained for revision {revision} after {waited:.0f} s"}


def see_through(module: AnsibleModule, admin: LlmaoAdmin, box: str, revision: str,
                waiting: Waiting) -> dict[str, Any]:
    """``state=done``: the applied revision reported and the turn, if any, done."""
    record = module.params["applied"]
    known = admin.observations().applied.get(box) == revision
    if module.check_mode:
        turn = box_turn(admin, box, revision)
        return {"changed": not known, "phase": turn.phase.value if turn else None,
                "why": turn.why if turn else "", "waited": 0.0,
                "msg": f"would report that {box} applied revision {revision}"}
    if not known:
        report_applied(admin, box, revision, record)
    turn, waited = wait_done(admin, box, revision, waiting)
    done = "its turn is done: Healthy and routed" if turn else "it held no turn"
    return {"changed": not known, "phase": turn.phase.value if turn else None,
            "why": turn.why if turn else "", "waited": round(waited, 1),
            "msg": f"{box} applied revision {revision}; {done}"}


def main() -> None:
    module = AnsibleModule(**module_args(OPTIONS, **RULES))
    fleet = load_reconcile_fleet(module)
    params = module.params
    box = params["box"]
    assignment = fleet.assignment(box)
    if assignment is None:
        module.fail_json(msg=f"{box} is not in fleet.hosts: it has no assignment to roll",
                         why="")
    waiting = Waiting(params["wait_timeout"], params["poll_interval"])
    try:
        admin = LlmaoAdmin.from_settings(fleet.settings, params["timeout"])
        if params["state"] == "drained":
            result = take(module, admin, assignment.box, assignment.revision, waiting)
        else:
            result = see_through(module, admin, assignment.box, assignment.revision, waiting)
    except TurnUnfinished as exc:
        module.fail_json(msg=str(exc), box=assignment.box, revision=assignment.revision,
                         phase=exc.phase, why=exc.why)
    except LlmaoAdminError as exc:
        module.fail_json(msg=f"{exc}: {assignment.box}'s turn could not be "
                             f"{params['state']}", why="")
    module.exit_json(box=assignment.box, revision=assignment.revision, **result)


if __name__ == "__main__":
    main()
