"""The fleet page as data: one row per intended server, and what needs an operator.

Pure: :func:`build_page` takes the loaded fleet, what the store observed and
the time, and returns plain values the template only lays out (and the
benchmark dumps as JSON, to price the template). The rules for a server's
state are the core's, applied by reconcile; this module only says what to
show when reconcile has not spoken yet, and what to do about each problem.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import LISTEN_PORTS
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import (
    BoxAssignment,
    IntendedServer,
)
from ansible_collections.llmao.fleet.plugins.module_utils.json_values import is_number
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Drift, State
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    LOCAL_SOURCE,
    Endpoint,
    provider_of,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_plan import PLAIN_UNDER_TLS
from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Turn
from ansible_collections.llmao.fleet.plugins.module_utils.rollout_status import (
    ModelRollout,
    Stage,
    rollout_rows,
)
from ansible_collections.llmao.fleet.plugins.module_utils.server_load import (
    ModelLoad,
    ServerLoad,
    read_load_document,
)
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import (
    MetricsRecordError,
)

from ..state import fleet_in_force, waiting_unknowns
from ..store import AppliedReport, Approval, BindingConflict, BoxBinding, LoadSample, UnknownBox
from ..tls.cert_expiry import WARN_BEFORE_S
from .charts import Chart, line_chart, percent

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
# How far back a model's chart looks at most when it fits the data (the default).
CHART_SPAN_S = 6 * HOUR_S
# The windows an operator may pick instead, by their query value.
CHART_WINDOWS = {"1h": HOUR_S, "6h": 6 * HOUR_S, "24h": DAY_S}
# A fitted chart spans at least this, so a first sample is not a whole chart's width.
CHART_MIN_FIT_S = 10 * 60.0
# A model's chart: the figures drawn, each a key of the history's model samples.
CHART_FIGURES = ("requests_running", "requests_waiting", "capacity")
# Its KV cache chart: the fullest server's usage (history.MODEL_KV).
KV_FIGURES = ("kv_cache_usage_ratio",)
SHORT_REVISION = 8

# The strip, in the order an operator should read it; each kind says what to do.
PROBLEM_STATES = {
    State.STALLED: "Fetched its config but is not serving after the grace period. Read its "
                   "vLLM log on the box (supervisorctl tail -f <server> stderr): weights, "
                   "memory and launch arguments are the usual causes.",
    State.UNHEALTHY: "Was serving, now fails its probes; its LiteLLM route was removed. Check "
                     "supervisorctl status on the box; reconcile registers it again once it "
                     "is Healthy.",
    State.REJECTED: "Answers 401 to our bearer: the box runs an older assignment, or "
                    "something else listens at this address. Re-run install_set.py on the box; "
                    "if the address is not ours, remove the row.",
    State.FOREIGN: "Keeps answering 401 at an address no provider lists: it is not ours and "
                   "is never registered. Remove the fleet.hosts row.",
    State.UNLISTED: "No provider listing names the box and it does not answer: the instance "
                    "is probably gone, and the fleet.hosts row outlives it. Remove the row "
                    "(llmao never retires one by itself).",
    State.PREEMPTED: "Preempted: the provider stopped this interruptible instance (a Vast bid "
                     "outbid, a RunPod spot pod reclaimed); its route was removed. Start it "
                     "again at the provider, or rent an on-demand box for the model.",
}
REVISION_ADVICE = ("The box runs an older assignment than config says. Re-run install_set.py on "
                   "it, or ansible-playbook playbooks/provision.yml --limit <box>; vLLM restarts "
                   "with the new recipe.")
CARDS_ADVICE = ("The box reported (or, before it booted, its provider lists) fewer GPUs than a "
                "server of its assignment spans (vllm.gpus), so it refuses the assignment and "
                "reconcile registers none of its servers. "
                "Give the row a box with enough cards, or lower gpus in models.yaml.")
ROUTE_ADVICE = ("LiteLLM has routes that match no intended server. The next reconcile deletes "
                "llmao's own; the others were added by hand: delete them in LiteLLM if stale.")
MISMATCH_ADVICE = ("LiteLLM's route serves another model than config names; the next reconcile "
                   "replaces it.")
APPROVED_ADVICE = ("Served until the server restarts. To keep a box, add its rows to "
                   "fleet.hosts and restart llmao-server.")
WEAK_SECRET_ADVICE = ("Loaded, because changing it means re-provisioning every box, but a weak "
                      "secret is easier to guess. Make a strong one (python3 -c 'import secrets; "
                      "print(secrets.token_urlsafe(32))') and rotate it as "
                      "docs/rotating-secrets.md says.")
OVERSIZED_ADVICE = ("vLLM accepts a request that needs the whole context and then hangs on it "
                    "instead of refusing it. Lower max_model_len in models.yaml to at most the "
                    "KV cache's tokens, or give the model more memory (vram_gb: a larger GPU, "
                    "or a higher gpu_memory_utilization).")
SATURATED_ADVICE = ("Requests keep waiting, or the KV cache is nearly full: the model needs "
                    "another box. Add one for it to fleet.hosts (or approve one).")
# The rollout panel's columns, in the order a box goes through them.
ROLLOUT_COLUMNS = ((Stage.WAITING, "Waiting"), (Stage.DRAINING, "Draining"),
                   (Stage.RESTARTING, "Restarting"), (Stage.HEALTHY, "Healthy on new revision"))
PAUSED_ADVICE = ("A server did not come up Healthy on the new revision, so no other box of the "
                 "model gets a turn: the others keep serving the old revision. Read the failed "
                 "server's vLLM log, fix models.yaml or fleet.hosts and restart llmao-server: "
                 "the fixed config is a new revision, and the rollout resumes with it "
                 "(docs/troubleshooting.md).")
CONFLICT_ADVICE = ("A call presented the fleet key and a bound box's name without that box's "
                   "token: it was refused and got nothing. If you replaced the box, release its "
                   "binding (the Release button on its row) and it binds again on its next "
                   "fetch; if not, the fleet key has leaked: rotate fleet.key "
                   "(docs/box-identity.md).")
PLAIN_HTTP_ADVICE = ("The box answered llmao's TLS hello in plain HTTP. If llmao issued it a "
                     "certificate or verified one from it, treat it as a downgrade: something "
                     "on the path may be reading its bearer and prompts. llmao kept its https "
                     "route and never moves it to http; check the network between reconcile "
                     "and the box, and release its binding if the box was replaced. A box that "
                     "never had a certificate (a box program from before box TLS) sends its "
                     "bearer in clear until it runs the current install_set.py: run it there "
                     "(docs/box-tls.md).")
ROUTE_DRIFT = (Drift.ORPHAN_ROUTE, Drift.UNMANAGED_ROUTE)
# The states of a server that is not up: when its box runs an older revision, the box
# has not started it at all.
NOT_STARTED_STATES = (State.AWAITING.value, State.LOADING.value, State.STALLED.value)


@dataclass(frozen=True)
class Observed:
    """What the store holds about the fleet, read once per page."""

    fetch_times: Mapping[str, float] = field(default_factory=dict)
    applied: Mapping[str, str] = field(default_factory=dict)
    verdicts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    drift: Sequence[Mapping[str, Any]] = ()
    pass_at: float | None = None
    unknown: Sequence[UnknownBox] = ()
    approvals: Sequence[Approval] = ()
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    history: Sequence[LoadSample] = ()
    turns: Sequence[Turn] = ()
    # Bound box names (docs/box-identity.md) and the refused claims of them.
    bindings: Mapping[str, BoxBinding] = field(default_factory=dict)
    conflicts: Sequence[BindingConflict] = ()
    # The last report of each box that said which cards it has.
    cards: Mapping[str, AppliedReport] = field(default_factory=dict)
    # Each box's servers (name, listen port) as its last report says it started them.
    started: Mapping[str, frozenset[tuple[str, int]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Age:
    """A time shown as how long ago, with the colour of its freshness."""

    text: str
    tone: str
    at: float | None


@dataclass(frozen=True)
class Row:
    """One intended server as the table shows it."""

    provider: str
    box: str
    name: str
    model_name: str
    listen_port: int
    public: str | None
    state: str
    reason: str
    last_fetch: Age
    in_litellm: bool | None
    applied_revision: str | None
    intended_revision: str
    approved_by: str | None = None
    load: ServerLoad | None = None
    # The box's binding: "pending" or "confirmed" (None: not bound), and what it says.
    binding: str | None = None
    binding_detail: str = ""
    # This server's cards and the box's, as its last report said ("" when it did not).
    cards: str = ""
    # Under box TLS: how long the certificate the box served in the latest pass has left
    # ("TLS 6.9 d"), and "hot" when it nears expiry (docs/box-tls.md).
    certificate: str | None = None
    certificate_tone: str = ""

    @property
    def public_port(self) -> str:
        return self.public.rpartition(":")[2] if self.public else "?"

    @property
    def revision_current(self) -> bool | None:
        """True when the box applied what we intend, None when it never said."""
        if self.applied_revision is None:
            return None
        return self.applied_revision == self.intended_revision

    def search_text(self) -> str:
        """What the filter matches against, lower case."""
        return " ".join((self.provider, self.box, self.name, self.model_name,
                         str(self.listen_port), self.public or "", self.state,
                         self.reason)).lower()


@dataclass(frozen=True)
class Problem:
    """One kind of trouble in the strip: who has it (subject, detail), and what to do."""

    kind: str
    title: str
    advice: str
    entries: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ModelPanel:
    """One model's load now and its charts of the last hours: requests, and KV cache."""

    name: str
    load: ModelLoad
    chart: Chart
    kv_chart: Chart | None = None


