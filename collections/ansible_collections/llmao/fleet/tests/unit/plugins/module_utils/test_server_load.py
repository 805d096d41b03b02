"""Oversized, saturated, capacity and cost from scraped figures; the wire form reconcile posts."""

from __future__ import annotations

import json
import math

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import LoadKnobs
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Memory
from ansible_collections.llmao.fleet.plugins.module_utils.server_load import (
    BoxCost,
    ModelLoad,
    ServerLoad,
    box_cost,
    cost_share,
    generation_rate,
    load_document,
    model_load,
    read_load_document,
    remember_load,
    server_load,
    with_latency,
)
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_latency import Cumulative
from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import (
    MAX_FIGURE,
    MetricsRecordError,
    ServerMetrics,
)

KNOBS = LoadKnobs(saturated_passes=3, saturated_kv_usage=0.9)
NOW = 1764570000.0


def figures(**values) -> ServerMetrics:
    base = {"kv_cache_tokens": 65536, "kv_cache_usage_ratio": 0.2, "requests_running": 1,
            "requests_waiting": 0, "prompt_tokens_total": 10, "generation_tokens_total": 1000,
            "max_model_len": 32768, "scraped_at": NOW}
    return ServerMetrics(**{**base, **values})


def load(metrics, configured=None, healthy=True, waiting=0, previous=(None, None), cost=None):
    return server_load(metrics, configured, healthy, Memory(
        waiting_passes=waiting, generation_tokens_total=previous[0],
        generation_counted_at=previous[1]), cost, KNOBS)


@pytest.mark.parametrize(("metrics", "configured", "context", "oversized"), [
    (figures(), None, 32768, False),
    (figures(kv_cache_tokens=32768), None, 32768, False),
    (figures(kv_cache_tokens=32767), None, 32768, True),
    (figures(max_model_len=None), 131072, 131072, True),   # observed unknown: configured
    (figures(max_model_len=8192), 131072, 8192, False),    # observed wins
    (figures(max_model_len=None), None, None, None),
    (figures(kv_cache_tokens=None), None, 32768, None),
    (None, 4096, 4096, None),
])
def test_oversized(metrics, configured, context, oversized):
    verdict = load(metrics, configured)
    assert (verdict.context_len, verdict.oversized) == (context, oversized)


def test_saturated_after_waiting_on_several_consecutive_passes():
    waiting = figures(requests_waiting=4)
    passes = [load(waiting, waiting=0)]
    for _pass in range(3):
        passes.append(load(waiting, waiting=passes[-1].waiting_passes))
    assert [p.waiting_passes for p in passes] == [1, 2, 3, 4]
    assert [p.saturated for p in passes] == [False, False, True, True]
    assert load(figures(), waiting=5).waiting_passes == 0
    assert load(figures(requests_waiting=None), waiting=5).waiting_passes == 0


@pytest.mark.parametrize(("metrics", "healthy", "saturated"), [
    (figures(kv_cache_usage_ratio=0.95), True, True),
    (figures(kv_cache_usage_ratio=0.9), True, False),
    (figures(kv_cache_usage_ratio=None), True, False),
    (figures(kv_cache_usage_ratio=None, requests_waiting=None), True, None),
    (None, True, None),
    (figures(kv_cache_usage_ratio=0.99), False, False),
])
def test_saturated_by_kv_usage_and_only_when_healthy(metrics, healthy, saturated):
    assert load(metrics, healthy=healthy).saturated is saturated


@pytest.mark.parametrize(("total", "previous", "rate"), [
    (1600, (1000, NOW - 60), 10.0),
    (1000, (1000, NOW - 60), 0.0),
    (10, (1000, NOW - 60), None),        # the counter went back: vLLM restarted
    (1600, (1000, NOW), None),
    (1600, (None, None), None),
    (None, (1000, NOW - 60), None),
])
def test_generation_rate_across_passes(total, previous, rate):
    assert generation_rate(figures(generation_tokens_total=total), *previous) == rate


