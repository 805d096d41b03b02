"""A reconcile pass as data: registrations, deletions, orphans and drift."""

from __future__ import annotations

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import (
    IntendedServer,
    deployment_id,
)
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import (
    Memory,
    State,
)
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    Endpoint,
    index_listings,
    parse_vast,
)
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import (
    Route,
    deployment_body,
    parse_model_info,
    route_differs,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_plan import (
    Plan,
    ServerPlan,
    plan_pass,
    probe_targets,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import Observations
from ansible_collections.llmao.fleet.tests.unit.fleets import (
    DOWN,
    SERVING,
    base_models,
    write_pair,
)
from rig.provider_api import vast_instance

NOW = 50_000.0
GEMMA, QWEN, LEGACY = ("llmao:203.0.113.10:8001:gemma", "llmao:203.0.113.10:8002:qwen",
                       "llmao:198.51.100.7:8000:gemma")


@pytest.fixture
def fleet(tmp_path):
    return load_fleet(*write_pair(tmp_path))


LOCAL = index_listings([], [], {})


def owned(id_, model_name, port):
    base = f"http://{id_.split(':')[1]}:{port}/v1"
    return Route(id_, model_name, base, base)


def plan(fleet, probes, routes=(), memories=None, fetches=None, applied=None):
    seen = Observations(NOW, fetches or {}, applied or {}, memories or {}, LOCAL, tuple(routes))
    return plan_pass(fleet, seen, probes)


def changed(result: Plan) -> list[ServerPlan]:
    """The servers whose LiteLLM deployment the pass changes."""
    return [server for server in result.servers if server.change]


def test_healthy_servers_are_registered_and_kept(fleet):
    first = plan(fleet, {GEMMA: SERVING, QWEN: SERVING, LEGACY: DOWN},
                 fetches={"203.0.113.10": NOW - 30})
    assert [(c.id, c.change) for c in changed(first)] == [
        (GEMMA, "register"), (QWEN, "register")]
    routes = [owned(GEMMA, "gemma", 8001), owned(QWEN, "qwen", 8002)]
    second = plan(fleet, {GEMMA: SERVING, QWEN: SERVING, LEGACY: DOWN}, routes,
                  memories=first.memories)
    assert changed(second) == [] and second.orphans == ()


def test_failure_below_threshold_deletes_nothing(fleet):
    healthy = Memory(State.HEALTHY, 0, 0, NOW - 100)
    routes = [owned(GEMMA, "gemma", 8001)]
    one = plan(fleet, {GEMMA: DOWN, QWEN: DOWN, LEGACY: DOWN}, routes, {GEMMA: healthy})
    assert changed(one) == [] and one.orphans == ()
    at = plan(fleet, {GEMMA: DOWN, QWEN: DOWN, LEGACY: DOWN}, routes,
              {GEMMA: Memory(State.HEALTHY, 2, 0, NOW - 100)})
    assert [(c.id, c.change, c.verdict.state) for c in changed(at)] == [
        (GEMMA, "delete", "Unhealthy")]
    assert at.orphans == ()


def test_address_move_replaces_the_route(fleet):
    moved = Route(GEMMA, "gemma", "http://203.0.113.10:9999/v1", "http://203.0.113.10:9999/v1")
    result = plan(fleet, {GEMMA: SERVING, QWEN: DOWN, LEGACY: DOWN}, [moved])
    (change,) = changed(result)
    assert change.change == "replace" and "moved" in change.why
    assert result.orphans == ()


def test_a_route_is_replaced_only_on_an_answer(fleet):
    """Kept Healthy through a failed probe, a server keeps the route it has even where the
    pass would dial it elsewhere: nothing answered there, so nothing says it serves there."""
    moved = Route(GEMMA, "gemma", "http://203.0.113.10:9999/v1", "http://203.0.113.10:9999/v1")
    healthy = {GEMMA: Memory(State.HEALTHY, 0, 0, NOW - 100)}
    silent = plan(fleet, {GEMMA: DOWN, QWEN: DOWN, LEGACY: DOWN}, [moved], healthy)
    (gemma,) = [s for s in silent.servers if s.id == GEMMA]
    assert gemma.verdict.state is State.HEALTHY and gemma.change is None
    assert gemma.why == ("public address moved from http://203.0.113.10:9999/v1 to "
                         "http://203.0.113.10:8001/v1: replaced once it answers")
    answered = plan(fleet, {GEMMA: SERVING, QWEN: DOWN, LEGACY: DOWN}, [moved], healthy)
    assert [(c.id, c.change) for c in changed(answered)] == [(GEMMA, "replace")]


def test_orphans_and_drift(fleet):
    routes = [
        owned("llmao:192.0.2.50:8001:gemma", "gemma", 8001),          # ours, no longer intended
        Route("hand-made", "gemma", "http://192.0.2.60:8001/v1", None),  # not ours
        Route("openai-1", "gpt", "https://api.example/v1", None),        # a commercial route
        owned(QWEN, "gemma", 8002),                                     # model changed
    ]
    result = plan(fleet, {GEMMA: DOWN, QWEN: SERVING, LEGACY: DOWN}, routes,
                  applied={"203.0.113.10": "0123456789abcdef"})
    assert [route.id for route in result.orphans] == ["llmao:192.0.2.50:8001:gemma"]
    changes = {(c.id, c.change) for c in changed(result)}
    assert (QWEN, "replace") in changes
    assert not any(c[0] in ("hand-made", "openai-1") for c in changes)
    kinds = sorted(d["kind"] for d in result.drift)
    assert kinds == ["model_mismatch", "orphan_route", "revision_behind", "unmanaged_route"]


def test_probe_targets_carry_the_bearer_and_address(fleet):
    targets = {t.key: t for t in probe_targets(fleet, LOCAL)}
    assert targets[GEMMA].endpoint.port == 8001
    assert targets[LEGACY].api_key == fleet.settings.fleet.selfhost_api_key


def test_summary_has_no_secret(fleet):
    result = plan(fleet, {GEMMA: SERVING, QWEN: SERVING, LEGACY: SERVING})
    text = repr([p.summary() for p in result.servers]) + repr(result.orphans)
    assert all(s.api_key not in text for s in fleet.servers())


def test_memory_round_trip():
    memory = Memory(State.REJECTED, 0, 2, 12.5)
    assert Memory.from_record(memory.record()) == memory
    assert Memory.from_record(None) == Memory()
    assert Memory.from_record({"state": "Bogus"}).state is None


def test_body_and_model_info(fleet):
    server: IntendedServer = fleet.assignment("203.0.113.10").servers[0]
    body = deployment_body(server, Endpoint("203.0.113.10", 41001, "listing:vast"))
    assert body["model_name"] == "gemma"
    assert body["litellm_params"] == {"model": "hosted_vllm/gemma",
                                      "api_base": "http://203.0.113.10:41001/v1",
                                      "api_key": server.api_key}
    assert body["model_info"]["id"] == deployment_id("203.0.113.10", 8001, "gemma") == GEMMA
    assert body["model_info"]["llmao_public_base"] == "http://203.0.113.10:41001/v1"
    (route,) = parse_model_info({"data": [{**body, "litellm_params": {
        "model": "hosted_vllm/gemma", "api_base": "http://203.0.113.10:41001/v1"}}]})
    assert route.owned and route.id == GEMMA


def test_an_https_route_verifying_against_another_ca_file_is_replaced(fleet):
    """A new box_tls.litellm_ca_path (a file of both CAs, before a rotation) reaches every
    https deployment: re-registered, each verifies its box against the new file."""
    server: IntendedServer = fleet.assignment("203.0.113.10").servers[0]
    secure = Endpoint("203.0.113.10", 41001, "listing:vast", "https")
    body = deployment_body(server, secure, "/etc/llmao/ca.pem")
    assert body["litellm_params"]["ssl_verify"] == "/etc/llmao/ca.pem"
    (route,) = parse_model_info({"data": [{**body, "litellm_params": {
        "model": "hosted_vllm/gemma", "api_base": "https://203.0.113.10:41001/v1"}}]})
    assert route.ca_path == "/etc/llmao/ca.pem"
    assert route_differs(route, server, secure, "/etc/llmao/ca.pem") is None
    assert route_differs(route, server, secure, "/etc/llmao/both.pem") == (
        "LiteLLM verifies the box against /etc/llmao/ca.pem, config says /etc/llmao/both.pem")
    plain = Endpoint("203.0.113.10", 41001, "listing:vast")
    (route,) = parse_model_info({"data": [deployment_body(server, plain, "/etc/llmao/ca.pem")]})
    assert route.ca_path is None and route_differs(route, server, plain, "/x.pem") is None


@pytest.mark.parametrize("document", [None, [], {"data": "x"}, {"models": []}])
def test_misread_model_info_is_an_error(document):
    with pytest.raises(ValueError):
        parse_model_info(document)


def spanning(tmp_path, gpus):
    """The base fleet with gemma's recipe spanning gpus cards."""
    models = base_models()
    models["models"][0]["model_info"]["vllm"]["gpus"] = gpus
    return load_fleet(*write_pair(tmp_path, models=models))


def test_a_box_with_too_few_cards_is_flagged_and_never_registered(tmp_path):
    fleet = spanning(tmp_path, 4)
    seen = Observations(NOW, {"203.0.113.10": NOW - 30}, {}, {}, LOCAL,
                        (owned(GEMMA, "gemma", 8001),), cards={"203.0.113.10": 2})
    result = plan_pass(fleet, seen, {GEMMA: SERVING, QWEN: SERVING, LEGACY: DOWN})
    assert_too_few_cards(result, 4, 2, "the box reported 2")


def assert_too_few_cards(result, needs, cards, source):
    """Gemma's old route goes, qwen (moved onto the short box) is never registered, and the
    drift says why once: gemma needs needs cards, source says cards."""
    by_id = {server.id: server for server in result.servers}
    assert (by_id[GEMMA].change, by_id[QWEN].change) == ("delete", None)
    what = f"too few cards: gemma needs {needs} cards (vllm.gpus of gemma), {source}"
    assert by_id[QWEN].why == what
    assert [item for item in result.drift if item["kind"] == "too_few_cards"] == [{
        "kind": "too_few_cards", "box": "203.0.113.10", "needs": needs, "cards": cards,
        "what": what}]


def listed_with(gpus):
    """Vast lists the box 203.0.113.10 as an instance with ``gpus`` GPUs (None: unsaid)."""
    boxes, _problems = parse_vast({"instances": [
        vast_instance(7, "203.0.113.10", {8001: 48001, 8002: 48002}, 0.4, gpus=gpus)]})
    return index_listings(["vast"], boxes, {})


def test_a_box_its_listing_puts_short_is_flagged_before_it_boots(tmp_path):
    """No card report yet: the provider's GPU count is weighed, with the same drift and the
    same refusal to register as a box that reported too few cards."""
    seen = Observations(NOW, {}, {}, {}, listed_with(1), (owned(GEMMA, "gemma", 48001),))
    result = plan_pass(spanning(tmp_path, 2), seen, {GEMMA: SERVING, QWEN: SERVING,
                                                     LEGACY: DOWN})
    assert_too_few_cards(result, 2, 1, "the provider lists 1 GPU")


@pytest.mark.parametrize(("listed", "cards"), [
    (2, {}), (8, {}), (None, {}),  # enough listed, or the listing does not say
    (1, {"203.0.113.10": 2}),  # the box's own report is the word that counts
])
def test_enough_listed_or_reported_registers_as_usual(tmp_path, listed, cards):
    seen = Observations(NOW, {"203.0.113.10": NOW - 30}, {}, {}, listed_with(listed), (),
                        cards=cards)
    result = plan_pass(spanning(tmp_path, 2), seen, {GEMMA: SERVING, QWEN: SERVING,
                                                     LEGACY: DOWN})
    assert [(c.id, c.change) for c in changed(result)] == [
        (GEMMA, "register"), (QWEN, "register")]
    assert not [item for item in result.drift if item["kind"] == "too_few_cards"]


def test_a_box_that_reports_too_few_is_judged_by_its_report_not_its_listing(tmp_path):
    seen = Observations(NOW, {"203.0.113.10": NOW - 30}, {}, {}, listed_with(8), (),
                        cards={"203.0.113.10": 1})
    result = plan_pass(spanning(tmp_path, 2), seen, {GEMMA: SERVING, QWEN: SERVING,
                                                     LEGACY: DOWN})
    (item,) = [item for item in result.drift if item["kind"] == "too_few_cards"]
    assert (item["cards"], item["what"]) == (
        1, "too few cards: gemma needs 2 cards (vllm.gpus of gemma), the box reported 1")
    assert not changed(result)


@pytest.mark.parametrize("cards", [{}, {"203.0.113.10": 4}, {"203.0.113.10": 8}])
def test_enough_cards_or_none_reported_registers_as_usual(tmp_path, cards):
    seen = Observations(NOW, {"203.0.113.10": NOW - 30}, {}, {}, LOCAL, (), cards=cards)
    result = plan_pass(spanning(tmp_path, 4), seen, {GEMMA: SERVING, QWEN: SERVING,
                                                     LEGACY: DOWN})
    assert [(c.id, c.change) for c in changed(result)] == [
        (GEMMA, "register"), (QWEN, "register")]
    assert not [item for item in result.drift if item["kind"] == "too_few_cards"]