@dataclass(frozen=True)
class Stranger:
    """A name that presented the fleet key from outside fleet.hosts, for the approve form."""

    name: str
    count: int
    first_seen: Age
    last_seen: Age


@dataclass(frozen=True)
class Page:
    groups: tuple[tuple[str, tuple[Row, ...]], ...]
    strangers: tuple[Stranger, ...]
    problems: tuple[Problem, ...]
    state_counts: tuple[tuple[str, int], ...]
    last_pass: Age
    box_count: int
    server_count: int
    models: tuple[ModelPanel, ...] = ()
    rollout: tuple[ModelRollout, ...] = ()

    def table(self) -> dict[str, Any]:
        """The page's data as plain JSON values (the benchmark's baseline): the servers'
        table, each model's load with the samples its charts draw, and the rollout."""
        return {
            "servers": [{**vars(row), "last_fetch": vars(row.last_fetch),
                         "load": row.load.record() if row.load else None}
                        for _, rows in self.groups for row in rows],
            "models": {panel.name: {**panel.load.record(),
                                    "chart": {line.name: line.segments
                                              for line in panel.chart.lines},
                                    "kv_chart": {line.name: line.segments for line in
                                                 panel.kv_chart.lines} if panel.kv_chart
                                    else None}
                       for panel in self.models},
            "rollout": [row.record() for row in self.rollout],
        }