def test_model_capacity_load_and_cost():
    one = load(figures(kv_cache_tokens=70000, requests_waiting=1), previous=(400, NOW - 60),
               cost=0.5)
    two = load(figures(kv_cache_tokens=40000, requests_running=2), previous=(1000, NOW - 100),
               cost=0.25)
    down = load(None, healthy=False, cost=0.25)
    model = model_load([(one, True), (two, True), (down, False)])
    assert model.servers == 3 and model.healthy == 2
    assert model.capacity == 70000 // 32768 + 40000 // 32768 == 3
    assert model.kv_cache_tokens == 110000
    assert (model.requests_running, model.requests_waiting) == (3, 1)
    assert model.generation_tokens_per_s == 10.0
    assert model.cost_per_hour == 1.0
    assert model.cost_per_million_tokens == pytest.approx(1.0 / (10 * 3600 / 1e6))
    assert model.saturated is False and model.oversized == 0


def test_model_sums_with_an_unknown_term_are_unknown():
    known = load(figures(), previous=(400, NOW - 60), cost=0.5)
    blind = load(figures(kv_cache_tokens=None, requests_waiting=None,
                         kv_cache_usage_ratio=None), cost=None)
    model = model_load([(known, True), (blind, True)])
    assert model.capacity is None and model.kv_cache_tokens is None
    assert model.requests_waiting is None and model.cost_per_hour is None
    assert model.saturated is None and model.cost_per_million_tokens is None
    assert model_load([(known, False)]).saturated is None
    assert model_load([(load(figures(kv_cache_usage_ratio=0.99)), True), (blind, True)]) \
        .saturated is True


def test_tokens_per_s_counts_the_servers_that_have_a_rate():
    """A server that just restarted has no rate this pass: the model's rate is the others'
    (not unknown), and no cost per million tokens is made of a part of its tokens."""
    steady = load(figures(), previous=(400, NOW - 60), cost=0.5)
    restarted = load(figures(generation_tokens_total=5), previous=(9000, NOW - 60), cost=0.5)
    assert restarted.generation_tokens_per_s is None
    model = model_load([(steady, True), (restarted, True)])
    assert model.generation_tokens_per_s == 10.0
    assert model.cost_per_hour == 1.0 and model.cost_per_million_tokens is None
    assert model_load([(restarted, True)]).generation_tokens_per_s is None


def test_nothing_generated_has_no_cost_per_million():
    idle = load(figures(), previous=(1000, NOW - 60), cost=0.5)
    assert model_load([(idle, True)]).cost_per_million_tokens is None


def test_pass_document_round_trip_through_json():
    servers = {"s1": load(figures(kv_cache_tokens=100), previous=(400, NOW - 60), cost=0.5),
               "s2": load(None, healthy=False)}
    models = {"m": model_load([(servers["s1"], True), (servers["s2"], False)])}
    boxes = {"b": BoxCost("vast", 0.5, "listing"), "c": BoxCost("local")}
    posted = {"pass_at": NOW, "drift": [], "verdicts": {
        key: {"state": "Healthy", **value.record()} for key, value in servers.items()},
        **load_document(models, boxes)}
    assert read_load_document(json.loads(json.dumps(posted))) == (servers, models, boxes)
    assert servers["s1"].oversized is True


def test_a_pass_without_loads_reads_as_unknown():
    servers, models, boxes = read_load_document({"verdicts": {"s": {"state": "Healthy"}}})
    assert servers == {"s": ServerLoad()} and models == {} and boxes == {}
    assert ModelLoad.from_record({}) == ModelLoad()


