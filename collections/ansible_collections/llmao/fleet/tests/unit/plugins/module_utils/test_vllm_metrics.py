"""Reading a vLLM's figures: V1 and V0 names, unknown never zero, the JSON round trip."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.vllm_metrics import (
    MAX_FIGURE,
    MetricsRecordError,
    ServerMetrics,
    is_figure,
    read_figures,
    read_metrics,
)
from rig.hostile_vllm import EXPOSITIONS

DATA = Path(__file__).parent / "data"
MODELS = json.dumps({"object": "list", "data": [
    {"id": "other", "max_model_len": 4096},
    {"id": "gemma4-26b", "object": "model", "max_model_len": 32768}]}).encode()
NOW = 1764570000.0


def test_v1_exposition():
    metrics = read_metrics((DATA / "vllm_v1_metrics.txt").read_text(), MODELS, "gemma4-26b", NOW)
    assert metrics == ServerMetrics(kv_cache_tokens=4096 * 16, kv_cache_usage_ratio=0.4375,
                                    requests_running=3, requests_waiting=2,
                                    prompt_tokens_total=51234, generation_tokens_total=120345,
                                    max_model_len=32768, scraped_at=NOW)


def test_v0_exposition_uses_the_old_usage_name_and_reads_zeros_as_zeros():
    metrics = read_metrics((DATA / "vllm_v0_metrics.txt").read_text(), None, "x", NOW)
    assert metrics.kv_cache_tokens == 16384
    assert metrics.kv_cache_usage_ratio == 0.0
    assert (metrics.requests_running, metrics.requests_waiting) == (0, 0)
    assert metrics.generation_tokens_total == 0
    assert metrics.max_model_len is None


def test_several_engines_sum_counts_and_take_the_smallest_cache():
    text = "\n".join([
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1',
        'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="80"} 1',
        'vllm:num_requests_waiting{engine="0",model_name="m"} 1',
        'vllm:num_requests_waiting{engine="1",model_name="m"} 2',
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2',
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7',
    ])
    metrics = read_metrics(text, None, "m", NOW)
    assert (metrics.kv_cache_tokens, metrics.requests_waiting) == (1280, 3)
    assert metrics.kv_cache_usage_ratio == 0.7


@pytest.mark.parametrize("text", [
    "",
    "garbage that is not the format {",
    'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1\n'
    "vllm:num_requests_waiting NaN\nvllm:kv_cache_usage_perc 1.5\n"
    "vllm:generation_tokens_total -3\nvllm:prompt_tokens_total +Inf\n"
    "vllm:num_requests_running{engine=\"0\"} NaN",
    'vllm:cache_config_info{block_size="sixteen",num_gpu_blocks="10"} 1',
    'vllm:cache_config_info{num_gpu_blocks="10"} 1',
    'vllm:cache_config_info{block_size="16",num_gpu_blocks="0"} 1',
])
def test_missing_or_malformed_figures_are_unknown(text):
    metrics = read_metrics(text, b"not json", "m", NOW)
    assert metrics == ServerMetrics(scraped_at=NOW)


def test_a_malformed_line_of_a_figure_makes_the_whole_exposition_unknown():
    text = (DATA / "vllm_v1_metrics.txt").read_text() + 'vllm:num_requests_waiting{a="1} 2\n'
    assert read_metrics(text, MODELS, "gemma4-26b", NOW) == ServerMetrics(
        max_model_len=32768, scraped_at=NOW)


def test_a_malformed_line_of_another_metric_is_not_read():
    good = (DATA / "vllm_v1_metrics.txt").read_text()
    assert read_metrics(good + 'vllm:other{a="1} 2\n', MODELS, "gemma4-26b", NOW) == \
        read_metrics(good, MODELS, "gemma4-26b", NOW)


@pytest.mark.parametrize("body", [
    b'{"data": [{"id": "m", "max_model_len": "8192"}]}',
    b'{"data": [{"id": "m", "max_model_len": true}]}',
    b'{"data": [{"id": "m"}]}',
    b'{"data": {"id": "m"}}',
    b"[]",
])
def test_max_model_len_must_be_a_positive_integer_of_the_served_name(body):
    assert read_metrics(None, body, "m", NOW).max_model_len is None


def test_record_round_trip_through_json():
    metrics = read_metrics((DATA / "vllm_v1_metrics.txt").read_text(), MODELS, "gemma4-26b", NOW)
    assert ServerMetrics.from_record(json.loads(json.dumps(metrics.record()))) == metrics
    assert ServerMetrics.from_record({}) == ServerMetrics()
    assert ServerMetrics.from_record({"kv_cache_tokens": 64.0}).kv_cache_tokens == 64


@pytest.mark.parametrize("record", [
    [], {"kv_cache_tokens": "64"}, {"requests_waiting": True}, {"max_model_len": 1.5},
    {"kv_cache_usage_ratio": float("nan")},
])
def test_record_of_the_wrong_shape_is_refused(record):
    with pytest.raises(MetricsRecordError):
        ServerMetrics.from_record(record)


@pytest.mark.parametrize("fault", ["squared", "long_label", "overflow", "long_number",
                                   "odd_unicode", "duplicate_engines"])
def test_a_hostile_answer_never_raises_and_leaves_every_figure_unknown(fault):
    # Issue 18, item 3: "²" passes isdigit() and fails int(); a 5,000-digit label fails
    # int(); two engines at 1.7e308 sum to inf; a 401-digit value. Each raised out of here.
    text = EXPOSITIONS[fault].replace("{name}", "gemma4-26b")
    metrics, reason = read_figures(text, MODELS, "gemma4-26b", NOW)
    assert metrics == ServerMetrics(max_model_len=32768, scraped_at=NOW)
    assert reason and len(reason) <= 200
    assert read_metrics(text, MODELS, "gemma4-26b", NOW) == metrics


def test_figures_are_bounded_where_read():
    labels = 'engine="0",model_name="m"'
    at_bound = f"vllm:num_requests_running{{{labels}}} {float(MAX_FIGURE)}\n"
    assert read_figures(at_bound, None, "m", NOW)[0].requests_running == MAX_FIGURE
    # Two engines each within bounds, but not their sum.
    two = at_bound + f'vllm:num_requests_running{{engine="1",model_name="m"}} {MAX_FIGURE}\n'
    assert read_figures(two, None, "m", NOW) == (
        ServerMetrics(scraped_at=NOW), "vllm:num_requests_running sums out of bounds")
    # Blocks × block size past the bound, each label a few digits.
    cache = 'vllm:cache_config_info{block_size="999999999",num_gpu_blocks="999999999"} 1\n'
    assert read_figures(cache, None, "m", NOW)[1] == "vllm:cache_config_info is out of bounds"
    # A cache not yet profiled is unknown, not unreadable.
    assert read_figures('vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1\n',
                        None, "m", NOW) == (ServerMetrics(scraped_at=NOW), "")


@pytest.mark.parametrize("value", [10**401, -(2**60), 1.7e308, True, "3", math.inf])
def test_a_record_figure_out_of_bounds_is_refused_not_a_crash(value):
    assert not is_figure(value)
    with pytest.raises(MetricsRecordError, match="within"):
        ServerMetrics.from_record({"kv_cache_tokens": value})