def age(now: float, at: float | None, never: str = "never") -> Age:
    """``12 s ago`` / ``5 min ago`` / ``3 h ago`` / ``2 d ago``: green < 1 h, amber < 1 day."""
    if at is None:
        return Age(never, "stale", None)
    elapsed = max(0.0, now - at)
    if elapsed < 60:
        text = f"{elapsed:.0f} s ago"
    elif elapsed < HOUR_S:
        text = f"{elapsed // 60:.0f} min ago"
    elif elapsed < DAY_S:
        text = f"{elapsed // HOUR_S:.0f} h ago"
    else:
        text = f"{elapsed // DAY_S:.0f} d ago"
    tone = "fresh" if elapsed < HOUR_S else "aging" if elapsed < DAY_S else "stale"
    return Age(text, tone, at)


def short(revision: str | None) -> str | None:
    return revision[:SHORT_REVISION] if revision else None


def unprobed_state(fetched_at: float | None, now: float, approval: Approval | None) -> \
        tuple[str, str]:
    """The state of a server no reconcile pass has classified (yet, or ever: approved boxes)."""
    if approval is not None:
        why = "approved, not yet classified by a reconcile pass"
    else:
        why = "no reconcile pass yet"
    if fetched_at is None:
        return State.AWAITING.value, f"has not fetched its config; {why}"
    return State.LOADING.value, f"fetched its config {age(now, fetched_at).text}; {why}"


Served = list[tuple[BoxAssignment, Approval | None]]


def intended(fleet: Fleet, approvals: Iterable[Approval]) -> Served:
    """Every box llmao serves: ``fleet.hosts`` first, then boxes an admin approved, each
    approved box with its approval for the tag."""
    by_box = {approval.box: approval for approval in approvals}
    served = fleet_in_force(fleet, by_box.values())
    return [(assignment, None if box in fleet.assignments else by_box.get(box))
            for box, assignment in served.assignments.items()]


