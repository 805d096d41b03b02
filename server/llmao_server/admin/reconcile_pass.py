"""A reconcile pass as ``POST /admin/api/verdicts`` takes it, checked before it is kept.

``pass_at`` must be near the server's clock (reconcile takes it from ``now`` in
the observations), and each verdict's memory, which the next pass reads back,
must hold the types that pass expects; the pass's loads are read by the core's
reader (:func:`server_load.read_load_document`), as the dashboard and ``/metrics``
read them back.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ansible_collections.llmao.fleet.plugins.module_utils.json_values import is_integer, is_number
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import State
from ansible_collections.llmao.fleet.plugins.module_utils.server_load import read_load_document
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import (
    MetricsRecordError,
)

from ..api_errors import RequestRefused
from ..store import ReconcilePass

MAX_VERDICTS = 30_000
MAX_DRIFT = 10_000
MAX_ID = 300
STATES = frozenset(state.value for state in State)
# A pass is posted when it ends; it began at the ``now`` it read. A slow pass over a large
# fleet (every LiteLLM call timing out) still ends within hours; another instance's clock
# may run a little ahead.
PASS_MAX_AGE_S = 6 * 3600
CLOCK_SKEW_S = 300
MEMORY_COUNTERS = ("consecutive_failures", "rejected_passes")
MAX_COUNTER = 10**9


def read_pass(doc: Any, now: float) -> ReconcilePass:
    """A pass as reconcile posts it: ``{"pass_at", "verdicts": {id: {...}}, "drift": [...]}``."""
    if not isinstance(doc, dict):
        bad("the body must be a JSON object with pass_at, verdicts and drift")
    pass_at = doc.get("pass_at")
    if not is_number(pass_at):
        bad("pass_at must be a time in seconds since the epoch")
    if not now - PASS_MAX_AGE_S <= pass_at <= now + CLOCK_SKEW_S:
        bad(f"pass_at must be within {PASS_MAX_AGE_S} s before and {CLOCK_SKEW_S} s after "
            f"the server's clock ({now:.0f}); reconcile takes it from the observations' now")
    verdicts = doc.get("verdicts")
    if not isinstance(verdicts, dict) or len(verdicts) > MAX_VERDICTS:
        bad(f"verdicts must be an object of at most {MAX_VERDICTS} server ids")
    drift = doc.get("drift")
    if not isinstance(drift, list) or len(drift) > MAX_DRIFT:
        bad(f"drift must be a list of at most {MAX_DRIFT} items")
    for key, verdict in verdicts.items():
        check_verdict(key, verdict, now)
    if not all(isinstance(item, dict) for item in drift):
        bad("every drift item must be an object")
    models, boxes = doc.get("models", {}), doc.get("boxes", {})
    for part, value in (("models", models), ("boxes", boxes)):
        if not isinstance(value, dict) or len(value) > MAX_VERDICTS:
            bad(f"{part} must be an object of at most {MAX_VERDICTS} names")
    try:
        read_load_document(doc)
    except MetricsRecordError as exc:
        bad(f"the pass's loads (docs/metrics.md): {exc}")
    return ReconcilePass(float(pass_at), verdicts, drift, now, models, boxes)


def check_verdict(key: str, verdict: Any, now: float) -> None:
    where = f"verdicts[{key[:MAX_ID]!r}]"
    if not key or len(key) > MAX_ID:
        bad(f"a server id must be 1 to {MAX_ID} characters")
    if not isinstance(verdict, dict):
        bad(f"{where} must be an object")
    if verdict.get("state") not in STATES:
        bad(f"{where}.state must be one of {', '.join(sorted(STATES))}")
    memory = verdict.get("memory", {})
    if not isinstance(memory, dict):
        bad(f"{where}.memory must be an object")
    check_memory(memory, f"{where}.memory", now)


def check_memory(memory: dict, where: str, now: float) -> None:
    """What the next pass reads back into its classifier: counters, a state, a past time."""
    if memory.get("state") not in (None, *STATES):
        bad(f"{where}.state must be empty or one of {', '.join(sorted(STATES))}")
    for counter in MEMORY_COUNTERS:
        value = memory.get(counter)
        if value is not None and not (is_integer(value) and 0 <= value <= MAX_COUNTER):
            bad(f"{where}.{counter} must be an integer from 0 to {MAX_COUNTER}")
    healthy_at = memory.get("last_healthy_at")
    if healthy_at is not None and not (is_number(healthy_at)
                                       and 0 <= healthy_at <= now + CLOCK_SKEW_S):
        bad(f"{where}.last_healthy_at must be a past time in seconds since the epoch")


def bad(message: str) -> NoReturn:
    raise RequestRefused(400, "bad_verdicts", message)
