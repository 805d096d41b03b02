"""The strict exposition reader: vLLM's real output, escapes, special values, refusals."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils import prometheus_text
from ansible_collections.llmao.fleet.plugins.module_utils.prometheus_text import (
    MAX_USUAL_LINE,
    ExpositionError,
    Sample,
    parse_exposition,
    read_exposition,
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


def test_one_reading_serves_each_reader_its_own_names():
    """Read once for two readers: a bad line of one reader's name refuses that reader only;
    a line that names nothing refuses both, as each would have alone."""
    text = 'figure{a="1"} 2\nbucket{le=oops} 3\n# TYPE figure gauge\nother{ 9\n'
    read = read_exposition(text, {"figure", "bucket"})
    (sample,) = read.named({"figure"})
    assert (sample.name, sample.value) == ("figure", 2)
    with pytest.raises(ExpositionError, match="line 2"):
        read.named({"bucket"})
    with pytest.raises(ExpositionError, match="line 1: .*no known type"):
        read_exposition("# TYPE figure gaug\nfigure 1\n", {"figure"}).named({"figure"})
    nameless = read_exposition("figure 1\n9bad 2\n", {"figure", "bucket"})
    for names in ({"figure"}, {"bucket"}):
        with pytest.raises(ExpositionError, match="line 2: .*start with a metric name"):
            nameless.named(names)


@pytest.mark.parametrize("line", [
    'm{a="1",b="x y"} 2', 'm 1', 'm{} 3', 'm{a="1",} 4', 'm{ a = "1" , b="2" } 5 1700000000',
    'm{a="q\\"uote\\\\ and \\n"} +Inf', 'm{le="0.5"} NaN', 'm{a="}{,="} -1.5e3',
    'm\t7', 'm{a="1"}\t-Inf\t-12',
])
def test_a_usual_line_reads_as_the_careful_reading_does(line):
    fast = prometheus_text._usual_sample(line)
    careful = prometheus_text._read_sample(line)
    assert fast is not None
    assert (fast.name, dict(fast.labels), str(fast.value)) == \
        (careful.name, dict(careful.labels), str(careful.value))


@pytest.mark.parametrize("line", [
    'm{a="1",a="2"} 1', 'm{a="\\q"} 1', 'm{a="1" 1', 'm 1x', 'm{a=1} 2', "m " + "9" * 65,
])
def test_an_unusual_line_is_left_to_the_careful_reading(line):
    with pytest.raises(ExpositionError):
        prometheus_text._read_line(line, None)


def spied(monkeypatch, pattern: str, method: str, *kept: str) -> list[str]:
    """Put a spy in place of ``prometheus_text.<pattern>``: its ``method`` notes each text it
    is given, then does what the pattern's own does; ``kept`` methods are the pattern's.
    Returns the texts noted."""
    real = getattr(prometheus_text, pattern)
    noted: list[str] = []

    def spy(text):
        noted.append(text)
        return getattr(real, method)(text)

    monkeypatch.setattr(prometheus_text, pattern, type("Spy", (), {
        method: staticmethod(spy), **{name: getattr(real, name) for name in kept}}))
    return noted


def test_a_long_line_is_read_the_careful_way_only(monkeypatch):
    """Past MAX_USUAL_LINE the one match is not tried: a hostile line is read once."""
    # (no label text already read: the short line is then read by the match)
    monkeypatch.setattr(prometheus_text, "_LABEL_SETS", {})
    matched = spied(monkeypatch, "SAMPLE_LINE", "fullmatch")
    long_label = "x" * MAX_USUAL_LINE
    long, short = read_exposition(f'm{{a="{long_label}"}} 1\nm{{b="1"}} 2\n', {"m"}).named({"m"})
    assert len(long.labels["a"]) == MAX_USUAL_LINE and short.labels == {"b": "1"}
    assert matched == ['m{b="1"} 2']


def test_a_label_set_is_read_once_for_all_its_lines(monkeypatch):
    """The servers of one model write the same label text pass after pass: each is split into
    pairs once, and every line of it still gets its own value."""
    monkeypatch.setattr(prometheus_text, "_LABEL_SETS", {})
    split = spied(monkeypatch, "LABEL_PAIR", "findall", "match")
    text = "".join(f'b{{le="0.5",model_name="m"}} {count}\nb{{le="+Inf",model_name="m"}} '
                   f'{count + 1}\n' for count in range(50))
    for _server in range(3):
        read = read_exposition(text, {"b"}).named({"b"})
        assert [s.value for s in read] == [float(n) for c in range(50) for n in (c, c + 1)]
        assert read[0].labels == {"le": "0.5", "model_name": "m"}
    assert sorted(split) == ['le="+Inf",model_name="m"', 'le="0.5",model_name="m"']


def test_the_label_sets_kept_are_bounded(monkeypatch):
    """A box writing new label text on every line costs memory up to a bound only, a long
    text is never kept, and a refused escape is refused every time."""
    monkeypatch.setattr(prometheus_text, "_LABEL_SETS", {})
    lines = [f'b{{n="{number}"}} 1' for number in range(prometheus_text.MAX_LABEL_SETS + 10)]
    assert len(read_exposition("\n".join(lines), {"b"}).named({"b"})) == len(lines)
    assert 0 < len(prometheus_text._LABEL_SETS) <= prometheus_text.MAX_LABEL_SETS
    long_text = "x" * (prometheus_text.MAX_KEPT_LABEL_TEXT + 1)
    (sample,) = read_exposition(f'b{{a="{long_text}"}} 1', {"b"}).named({"b"})
    assert sample.labels["a"] == long_text
    assert all(long_text not in text for text in prometheus_text._LABEL_SETS)
    for _time in range(2):
        with pytest.raises(ExpositionError, match="unknown escape"):
            read_exposition('b{a="\\q"} 1', {"b"}).named({"b"})


def strictly(text: str, names: Collection[str]) -> tuple[list[tuple], list[tuple]]:
    """What :func:`read_exposition` must give: every line read the strict way, one by one
    (no line skipped, no sample taken from the caches), as comparable tuples."""
    samples, problems = [], []
    for number, line in enumerate(text.split("\n"), start=1):
        try:
            sample = prometheus_text._read_line(line, names)
        except ExpositionError as exc:
            problems.append((prometheus_text._named(line, names), f"line {number}: {exc}"))
            continue
        if sample is not None:
            samples.append(sample)
    return as_read(samples), problems


def as_read(samples: Collection[Sample]) -> list[tuple]:
    """Samples as comparable tuples (NaN compared by its repr)."""
    return [(sample.name, dict(sample.labels), repr(sample.value)) for sample in samples]


def read_warm(text: str, names: Collection[str]) -> tuple[list[tuple], list[tuple]]:
    """:func:`read_exposition` on ``text`` read once before: every label text, value text and
    comment it accepted is then in the caches, and read from them."""
    read_exposition(text, names)
    read = read_exposition(text, names)
    return as_read(read.samples), list(read.problems)


# Lines that start as a usual one, and whose label text or value text was read before.
WARM = 'm{a="1"} 1\nm{a="1"} 0.0\nm{le="0.5"} 1 1700000000000\nm{} 2\nm 3\n# TYPE m gauge\n'


@pytest.mark.parametrize("line", [
    'm{a="1"} 1x', 'm{a="1"}} 1', 'm{a="1"}1', 'm{a="1"} 1 2 3', 'm{a="1"} 1\r',
    'm{a="1"}\t1\t-5', 'm{a="1"} 1 1700000000000', 'm{a="1"} 1 1.5', 'm{a="1"} +Inf',
    'm{a="1"} -Inf', 'm{a="1"} NaN', 'm{a="1"} Inf', 'm{a="1"} nan', 'm{a="1"} infinity',
    'm{a="1"} \u0663', 'm{a="1"} ' + "9" * 65, 'm{a="1"}  \t 1 ', 'm{a="1",a="2"} 1',
    'm{a="1",a="1"} 1', 'm{a="q\\"uote"} 1', 'm{a="\\q"} 1', 'm{a="}"} 1', 'm{a="1"} 1 }',
    'm{} 1', 'm{}{} 1', 'm{ } 1', 'm 1', ' m{a="1"} 1', 'm {a="1"} 1', 'mx{a="1"} 1',
    'm_bucket{a="1"} 1', 'm{a="1"', 'm{', 'm}', '}', 'm{a="1"} 1\r\n',
    'm{a="1"}' + " " * MAX_USUAL_LINE + "1", 'm{a="' + "x" * MAX_USUAL_LINE + '"} 1',
    '# TYPE m gauge', '# TYPE m gauge\r', '# TYPE m gauges', '# TYPE m', '# HELP m', '# HELP',
    '#HELP m x', '# HELP mx x', '# TYPE mx nonsense', '# HELP m_bucket {a="1"} 1', '#', '',
    '  ', 'junk', '9m 1',
])
def test_a_line_reads_from_the_caches_as_the_strict_reader_reads_it(line):
    """A line made of texts already read, or nearly: the same sample, or the same problem."""
    text = WARM + line + "\n" + WARM
    names = {"m", "m_bucket"}
    assert read_warm(text, names) == strictly(text, names)


PIECES = {
    "name": ["m", "m_bucket", "mx", "other", "9m", " m", "", "m:x", "# HELP m", "# TYPE m",
             "# TYPE m_bucket", "# HELP other", "#"],
    "labels": ["", "{}", '{a="1"}', '{le="0.5",b="x y"}', '{a="1",}', '{ a = "1" , b="2" }',
               '{a="q\\"uote\\\\ and \\n"}', '{a="}{,="}', '{a="1",a="2"}', '{a="\\q"}',
               '{a="1" b="2"}', '{a=1}', '{a="1"', '{1a="1"}', "{"],
    "value": [" 1", " 0.0", " 1.0", "\t-Inf", " NaN", " +Inf 123", " 1.5e3", " 1x", "1",
              " 1 2 3", " 1\r", "\t1\t-5", " \u0663", " 9" + "9" * 64, " 1 1.5", "", " ",
              " gauge", " text with {braces}", " .5", " -0"],
}


def random_line(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES[piece]) for piece in ("name", "labels", "value"))


@pytest.mark.parametrize("names", [{"m", "m_bucket"}, {"m"}, {"other", "m x", "m{"}, set()])
def test_any_lines_read_as_the_strict_reader_reads_them(names):
    """Lines made of usual and unusual pieces, each text read more than once: the caches
    and the lines skipped change nothing of what is read or refused, nor of which line."""
    rng = random.Random(7)
    for _text in range(200):
        text = "\n".join(random_line(rng) for _line in range(rng.randint(1, 12)))
        assert read_warm(text, names) == strictly(text, names), text


def test_the_value_texts_and_comments_kept_are_bounded(monkeypatch):
    """New value text and comments on every line cost memory up to a bound only."""
    monkeypatch.setattr(prometheus_text, "_VALUE_TEXTS", {})
    monkeypatch.setattr(prometheus_text, "_CHECKED_COMMENTS", set())
    values = [f'b{{a="1"}} {number}' for number in range(prometheus_text.MAX_VALUE_TEXTS + 10)]
    read = read_exposition("\n".join(values * 2), {"b"}).named({"b"})
    assert [sample.value for sample in read] == list(range(len(values))) * 2
    assert 0 < len(prometheus_text._VALUE_TEXTS) <= prometheus_text.MAX_VALUE_TEXTS
    comments = [f"# HELP b {number}" for number in range(prometheus_text.MAX_CHECKED_COMMENTS
                                                         + 10)]
    assert read_exposition("\n".join(comments), {"b"}).named({"b"}) == []
    assert 0 < len(prometheus_text._CHECKED_COMMENTS) <= prometheus_text.MAX_CHECKED_COMMENTS
    for _time in range(2):
        with pytest.raises(ExpositionError, match="no known type"):
            read_exposition("# TYPE b gauges", {"b"}).named({"b"})


def test_a_sample_is_a_frozen_record():
    """Samples made the fast way keep the dataclass's defaults, equality and immutability."""
    sample = Sample("m")
    assert (sample.name, dict(sample.labels), sample.value) == ("m", {}, 0.0)
    assert sample == Sample("m", {}, 0.0) and sample != Sample("m", {}, 1.0)
    assert repr(Sample("m", {"a": "1"}, 2.0)) == "Sample(name='m', labels={'a': '1'}, value=2.0)"
    with pytest.raises(AttributeError):
        sample.value = 1.0  # type: ignore[misc]


def test_an_answer_of_malformed_lines_costs_one_count_of_its_lines():
    """Each problem names its line; counting each from the text's start would make a box's
    answer of 60,000 malformed lines (1.8 MB, under the scrape's cap) cost minutes."""
    lines = 60_000
    text = "".join(f"b{{a=1}} {number}\n" for number in range(lines))
    began = time.monotonic()
    read = read_exposition(text, {"b"})
    assert time.monotonic() - began < 4  # (8.6 s counted from the start, 0.4 s on from the last)
    assert len(read.problems) == lines
    assert read.problems[-1][1].startswith(f"line {lines}: ")