def build_row(fleet: Fleet, server: IntendedServer, assignment: BoxAssignment,
              approval: Approval | None, observed: Observed, now: float,
              loads: Mapping[str, ServerLoad]) -> Row:
    key = server.id
    verdict = observed.verdicts.get(key)
    fetched_at = observed.fetch_times.get(server.box)
    if verdict:
        state, reason = str(verdict.get("state")), str(verdict.get("reason") or "")
        in_litellm = bool(verdict.get("in_litellm"))
        public = verdict.get("public")
    else:
        state, reason = unprobed_state(fetched_at, now, approval)
        in_litellm = None
        public = None if fleet.settings.providers else \
            Endpoint(server.box, server.listen_port, LOCAL_SOURCE).address
    provider = provider_of(fleet.settings.providers, (verdict or {}).get("provider"))
    reason = explained(fleet, server, state, reason, in_litellm, assignment, observed)
    binding = observed.bindings.get(server.box)
    return Row(provider, server.box, server.name, server.model_name,
               server.listen_port, public, state, reason, age(now, fetched_at), in_litellm,
               short(observed.applied.get(server.box)), short(assignment.revision) or "",
               approval.approved_by if approval else None, loads.get(key) if verdict else None,
               *binding_shown(binding, now),
               cards_text(observed.cards.get(server.box), server.name),
               *certificate_shown((verdict or {}).get("cert_not_after"), now, fleet))


def certificate_shown(not_after: Any, now: float, fleet: Fleet) -> tuple[str | None, str]:
    """The served certificate's time left, and ``hot`` a few days ahead of its expiry (never
    before the box's own renewal, at a third of its life: a quarter of it left)."""
    tls = fleet.settings.box_tls
    if tls is None or not is_number(not_after):
        return None, ""
    left = not_after - now
    warn = min(WARN_BEFORE_S, tls.leaf_days * 86400 / 4)
    text = "TLS expired" if left <= 0 else f"TLS {left / 86400:.1f} d"
    return text, "hot" if left < warn else ""


def binding_shown(binding: BoxBinding | None, now: float) -> tuple[str | None, str]:
    """A box's binding as its row shows it: its state, and when, from where, which instance."""
    if binding is None or not binding.bound:
        return None, ""
    instance = f", instance {binding.instance}" if binding.instance else ""
    return ("confirmed" if binding.confirmed else "pending",
            f"bound {age(now, binding.bound_at).text} from {binding.peer or 'unknown'}"
            f"{instance}")


def conflicts_problem(conflicts: Sequence[BindingConflict], now: float) -> Problem | None:
    """Refused claims of bound names: someone else holds the fleet key, or a box was replaced."""
    if not conflicts:
        return None
    return Problem("conflicts", "Box names claimed by another box", CONFLICT_ADVICE,
                   tuple((conflict.box,
                          f"someone holding the fleet key claimed box {conflict.box} from peer "
                          f"{conflict.last_peer or 'unknown'} ({holder_text(conflict)}): "
                          f"rotate the fleet key if this was not you ({conflict.count} "
                          f"refused, last {age(now, conflict.last_at).text})")
                         for conflict in conflicts))


def holder_text(conflict: BindingConflict) -> str:
    """Who holds the name the claim was refused for: both peers are shown, never one for
    the other."""
    if conflict.holder == "controller":
        return "the name is the controller's: the push path owns it"
    if conflict.holder_peer is None:
        return "nobody holds it: it waits for its enrollment"
    return f"held by the box at {conflict.holder_peer}"


def explained(fleet: Fleet, server: IntendedServer, state: str, reason: str,
              in_litellm: bool | None, assignment: BoxAssignment, observed: Observed) -> str:
    """The row's reason, or what the pass's verdict leaves out that the store knows: a
    server out of LiteLLM for its box's rollout turn, or one its box has not started
    because the box still runs an older revision without it (so nothing is loading)."""
    applied = observed.applied.get(assignment.box)
    turn = next((turn for turn in observed.turns
                 if turn.box == assignment.box and turn.active), None)
    if state == State.HEALTHY.value and in_litellm is False and turn is not None:
        drained = f"drained for a rollout turn to rev {short(turn.revision)}"
        return f"{drained}; {reason}" if reason else drained
    started = (server.name, server.listen_port) in observed.started.get(assignment.box, ())
    if state in NOT_STARTED_STATES and applied and applied != assignment.revision \
            and not started:
        waits = ("its rollout turn is on" if turn else "waiting for its rollout turn") \
            if fleet.settings.rollout.following else "the box has not applied it yet"
        return (f"not started: its box runs rev {short(applied)}, not rev "
                f"{short(assignment.revision)} ({waits}); {reason}")
    return reason


