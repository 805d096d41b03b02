"""Reading llmao's admin API answer strictly, and the verdicts document reconcile posts."""

from __future__ import annotations

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import (
    AdminSection,
    FleetSection,
    ServerSection,
    Settings,
)
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Memory, State
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    LlmaoAdmin,
    LlmaoAdminError,
    observations_document,
    parse_observations,
    verdicts_document,
)
from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Phase, Turn
from rig.boxes import free_port

ANSWER = {
    "now": 2000.0,
    "boxes": {
        "203.0.113.10": {"last_fetch": 1990.5, "applied": {
            "revision": "0123456789abcdef", "applied_at": "x", "reported_at": 1991.0}},
        "box-b": {"last_fetch": None, "applied": None},
    },
    "verdicts": {"llmao:203.0.113.10:8001:gemma": {
        "state": "Healthy", "memory": {"state": "Healthy", "consecutive_failures": 1,
                                       "rejected_passes": 0, "last_healthy_at": 1900.0}}},
}


def test_observations_are_read():
    seen = parse_observations(ANSWER)
    assert seen.now == 2000.0
    assert seen.last_fetches == {"203.0.113.10": 1990.5, "box-b": None}
    assert seen.applied == {"203.0.113.10": "0123456789abcdef", "box-b": None}
    assert seen.memories == {
        "llmao:203.0.113.10:8001:gemma": Memory(State.HEALTHY, 1, 0, 1900.0)}
    assert seen.approved == {}


def test_the_document_written_is_the_one_read_turns_and_bindings_included():
    turn = Turn("box-b", "r2", ("llmao:box-b:8001:gemma",), Phase.DRAINING, 1990.0, 2500.0)
    document = observations_document(
        2000.0, {"box-b": 1995.0}, {"box-b": {"revision": "r1", "cards": 2}},
        {"box-b": ["gemma"]}, {}, [], None, [turn],
        {"box-b": {"state": "confirmed", "instance": "i-7"}})
    seen = parse_observations(document)
    assert (seen.turns, seen.bindings) == ((turn,), {"box-b": "i-7"})
    assert (seen.last_fetches, seen.applied, seen.cards, seen.approved) == (
        {"box-b": 1995.0}, {"box-b": "r1"}, {"box-b": 2}, {"box-b": ("gemma",)})


def test_the_cards_a_box_reported_are_read_and_nonsense_is_unknown():
    boxes = {"a": {"last_fetch": None, "applied": {"revision": "r", "cards": 2}},
             "b": {"last_fetch": None, "applied": {"revision": "r", "cards": True}},
             "c": {"last_fetch": None, "applied": {"revision": "r", "cards": -1}},
             "d": {"last_fetch": None, "applied": {"revision": "r"}}}
    assert parse_observations({**ANSWER, "boxes": boxes}).cards == {"a": 2}
    assert parse_observations(ANSWER).cards == {}


def test_approvals_are_read_in_port_order():
    seen = parse_observations({**ANSWER, "approved": {"192.0.2.77": ["qwen", "gemma"]}})
    assert seen.approved == {"192.0.2.77": ("qwen", "gemma")}


@pytest.mark.parametrize("answer", [None, [], {"boxes": {}, "verdicts": {}},
                                    {"now": 1, "verdicts": {}}, {"now": 1, "boxes": {}},
                                    {"now": True, "boxes": {}, "verdicts": {}},
                                    {"now": 1, "boxes": {"a": 3}, "verdicts": {}},
                                    {**ANSWER, "approved": ["192.0.2.77"]},
                                    {**ANSWER, "approved": {"192.0.2.77": "qwen"}},
                                    {**ANSWER, "approved": {"192.0.2.77": [None]}}])
def test_a_misread_answer_fails(answer):
    with pytest.raises(LlmaoAdminError):
        parse_observations(answer)


def settings(server_url="http://127.0.0.1:9", admin_token="an-admin-token-1234"):
    return Settings(FleetSection("k" * 12, "s" * 12), server=ServerSection(server_url, "x"),
                    admin=AdminSection(admin_token))


@pytest.mark.parametrize(("changes", "text"), [
    ({"server_url": None}, "server.url is not set"),
    ({"admin_token": None}, "admin.token is missing or CHANGE_ME"),
    ({"admin_token": "CHANGE_ME_please"}, "admin.token is missing or CHANGE_ME"),
])
def test_settings_must_name_the_api(changes, text):
    with pytest.raises(LlmaoAdminError, match=text):
        LlmaoAdmin.from_settings(settings(**changes))


def test_unreachable_llmao_says_so_without_the_token():
    url = f"http://127.0.0.1:{free_port()}"
    admin = LlmaoAdmin.from_settings(settings(server_url=url), timeout=2)
    with pytest.raises(LlmaoAdminError) as caught:
        admin.observations()
    assert f"llmao at {url} unreachable" in str(caught.value)
    assert "an-admin-token-1234" not in str(caught.value)


def test_verdicts_document_states_presence_after_the_pass():
    servers = [
        {"id": "a", "state": "Healthy", "in_litellm": False, "change": "register"},
        {"id": "b", "state": "Unhealthy", "in_litellm": True, "change": "delete"},
        {"id": "c", "state": "Healthy", "in_litellm": True, "change": None},
        {"id": "d", "state": "Loading", "in_litellm": False, "change": None},
    ]
    memories = {"a": {"state": "Healthy"}, "b": {"state": "Unhealthy"}}
    drift = [{"kind": "revision_behind", "box": "x"}]
    document = verdicts_document(12.5, servers, memories, drift)
    assert document["pass_at"] == 12.5 and document["drift"] == drift
    presence = {key: v["in_litellm"] for key, v in document["verdicts"].items()}
    assert presence == {"a": True, "b": False, "c": True, "d": False}
    assert document["verdicts"]["a"]["memory"] == {"state": "Healthy"}
    assert document["verdicts"]["d"]["memory"] == {}