@pytest.mark.parametrize("document", [
    [], {"models": []}, {"verdicts": {"s": {"oversized": "yes"}}},
    {"verdicts": {"s": {"metrics": {"kv_cache_tokens": "many"}}}},
    {"models": {"m": {"capacity": 1.5}}}, {"models": {"m": {"saturated": 1}}},
    {"boxes": {"b": {"cost_per_hour": 1}}}, {"boxes": {"b": {"provider": "vast",
                                                             "source": "guess"}}},
])
def test_documents_of_the_wrong_shape_are_refused(document):
    with pytest.raises(MetricsRecordError):
        read_load_document(document)


def test_memory_keeps_the_last_counter_read():
    previous = Memory(waiting_passes=1, generation_tokens_total=400, generation_counted_at=NOW - 60)
    read = load(figures(requests_waiting=2), waiting=1)
    assert remember_load(Memory(), previous, read) == Memory(
        waiting_passes=2, generation_tokens_total=1000, generation_counted_at=NOW)
    blind = load(None)
    assert remember_load(Memory(), previous, blind) == Memory(
        waiting_passes=0, generation_tokens_total=400, generation_counted_at=NOW - 60)


def test_box_cost_listing_first_then_config_shared_by_its_servers():
    assert box_cost("vast", 0.9, 0.5) == BoxCost("vast", 0.9, "listing")
    assert box_cost("local", None, 0.5) == BoxCost("local", 0.5, "config")
    assert box_cost("local", None, None) == BoxCost("local")
    assert cost_share(BoxCost("vast", 0.9, "listing"), 3) == pytest.approx(0.3)
    assert cost_share(BoxCost("local"), 3) is None


def test_a_pass_at_the_bounds_still_posts():
    # One box at the largest figure believed, beside an honest one: the sums, the rate over
    # a short time and the cost per token pass the bound; llmao would refuse the whole
    # pass (issue 18, item 3), so each is unknown instead.
    huge = load(figures(kv_cache_tokens=MAX_FIGURE, requests_running=MAX_FIGURE,
                        generation_tokens_total=MAX_FIGURE), previous=(0, NOW - 1e-3), cost=0.5)
    honest = load(figures(), previous=(400, NOW - 60), cost=0.5)
    model = model_load([(huge, True), (honest, True)])
    assert huge.generation_tokens_per_s is None
    assert model.kv_cache_tokens is None and model.requests_running is None
    assert model.requests_waiting == 0 and model.cost_per_hour == 1.0
    slow = load(figures(generation_tokens_total=1001), previous=(1000, NOW - 1e9), cost=1e15)
    assert model_load([(slow, True)]).cost_per_million_tokens is None
    posted = {"pass_at": NOW, "drift": [], "verdicts": {
        "s1": {"state": "Healthy", **huge.record()},
        "s2": {"state": "Healthy", **honest.record()}},
        **load_document({"m": model}, {})}
    assert read_load_document(json.loads(json.dumps(posted)))[1]["m"] == model


def test_a_model_with_a_latency_out_of_bounds_still_posts():
    # A box whose histogram has a bound at 1e300 s and whose preemption counter leapt to
    # 2**53, beside an honest one: unknown figures, a pass document llmao reads back.
    far = ((1e300, 0.0), (math.inf, 0.0)), ((1e300, 10.0), (math.inf, 10.0))
    before = Cumulative({"e2e": far[0]}, 0.0)
    scrapes = [(before, Cumulative({"e2e": far[1]}, 2.0**53)),
               (before, Cumulative({"e2e": far[1]}, 3.0))]
    server = with_latency(load(figures()), scrapes[0])
    model = model_load([(server, True), (server, True)], scrapes)
    assert server.latency.e2e_p50_s is None and server.latency.preemptions == 2**53
    assert model.latency.e2e_p50_s is None and model.latency.preemptions is None
    posted = {"pass_at": NOW, "drift": [], "verdicts": {"s": {"state": "Healthy",
                                                              **server.record()}},
              **load_document({"m": model}, {})}
    assert read_load_document(json.loads(json.dumps(posted))) == ({"s": server}, {"m": model}, {})