def cards_text(report: AppliedReport | None, name: str) -> str:
    """``GPU 0, 1 of 4 × NVIDIA L4 (22.5 GiB)``: the server's cards, then the box's."""
    if report is None or not report.cards:
        return ""
    kinds: dict[tuple[str, int], int] = {}
    for card in report.cards:
        kinds[card.name, card.memory_total_mib] = kinds.get((card.name, card.memory_total_mib),
                                                            0) + 1
    box = " + ".join(f"{count} × {card_name} ({mib / 1024:.1f} GiB)"
                     for (card_name, mib), count in kinds.items())
    placed = dict(report.placement).get(name)
    if not placed:
        return box
    return f"GPU {', '.join(str(index) for index in placed)} of {box}"


def build_rows(fleet: Fleet, served: Served, observed: Observed, now: float,
               loads: Mapping[str, ServerLoad]) -> list[Row]:
    return [build_row(fleet, server, assignment, approval, observed, now, loads)
            for assignment, approval in served for server in assignment.servers]


def read_loads(observed: Observed) -> tuple[dict[str, ServerLoad], dict[str, ModelLoad]]:
    """The pass's loads per server and per model; none when they cannot be read (the admin
    API checked them, so only a store written by something else gets here)."""
    try:
        servers, models, _boxes = read_load_document({"verdicts": observed.verdicts,
                                                      "models": observed.models})
    except MetricsRecordError:
        return {}, {}
    return servers, models


def oversized_problem(rows: Sequence[Row]) -> Problem | None:
    entries = tuple((f"{row.box} {row.name} :{row.listen_port}",
                     f"serves max_model_len {row.load.context_len}, its KV cache holds "
                     f"{row.load.metrics.kv_cache_tokens} tokens")
                    for row in rows if row.load and row.load.oversized and row.load.metrics)
    if not entries:
        return None
    return Problem("oversized", "Oversized: context longer than the KV cache", OVERSIZED_ADVICE,
                   entries)


def plain_http_problem(verdicts: Mapping[str, Mapping[str, Any]]) -> Problem | None:
    """Servers whose box answered in plain HTTP under box TLS (the verdict's ``plain_http``):
    a downgrade, or a box not on TLS yet; either way its bearer may cross the path in clear."""
    entries = tuple((f"{verdict.get('box')} {verdict.get('name')} :{verdict.get('listen_port')}",
                     plain_http_detail(verdict))
                    for _, verdict in sorted(verdicts.items())
                    if verdict.get("plain_http") is True)
    if not entries:
        return None
    return Problem("plain-http", f"Servers answering {PLAIN_UNDER_TLS}", PLAIN_HTTP_ADVICE,
                   entries)


def plain_http_detail(verdict: Mapping[str, Any]) -> str:
    """Where it answered, its verdict, and whether the pass kept its https route."""
    why = str(verdict.get("why") or "")
    kept = f"; {why.removeprefix(PLAIN_UNDER_TLS + ': ')}" if why.startswith(PLAIN_UNDER_TLS) \
        else ""
    return (f"answered at {verdict.get('public') or 'its address'}: "
            f"{verdict.get('reason') or PLAIN_UNDER_TLS}{kept}")


def saturated_problem(models: Mapping[str, ModelLoad]) -> Problem | None:
    entries = tuple((name, f"{figure(load.requests_waiting)} waiting, "
                           f"{figure(load.requests_running)} running on {load.healthy} Healthy "
                           f"server(s), capacity {figure(load.capacity)} full-context requests")
                    for name, load in sorted(models.items()) if load.saturated)
    if not entries:
        return None
    return Problem("saturated", "Saturated models", SATURATED_ADVICE, entries)


def figure(value: float | None) -> str:
    """A figure for a sentence: ``?`` when unknown."""
    return "?" if value is None else f"{value:g}"


