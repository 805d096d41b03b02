"""The page as data: states with and without a verdict, providers, the strip, ages."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id
from llmao_server.store import AppliedCard, AppliedReport, Approval, UnknownBox
from llmao_server.web.fleet_view import (
    PROBLEM_STATES,
    Observed,
    Page,
    age,
    build_page,
)
from rig.fleet_files import write_fleet
from tests.server.fleet_pair import (
    CONFIG,
    KNOWN,
    LEGACY,
    MODELS,
    OTHER_KNOWN,
    UNKNOWN,
    write_pair,
)

NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    return load_fleet(*write_pair(tmp_path_factory.mktemp("fleet")))


@pytest.fixture(scope="module")
def vast_fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    document = {**CONFIG, "providers": {"vast": {"api_key": "vast-key-for-tests"}}}
    return load_fleet(*write_pair(tmp_path_factory.mktemp("vast"), document))


def verdict(box: str, port: int, name: str, state: str, reason: str = "why",
            **extra: object) -> tuple[str, dict]:
    key = deployment_id(box, port, name)
    return key, {"id": key, "box": box, "state": state, "reason": reason,
                 "in_litellm": state == "Healthy", "public": f"{box}:{port + 40000}", **extra}


def rows_by_key(page: Page) -> dict[tuple[str, int], dict]:
    return {(row["box"], row["listen_port"]): row for row in page.table()["servers"]}


@pytest.mark.parametrize(("elapsed", "text", "tone"), [
    (0, "0 s ago", "fresh"), (59, "59 s ago", "fresh"), (60, "1 min ago", "fresh"),
    (3599, "59 min ago", "fresh"), (3600, "1 h ago", "aging"),
    (86399, "23 h ago", "aging"), (86400, "1 d ago", "stale"), (10 * 86400, "10 d ago", "stale"),
])
def test_ages_read_as_elapsed_time_coloured_by_freshness(elapsed: float, text: str,
                                                         tone: str) -> None:
    shown = age(NOW, NOW - elapsed)
    assert (shown.text, shown.tone) == (text, tone)


def test_never_is_stale() -> None:
    assert (age(NOW, None).text, age(NOW, None).tone) == ("never", "stale")


def test_without_a_verdict_a_fetch_decides_awaiting_or_loading(fleet: Fleet) -> None:
    rows = rows_by_key(build_page(fleet, Observed(fetch_times={KNOWN: NOW - 120}), NOW))
    assert rows[(KNOWN, 8001)]["state"] == "Loading"
    assert rows[(KNOWN, 8001)]["reason"] == "fetched its config 2 min ago; no reconcile pass yet"
    assert rows[(OTHER_KNOWN, 8001)]["state"] == "Awaiting"
    assert rows[(OTHER_KNOWN, 8001)]["in_litellm"] is None


def test_a_verdict_gives_the_state_reason_presence_public_port_and_provider(
        vast_fleet: Fleet) -> None:
    verdicts = dict([verdict(KNOWN, 8001, "gemma", "Healthy", "serving", provider="vast"),
                     verdict(KNOWN, 8002, "qwen", "Stalled", "fetched 20 min ago",
                             provider="vast")])
    page = build_page(vast_fleet, Observed(verdicts=verdicts), NOW)
    rows = rows_by_key(page)
    assert rows[(KNOWN, 8001)]["state"] == "Healthy"
    assert rows[(KNOWN, 8001)]["in_litellm"] is True
    assert rows[(KNOWN, 8001)]["public"] == f"{KNOWN}:48001"
    assert rows[(KNOWN, 8002)]["in_litellm"] is False
    # Boxes no verdict placed yet are grouped apart from the listed ones, under the name
    # the inventory and reconcile give a box no listing names.
    assert [provider for provider, _ in page.groups] == ["unlisted", "vast"]
    assert rows[(OTHER_KNOWN, 8001)]["public"] is None


def test_every_problem_state_is_in_the_strip_with_advice(fleet: Fleet) -> None:
    states = ["Stalled", "Unhealthy", "Rejected", "Foreign"]
    servers = [(KNOWN, 8001, "gemma"), (KNOWN, 8002, "qwen"), (OTHER_KNOWN, 8001, "qwen"),
               (LEGACY, 8000, "gemma")]
    verdicts = dict(verdict(*server, state, f"{state} because")
                    for server, state in zip(servers, states, strict=True))
    page = build_page(fleet, Observed(verdicts=verdicts), NOW)
    found = {problem.title: problem for problem in page.problems}
    assert list(found) == states
    for (box, port, name), state in zip(servers, states, strict=True):
        assert found[state].entries == ((f"{box} {name} :{port}", f"{state} because"),)
        assert found[state].advice == PROBLEM_STATES[found[state].kind.capitalize()]


def test_unlisted_says_the_row_outlives_its_instance(fleet: Fleet) -> None:
    verdicts = dict([verdict(OTHER_KNOWN, 8001, "qwen", "Unlisted", "no listing names it")])
    (problem,) = build_page(fleet, Observed(verdicts=verdicts), NOW).problems
    assert problem.title == "Unlisted"
    assert "outlives" in problem.advice and "Remove the row" in problem.advice


def test_drift_from_the_pass_and_from_applied_revisions(fleet: Fleet) -> None:
    drift = [
        {"kind": "orphan_route", "id": "llmao:10.9.9.9:8001:gemma", "model_name": "gemma",
         "what": "llmao route in LiteLLM for a server no longer in config"},
        {"kind": "unmanaged_route", "id": "hand-made", "model_name": "qwen",
         "what": "route in LiteLLM that matches no intended server"},
        {"kind": "model_mismatch", "id": deployment_id(KNOWN, 8001, "gemma"),
         "what": "model qwen in LiteLLM, gemma in config"},
        {"kind": "revision_behind", "box": KNOWN, "applied": "old", "intended": "new",
         "what": "applied rev old, intended rev new"},
    ]
    observed = Observed(drift=drift, applied={OTHER_KNOWN: "feedfacefeedface"})
    found = {p.kind: p for p in build_page(fleet, observed, NOW).problems}
    assert set(found) == {"routes", "mismatch", "revision"}
    assert len(found["routes"].entries) == 2
    intended = fleet.assignment(OTHER_KNOWN).revision
    # Revisions are read live from the store, not from the pass's list (no duplicate).
    assert found["revision"].entries == (
        (OTHER_KNOWN, f"applied rev feedface, intended rev {intended[:8]}"),)


def test_strangers_leave_the_strip_once_approved_and_show_in_the_table(fleet: Fleet) -> None:
    unknown = [UnknownBox(UNKNOWN, NOW - 7200, NOW - 30, 4), UnknownBox("192.0.2.99", NOW - 5,
                                                                       NOW - 5, 1)]
    approvals = [Approval(UNKNOWN, ("qwen", "gemma"), "alice", NOW - 60)]
    page = build_page(fleet, Observed(unknown=unknown, approvals=approvals,
                                      fetch_times={UNKNOWN: NOW - 10}), NOW)
    assert [(s.name, s.count) for s in page.strangers] == [("192.0.2.99", 1)]
    rows = rows_by_key(page)
    assert rows[(UNKNOWN, 8001)]["model_name"] == "qwen"
    assert rows[(UNKNOWN, 8002)]["model_name"] == "gemma"
    assert rows[(UNKNOWN, 8001)]["state"] == "Loading"
    assert rows[(UNKNOWN, 8001)]["approved_by"] == "alice"
    (approved,) = [p for p in page.problems if p.kind == "approved"]
    assert approved.entries[0][1].endswith(f'"{UNKNOWN}": [[qwen, 8001], [gemma, 8002]]')


def test_an_approval_for_a_box_now_in_fleet_hosts_is_ignored(fleet: Fleet) -> None:
    page = build_page(fleet, Observed(approvals=[Approval(KNOWN, ("qwen",), "bob", NOW)]), NOW)
    assert [row["model_name"] for row in page.table()["servers"] if row["box"] == KNOWN] == \
        ["gemma", "qwen"]
    assert [p for p in page.problems if p.kind == "approved"] == []


def test_counts_follow_the_lifecycle_order(fleet: Fleet) -> None:
    verdicts = dict([verdict(KNOWN, 8001, "gemma", "Stalled"),
                     verdict(KNOWN, 8002, "qwen", "Healthy")])
    page = build_page(fleet, Observed(verdicts=verdicts), NOW)
    assert page.state_counts == (("Awaiting", 2), ("Stalled", 1), ("Healthy", 1))
    assert (page.server_count, page.box_count) == (4, 3)


def test_the_table_is_plain_json(fleet: Fleet) -> None:
    table = build_page(fleet, Observed(fetch_times={KNOWN: NOW}), NOW).table()["servers"]
    assert len(json.loads(json.dumps(table))) == 4


@pytest.mark.parametrize(("query", "count"), [("QWEN", 2), ("awaiting", 4), (LEGACY, 1),
                                             ("absent", 0)])
def test_the_filter_matches_any_shown_field(fleet: Fleet, query: str, count: int) -> None:
    page = build_page(fleet, Observed(), NOW, query)
    assert sum(len(rows) for _, rows in page.groups) == count
    assert page.server_count == 4  # the summary counts the whole fleet


@pytest.fixture(scope="module")
def spanning(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    """The fleet with gemma's recipe spanning 2 cards."""
    models = copy.deepcopy(MODELS)
    models["models"][0]["model_info"]["vllm"]["gpus"] = 2
    folder = tmp_path_factory.mktemp("spanning")
    return load_fleet(*write_fleet(folder, CONFIG, models).paths())


