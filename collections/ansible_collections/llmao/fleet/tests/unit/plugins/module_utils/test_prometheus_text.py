"""The strict exposition reader: vLLM's real output, escapes, special values, refusals."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.prometheus_text import (
    ExpositionError,
    Sample,
    parse_exposition,
)

DATA = Path(__file__).parent / "data"


def samples_named(samples: list[Sample], name: str) -> Iterator[Sample]:
    """The samples of one metric name, in order."""
    return (sample for sample in samples if sample.name == name)


def test_vllm_v1_exposition_reads_every_sample():
    samples = parse_exposition((DATA / "vllm_v1_metrics.txt").read_text())
    assert len(samples) == 21
    info = next(samples_named(samples, "vllm:cache_config_info"))
    assert info.labels["num_gpu_blocks"] == "4096"
    assert info.labels["block_size"] == "16"
    assert info.labels["num_cpu_blocks"] == "None"
    assert info.value == 1.0
    buckets = list(samples_named(samples, "vllm:time_to_first_token_seconds_bucket"))
    assert buckets[-1].labels["le"] == "+Inf"
    nan = next(samples_named(samples, "vllm:spec_decode_draft_acceptance_rate"))
    assert math.isnan(nan.value)


def test_label_escapes_special_values_and_timestamps():
    text = ('# a free comment\n'
            'm{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb",} +Inf 1764570000000\n'
            'm{path="x"} -Inf\n'
            'm  NaN\n'
            'm{ spaced = "v" , other="w" } 1.5e3\n'
            'plain 42\n')
    first, second, third, fourth, fifth = parse_exposition(text)
    assert first.labels == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb"}
    assert first.value == math.inf and second.value == -math.inf
    assert math.isnan(third.value) and third.labels == {}
    assert fourth.labels == {"spaced": "v", "other": "w"} and fourth.value == 1500.0
    assert fifth.name == "plain" and fifth.value == 42


@pytest.mark.parametrize(("text", "why"), [
    ('m{a="1"} twelve', "not a number"),
    ('m{a="1} 1', "not closed"),
    ('m{a="\\q"} 1', "unknown escape"),
    ('m{a="1",a="2"} 1', "given twice"),
    ('m{1a="1"} 1', "label name"),
    ('m{a=1} 1', "quoted value"),
    ('m{a="1" b="2"} 1', "',' or '}'"),
    ("m 1 2 3", "optional timestamp"),
    ("m 1 1.5", "not an integer"),
    ("m \u0663", "not a number"),            # an Arabic-Indic digit: float() takes it
    ("m 1 \u0663", "not an integer"),
    ("m " + "9" * 401, "over 64 characters"),  # a huge number is refused, not read as inf
    ("m 1 " + "9" * 401, "not an integer"),
    ("m{a=\"1\"}1", "space must separate"),
    ("9m 1", "start with a metric name"),
    ("# TYPE m gauges", "no known type"),
    ("# HELP", "without a valid metric name"),
    ("m", "space must separate"),
])
def test_malformed_lines_are_refused_with_their_line(text, why):
    with pytest.raises(ExpositionError, match=f"line 2: .*{why}"):
        parse_exposition("ok 1\n" + text + "\n")


def test_names_limit_what_is_read_and_checked():
    text = "# TYPE other summaryish\nother{a=\"1} 2\nwanted{a=\"1\"} 3\n# HELP wanted fine\n"
    (sample,) = parse_exposition(text, {"wanted"})
    assert (sample.name, sample.value) == ("wanted", 3)
    with pytest.raises(ExpositionError, match="line 1"):
        parse_exposition(text)
    with pytest.raises(ExpositionError, match="line 2"):
        parse_exposition("ok 1\nwanted{a=1} 2\n", {"wanted"})