def chart_start(history: Sequence[LoadSample], now: float, window_s: float | None) -> float:
    """Where the charts begin: ``window_s`` back when one is picked, else at the oldest
    sample of the last :data:`CHART_SPAN_S` (at least :data:`CHART_MIN_FIT_S` back), so
    minutes of data fill the chart rather than a sliver of six hours."""
    if window_s is not None:
        return now - window_s
    oldest = min((sample.pass_at for sample in history
                  if sample.pass_at >= now - CHART_SPAN_S), default=now - CHART_SPAN_S)
    return min(oldest, now - CHART_MIN_FIT_S)


def model_panels(models: Mapping[str, ModelLoad], history: Sequence[LoadSample],
                 now: float, window_s: float | None = None) -> tuple[ModelPanel, ...]:
    """Each model of the latest pass, with its charts from :func:`chart_start` to now."""
    start = chart_start(history, now, window_s)
    recent = [sample for sample in history if sample.pass_at >= start]

    def series(name: str, figures: Sequence[str]) -> dict[str, list[tuple[float, Any]]]:
        return {figure_name: [(sample.pass_at, (sample.models.get(name) or {}).get(figure_name))
                              for sample in recent]
                for figure_name in figures}

    return tuple(ModelPanel(name, load, line_chart(series(name, CHART_FIGURES), start, now),
                            line_chart(series(name, KV_FIGURES), start, now, percent))
                 for name, load in sorted(models.items()))


