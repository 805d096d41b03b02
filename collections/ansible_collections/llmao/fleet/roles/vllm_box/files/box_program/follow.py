"""``--follow``: the follow program's loop, which keeps a box on llmao's intended revision.

It checks with ``If-None-Match``, takes a turn when servers would restart, then
applies as a boot does. Errors are one line each and the loop goes on, backing off.
"""

from __future__ import annotations

import dataclasses
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import CONFIG_PATH

from .apply import Mode, apply_assignment, plan_assignment
from .assignment import Assignment, BoxTls, validate_assignment, validate_rollout, validate_tls
from .certificate import ensure_certificate
from .console import Console
from .errors import InstallError, Refused
from .llmao_api import ask_turn, fetch_assignment
from .plan import read_record
from .settings import Settings

# What may stand between the quotes of an entity tag (If-None-Match names the revision).
ETAG_RE = re.compile(r"[!#-~]{1,128}\Z")

# Never among them: LLMAO_BOOTSTRAP_TOKEN works once, on the boot's fetch, and the follow
# program's file would keep a secret that is spent.
# Each wait of the follow loop is its period times a draw from this range, so boxes that
# booted together do not check together.
FOLLOW_JITTER = (0.8, 1.2)
# A granted turn is polled this often (or every follow_s, when that is shorter).
TURN_POLL_S = 2.0
# The check period when the applied record does not say (no record yet, or it was removed).
FOLLOW_FALLBACK_S = 60.0
# After errors the period doubles per error up to this (or follow_s, when that is longer).
FOLLOW_BACKOFF_CAP_S = 900.0


@dataclass(frozen=True)
class Applied:
    """What the follow loop knows of the box: the applied revision and how often to check."""

    revision: str | None
    follow_s: float
    tls: BoxTls | None = None


def read_applied(path: Path) -> Applied:
    """The applied record's revision and ``rollout.follow_s``, or the fallback period.

    A revision that cannot stand in an entity tag is not named in the check.
    """
    record = read_record(path)[1] or {}
    revision = record.get("revision")
    if not (isinstance(revision, str) and ETAG_RE.match(revision)):
        revision = None
    try:
        follow_s = validate_rollout(record.get("rollout"), "applied.rollout").follow_s
    except Refused:
        follow_s = FOLLOW_FALLBACK_S
    try:
        tls = validate_tls(record["tls"], "applied.tls") if "tls" in record else None
    except Refused:
        tls = None
    return Applied(revision, follow_s, tls)


def backoff_period(follow_s: float, errors: int) -> float:
    """The period after ``errors`` errors in a row: doubled per error, bounded."""
    return min(follow_s * 2 ** min(errors, 16), max(follow_s, FOLLOW_BACKOFF_CAP_S))


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


@dataclass
class Follower:
    """``--follow``: check, take a turn, fetch, apply, report; again, forever.

    Every wait goes through ``sleep`` and every jitter through ``uniform``, so a test
    drives the loop without waiting. Errors are one line each and the loop goes on,
    backing off; nothing here ends the process but a signal.
    """

    settings: Settings
    console: Console
    sleep: Callable[[float], None] = time.sleep
    uniform: Callable[[float, float], float] = random.uniform

    def __post_init__(self) -> None:
        # It never presents a bootstrap token (supervisord may hand it one from the image's
        # environment): the boot's fetch spent it, and kept the box token it bought.
        self.settings = dataclasses.replace(self.settings, bootstrap_token=None)

    def say(self, text: str) -> None:
        self.console.say(text)

    def jittered(self, period: float) -> float:
        return period * self.uniform(*FOLLOW_JITTER)

    def run(self) -> NoReturn:
        applied = read_applied(self.settings.record_path)
        self.say(f"following {self.settings.url}{CONFIG_PATH}: checking every "
                 f"{applied.follow_s:g} s, revision {applied.revision or 'none'} applied")
        wait, errors = self.jittered(applied.follow_s), 0
        while True:
            self.sleep(wait)
            try:
                self.round()
            except (InstallError, OSError) as error:
                errors += 1
                follow_s = read_applied(self.settings.record_path).follow_s
                wait = self.jittered(backoff_period(follow_s, errors))
                self.say(f"error: {one_line(error)}; next check in {wait:.0f} s")
            else:
                errors = 0
                wait = self.jittered(read_applied(self.settings.record_path).follow_s)

    def round(self) -> None:
        """One check; when llmao intends another revision: a turn, a real fetch, the apply.
        First, the applied assignment's certificate is renewed when it is due: vLLM reloads
        it in place, so a renewal takes no turn. A failed renewal is one line and the check
        goes on: the revision that fixes it must still reach the box."""
        applied = read_applied(self.settings.record_path)
        try:
            ensure_certificate(self.settings, applied.tls, self.say)
        except (InstallError, OSError) as error:
            self.say(f"error: certificate renewal failed: {one_line(error)}; checking for "
                     "a new revision anyway")
        intended = self.check(applied)
        if intended is None:
            return
        revision = intended.revision or ""
        changing = plan_assignment(intended, self.settings,
                                   intended.rollout is not None)[1].changing_servers()
        if not changing:
            self.say(f"plan: revision {revision} changes no server program: applying "
                     "without a turn")
        elif not self.take_turn(revision, changing, applied.follow_s):
            return
        fetched = validate_assignment(fetch_assignment(self.settings, self.say))
        if fetched.revision != revision:
            self.say(f"fetched revision {fetched.revision}, not {revision}: checking again")
            return
        self.say(f"applying revision {revision}")
        apply_assignment(fetched, self.settings, self.console,
                         Mode(fetched=True, following=True))
        self.say(f"applied revision {revision}")

    def check(self, applied: Applied) -> Assignment | None:
        """The follow check: the intended assignment when it is not the applied one."""
        doc = fetch_assignment(self.settings, self.say, applied.revision, attempts=1)
        intended = None if doc is None else validate_assignment(doc)
        if intended is None or intended.revision == applied.revision:
            self.say(f"checked: revision {applied.revision} is current")
            return None
        self.say(f"checked: revision {intended.revision} is intended, "
                 f"{applied.revision or 'none'} is applied")
        return intended

    def take_turn(self, revision: str, servers: list[str], follow_s: float) -> bool:
        """Ask for the turn until llmao says apply; False when it no longer intends revision.

        Waiting for a turn, the box asks every follow_s; holding one, it polls every
        min(follow_s, 2) s. A line is written when the answer changes, not per poll.
        """
        self.say(f"turn: asking for revision {revision} (servers {', '.join(servers)})")
        said = ""
        while True:
            answer = ask_turn(self.settings, self.say, revision, servers)
            if answer is None:
                self.say(f"turn: revision {revision} is no longer intended (409): checking "
                         "again")
                return False
            if answer.apply:
                self.say(f"turn: granted for revision {revision}, drained: apply")
                return True
            holding = answer.granted and answer.phase in ("draining", "drained")
            line = (f"turn: granted for revision {revision} ({answer.phase}): waiting for "
                    "the drain" if holding else
                    f"turn: waiting for revision {revision}: {answer.why or answer.phase}")
            if line != said:
                self.say(line)
                said = line
            self.sleep(min(follow_s, TURN_POLL_S) if holding else self.jittered(follow_s))