def test_each_row_shows_its_cards_and_a_box_short_of_cards_is_in_the_strip(
        spanning: Fleet) -> None:
    l4 = (AppliedCard(0, "NVIDIA L4", 23034), AppliedCard(1, "NVIDIA L4", 23034),
          AppliedCard(2, "NVIDIA H100", 81559))
    reports = {
        KNOWN: AppliedReport(KNOWN, "r", "2026-01-01T00:00:00Z", (), NOW, l4,
                             (("gemma", (0, 1)), ("qwen", (2,)))),
        LEGACY: AppliedReport(LEGACY, "r", "2026-01-01T00:00:00Z", (), NOW, l4[:1],
                              (("gemma", (0,)),)),
    }
    page = build_page(spanning, Observed(cards=reports), NOW)
    rows = rows_by_key(page)
    assert rows[KNOWN, 8001]["cards"] == ("GPU 0, 1 of 2 × NVIDIA L4 (22.5 GiB) + "
                                          "1 × NVIDIA H100 (79.6 GiB)")
    assert rows[KNOWN, 8002]["cards"].startswith("GPU 2 of 2 × NVIDIA L4")
    assert rows[OTHER_KNOWN, 8001]["cards"] == ""
    (short,) = [p for p in page.problems if p.kind == "cards"]
    assert short.entries == (
        (LEGACY, "gemma needs 2 cards (vllm.gpus of gemma), the box reported 1"),)


def test_a_box_its_listing_puts_short_is_in_the_strip_until_it_reports(spanning: Fleet) -> None:
    """Reconcile's drift says the provider lists too few GPUs: the same item, for a box that
    has not reported its cards; a box's own report, once there, is what counts."""
    listed = [{"kind": "too_few_cards", "box": box, "needs": 2, "cards": 1,
               "what": "too few cards: gemma needs 2 cards (vllm.gpus of gemma), "
                       "the provider lists 1 GPU"} for box in (KNOWN, LEGACY)]
    two = (AppliedCard(0, "NVIDIA L4", 23034), AppliedCard(1, "NVIDIA L4", 23034))
    reports = {KNOWN: AppliedReport(KNOWN, "r", "2026-01-01T00:00:00Z", (), NOW, two,
                                    (("gemma", (0, 1)), ("qwen", (0,))))}
    page = build_page(spanning, Observed(cards=reports, drift=listed), NOW)
    (short,) = [p for p in page.problems if p.kind == "cards"]
    assert short.entries == (
        (LEGACY, "gemma needs 2 cards (vllm.gpus of gemma), the provider lists 1 GPU"),)
    assert "provider lists" in short.advice