def group_rows(rows: Iterable[Row]) -> tuple[tuple[str, tuple[Row, ...]], ...]:
    """Rows by provider (alphabetical), each group by box, then listen port."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.provider, []).append(row)
    return tuple((provider, tuple(sorted(members, key=lambda r: (r.box, r.listen_port))))
                 for provider, members in sorted(groups.items()))


def state_problems(rows: Sequence[Row]) -> list[Problem]:
    """One problem per troubled state, its servers in fleet order."""
    troubled: dict[str, list[tuple[str, str]]] = {state.value: [] for state in PROBLEM_STATES}
    for row in rows:
        if row.state in troubled:
            troubled[row.state].append((f"{row.box} {row.name} :{row.listen_port}", row.reason))
    return [Problem(state.value.lower(), state.value, advice, tuple(troubled[state.value]))
            for state, advice in PROBLEM_STATES.items() if troubled[state.value]]


def rolling_boxes(fleet: Fleet, rows: Sequence[ModelRollout]) -> set[str]:
    """The boxes the rollout panel accounts for, when boxes follow their assignment: being
    behind is their way to their turn, not drift (a paused model has its own item)."""
    if not fleet.settings.rollout.following:
        return set()
    return {box for row in rows for stage in Stage for box in row.boxes(stage)}


def revision_problem(served: Served, applied_revisions: Mapping[str, str],
                     rolling: set[str]) -> Problem | None:
    """Boxes whose reported revision is not the intended one (read live, not from a pass),
    except those on their way in a rollout."""
    entries = []
    for assignment, _ in served:
        applied = applied_revisions.get(assignment.box)
        if applied and applied != assignment.revision and assignment.box not in rolling:
            entries.append((assignment.box, f"applied rev {short(applied)}, "
                                            f"intended rev {short(assignment.revision)}"))
    if not entries:
        return None
    return Problem("revision", "Revision drift", REVISION_ADVICE, tuple(entries))


def cards_problem(served: Served, reports: Mapping[str, AppliedReport],
                  drift: Sequence[Mapping[str, Any]] = ()) -> Problem | None:
    """Boxes whose last report names fewer cards than their assignment needs (the core's
    rule, the one reconcile applies), read live; a box that has not reported yet is
    flagged when the last reconcile pass found its provider lists too few GPUs."""
    listed_short = {str(item.get("box")): str(item.get("what")) for item in drift
                    if item.get("kind") == Drift.TOO_FEW_CARDS}
    entries = []
    for assignment, _approval in served:
        report = reports.get(assignment.box)
        if report is None:
            why = listed_short.get(assignment.box, "").removeprefix("too few cards: ")
        else:
            why = assignment.short_of_cards(len(report.cards))
        if why:
            entries.append((assignment.box, why))
    if not entries:
        return None
    return Problem("cards", "Too few cards", CARDS_ADVICE, tuple(entries))


def drift_problems(drift: Sequence[Mapping[str, Any]]) -> list[Problem]:
    """LiteLLM-side drift from the last reconcile pass (revisions are read live instead)."""
    routes = tuple((f"{item.get('model_name') or '?'} {item.get('id')}", str(item.get("what")))
                   for item in drift if item.get("kind") in ROUTE_DRIFT)
    mismatches = tuple((str(item.get("id")), str(item.get("what")))
                       for item in drift if item.get("kind") == Drift.MODEL_MISMATCH)
    problems = []
    if routes:
        problems.append(Problem("routes", "LiteLLM routes matching no intended server",
                                ROUTE_ADVICE, routes))
    if mismatches:
        problems.append(Problem("mismatch", "Model mismatch in LiteLLM", MISMATCH_ADVICE,
                                mismatches))
    return problems


def rollout(fleet: Fleet, observed: Observed) -> tuple[ModelRollout, ...]:
    """Each model under way, from the stored turns, the applied revisions and the last pass's
    states: the rows reconcile prints too."""
    states = {key: str(verdict.get("state")) for key, verdict in observed.verdicts.items()}
    return rollout_rows(fleet_in_force(fleet, observed.approvals), observed.turns,
                        observed.applied, states)


def paused_problem(rows: Sequence[ModelRollout]) -> Problem | None:
    """One entry per paused model: the box whose turn failed, the revision, and why."""
    entries = tuple((row.model, f"box {row.paused.box}, rev {short(row.paused.revision)}: "
                                f"{row.paused.why or 'its turn failed'}")
                    for row in rows if row.paused is not None)
    if not entries:
        return None
    return Problem("paused", "Rollout paused", PAUSED_ADVICE, entries)


def approved_problem(served: Served, now: float) -> Problem | None:
    """Approved boxes, each with the ``fleet.hosts`` entry that would keep it."""
    entries = []
    for _, approval in served:
        if approval is None:
            continue
        rows = ", ".join(f"[{model}, {port}]" for model, port in
                         zip(approval.models, LISTEN_PORTS, strict=False))
        entries.append((approval.box, f"approved by {approval.approved_by} "
                                      f"{age(now, approval.approved_at).text}; to keep it: "
                                      f"\"{approval.box}\": [{rows}]"))
    if not entries:
        return None
    return Problem("approved", "Approved boxes", APPROVED_ADVICE, tuple(entries))


def secrets_problem(fleet: Fleet) -> Problem | None:
    """A weak fleet.key or salt: loaded, since changing it means re-provisioning, but shown."""
    weak = fleet.settings.weak_secrets
    if not weak:
        return None
    return Problem("secrets", "Weak secrets in config.yaml", WEAK_SECRET_ADVICE, tuple(weak))


def strangers(fleet: Fleet, observed: Observed, now: float) -> tuple[Stranger, ...]:
    """Unknown names still waiting for a decision (approved ones are in the table)."""
    return tuple(Stranger(u.name, u.count, age(now, u.first_seen), age(now, u.last_seen))
                 for u in waiting_unknowns(fleet, observed.unknown, observed.approvals))


def matches(row: Row, query: str) -> bool:
    return not query or query.lower() in row.search_text()


def build_page(fleet: Fleet, observed: Observed, now: float, query: str = "",
               window_s: float | None = None) -> Page:
    served = intended(fleet, observed.approvals)
    server_loads, model_loads = read_loads(observed)
    rows = build_rows(fleet, served, observed, now, server_loads)
    rolling = rollout(fleet, observed)
    problems = [secrets_problem(fleet), plain_http_problem(observed.verdicts),
                conflicts_problem(observed.conflicts, now),
                paused_problem(rolling), oversized_problem(rows),
                saturated_problem(model_loads), *state_problems(rows),
                revision_problem(served, observed.applied, rolling_boxes(fleet, rolling)),
                cards_problem(served, observed.cards, observed.drift),
                *drift_problems(observed.drift),
                approved_problem(served, now)]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    order = [state.value for state in State]
    return Page(
        groups=group_rows(row for row in rows if matches(row, query)),
        strangers=strangers(fleet, observed, now),
        problems=tuple(problem for problem in problems if problem is not None),
        state_counts=tuple(sorted(counts.items(), key=lambda item: order.index(item[0])
                                  if item[0] in order else len(order))),
        last_pass=age(now, observed.pass_at, never="no reconcile pass yet"),
        box_count=len({row.box for row in rows}),
        server_count=len(rows),
        models=model_panels(model_loads, observed.history, now, window_s),
        rollout=rolling,
    )
