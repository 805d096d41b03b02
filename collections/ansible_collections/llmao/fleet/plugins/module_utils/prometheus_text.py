# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A strict reader of Prometheus' text exposition format (version 0.0.4).

The core may only use the standard library and PyYAML, so prometheus_client's
parser is out of reach. This one reads what vLLM's ``/metrics`` answers and
refuses anything it does not understand instead of guessing: a line it cannot
read raises :class:`ExpositionError` naming the line, and the caller treats the
whole answer as unknown. Only samples are returned; ``# HELP`` and ``# TYPE``
lines are checked for shape and otherwise skipped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# The characters a metric name may start with: a line starting with one is a sample line.
NAME_STARTS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
METRIC_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})
ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
# A label's value between its quotes, written as runs of plain characters between escapes
# ("unrolled"): the same strings as (?:[^"\\]|\\.)*, read in a few steps, not one a character.
_QUOTED = r'[^"\\]*(?:\\.[^"\\]*)*'
LABEL_PAIR = re.compile(rf'(?P<name>[a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"(?P<value>{_QUOTED})"')
# A whole sample line of the usual shape (name, labels, value, timestamp): most lines are
# read by this one match and a split of the labels into pairs; a line it does not fit is
# read piece by piece, which says what is wrong with it.
_PAIR = rf'[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"{_QUOTED}"'
# Pairs apart by commas, a trailing comma allowed; each pair is matched once (never tried
# as "a pair and a comma" and again as "the last pair").
_LABELS = rf'(?:{_PAIR}(?:[ \t]*,{_PAIR})*(?:[ \t]*,)?)?[ \t]*'
# The value is a number as NUMBER reads it, or one of SPECIAL_VALUES (each of which float()
# reads as Prometheus means it), at most MAX_NUMBER_CHARS long.
_VALUE = (r'(?=[^ \t]{1,64}(?:[ \t]|$))'
          r'(?:[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN)')
# What follows the name and labels: blanks, the value and an optional timestamp.
_VALUE_PART = rf'[ \t]+(?P<value>{_VALUE})(?:[ \t]+-?[0-9]{{1,20}})?'
SAMPLE_LINE = re.compile(r'(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)'
                         rf'(?:\{{(?P<labels>{_LABELS})\}})?{_VALUE_PART}')
VALUE_PART = re.compile(_VALUE_PART)
# vLLM's longest line (its cache config) is some 1,000 characters: a line longer than this
# is read the slow way only, so that a hostile one costs no second reading.
MAX_USUAL_LINE = 4096
ESCAPE = re.compile(r"\\(.)")
SPECIAL_VALUES = {"+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
# ASCII digits only (``\d`` takes any script's), and short: a float's repr is 24 characters.
NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
MAX_NUMBER_CHARS = 64
TIMESTAMP = re.compile(r"-?[0-9]{1,20}")


class ExpositionError(ValueError):
    """The text is not in the exposition format; the message names the line."""


# The labels of a sample given none: one empty mapping no one can change, for all.
NO_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True, init=False)
class Sample:
    """One sample line: the metric name, its labels and its value."""

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: NO_LABELS)
    value: float = 0.0

    def __init__(self, name: str, labels: Mapping[str, str] = NO_LABELS,
                 value: float = 0.0) -> None:
        # The generated __init__ of a frozen dataclass sets each field through
        # object.__setattr__, nearly twice as slow as the fields' own slots; an answer makes
        # 70 samples and a pass reads 300 answers. (Frozen forbids setting a field
        # afterwards, not this.)
        _SET_NAME(self, name)
        _SET_LABELS(self, labels)
        _SET_VALUE(self, value)


# The setters of Sample's slots, fetched once.
_SET_NAME = Sample.name.__set__  # type: ignore[attr-defined]
_SET_LABELS = Sample.labels.__set__  # type: ignore[attr-defined]
_SET_VALUE = Sample.value.__set__  # type: ignore[attr-defined]


def parse_exposition(text: str, names: Collection[str] | None = None) -> list[Sample]:
    """Every sample of ``text``, in order; the first malformed line raises.

    With ``names``, only the lines of those metrics are read (and checked):
    vLLM's histograms are most of its answer and a pass reads 300 of them.
    """
    samples = []
    for number, line in enumerate(text.split("\n"), start=1):
        try:
            sample = _read_line(line, names)
        except ExpositionError as exc:
            raise ExpositionError(f"line {number}: {exc}") from None
        if sample is not None:
            samples.append(sample)
    return samples


@dataclass(frozen=True)
class Exposition:
    """One answer read once for every reader of it: the samples of the names read, in
    order, and each line that is not in the format, with the name it concerns.

    A reader asks for its own names (:meth:`named`) and is refused only for a line of
    those names (or a line with no name at all), as if it had parsed the text alone.
    """

    samples: tuple[Sample, ...] = ()
    # (the metric name, or None when the line names none; what is wrong, with its line)
    problems: tuple[tuple[str | None, str], ...] = ()

    def named(self, names: Collection[str]) -> list[Sample]:
        """The samples of ``names``, in order; the first malformed line of them raises."""
        for name, problem in self.problems:
            if name is None or name in names:
                raise ExpositionError(problem)
        return [sample for sample in self.samples if sample.name in names]


def read_exposition(text: str, names: Collection[str]) -> Exposition:
    """The lines of ``names`` read once (see :class:`Exposition`); never raises.

    A sample line of a metric not in ``names`` is skipped unparsed, and so is its
    ``# HELP`` or ``# TYPE`` line, inside one match (:func:`_lines_of`): vLLM's answer
    is 600 lines, of which a pass reads 80, for each of 300 servers (P7,
    docs/metrics.md). A usual line whose label text and value text were read before is
    read from them (:func:`_known_sample`), and a comment checked before is not checked
    again; every other line is read the strict way.
    """
    reading = _reading(names)
    lines = "\n" + text
    samples, problems = [], []
    counted = _LineCount(lines)
    for found in reading.lines.finditer(lines):
        line = found.group(1)
        sample = _known_sample(line, reading.names)
        # (a comment checked whole is refused for no names: _read_line reads None of it)
        if sample is None and line not in _CHECKED_COMMENTS:
            try:
                sample = _read_line(line, names)
            except ExpositionError as exc:
                problems.append((_named(line, names),
                                 f"line {counted.at(found.start())}: {exc}"))
                continue
        if sample is not None:
            samples.append(sample)
    return Exposition(tuple(samples), tuple(problems))


class _LineCount:
    """The number of the line at a position, counted on from the last one asked for: an
    answer of many malformed lines costs one count over the text, not one from its start
    for each (which a box could make quadratic)."""

    def __init__(self, text: str):
        self.text, self.position, self.number = text, 0, 0

    def at(self, position: int) -> int:
        """The number of the line that starts after the line break at ``position``."""
        self.number += self.text.count("\n", self.position, position + 1)
        self.position = position + 1
        return self.number


@dataclass(frozen=True)
class _Reading:
    """How the lines of some names are found in a whole text, and those names that are
    metric names (only a line of one of them may be read from the caches)."""

    lines: re.Pattern
    names: frozenset[str]


# The readings made, by their names: the probe asks for the same names on every answer.
_READINGS: dict[frozenset[str], _Reading] = {}
MAX_READINGS = 16


def _reading(names: Collection[str]) -> _Reading:
    """The :class:`_Reading` of ``names``, made once."""
    key = frozenset(names)
    reading = _READINGS.get(key)
    if reading is None:
        if len(_READINGS) >= MAX_READINGS:
            _READINGS.clear()
        reading = _READINGS[key] = _Reading(
            _lines_of(key), frozenset(name for name in key if METRIC_NAME.fullmatch(name)))
    return reading


def _lines_of(names: frozenset[str]) -> re.Pattern:
    """A pattern that finds, in a text with ``\\n`` put before it, each line to read (group
    1): one that starts with one of ``names`` (a sample, or its ``# HELP`` or ``# TYPE``
    line), or one that starts neither with a metric name nor with a comment about one (a
    blank line, another comment, garbage). The other lines, most of vLLM's, are passed over
    inside the match, not one by one in Python; each is a line :func:`_read_line` reads
    nothing from and refuses nothing of, as its name (the whole of it) is none of ``names``.
    """
    # (a name with a line break in it starts no line, and must not join two)
    prefixes = "|".join(re.escape(name) for name in sorted(names) if "\n" not in name) or "(?!)"
    return re.compile(rf"\n((?:(?:{prefixes})|# (?:HELP|TYPE) (?:{prefixes}))"
                      r"(?![a-zA-Z0-9_:])[^\n]*"
                      r"|(?![a-zA-Z_:]|# (?:HELP|TYPE) [a-zA-Z_:])[^\n]*)")


def _known_sample(line: str, names: frozenset[str]) -> Sample | None:
    """The sample of a usual line made of a metric name of ``names``, a label text already
    read (:data:`_LABEL_SETS`) and a value text already read (:data:`_VALUE_TEXTS`); None
    for any other line, which is read the usual way.

    The line is then one :data:`SAMPLE_LINE` takes, with the same name, labels and value:
    the label text ends at the last ``}``, as nothing after the labels may hold one. This
    costs a few lookups where the match costs a microsecond a line.
    """
    brace = line.find("{")
    close = line.rfind("}")
    if brace < 0 or close < brace or len(line) > MAX_USUAL_LINE:
        return None
    name = line[:brace]
    labels = _LABEL_SETS.get(line[brace + 1:close])
    if labels is None or name not in names:
        return None
    rest = line[close + 1:]
    value = _VALUE_TEXTS.get(rest)
    if value is None:
        value = _value_text(rest)
    return None if value is None else Sample(name, labels, value)


# The value texts already read, with what follows them (" 0.0", " 1.0 1700000000"): the
# counts of buckets nothing falls in, and of those everything does, repeat. Bounded as
# :data:`_LABEL_SETS` is.
_VALUE_TEXTS: dict[str, float] = {}
MAX_VALUE_TEXTS = 2048
MAX_KEPT_VALUE_TEXT = 64


def _value_text(text: str) -> float | None:
    """The value of what follows a sample's labels, as :data:`SAMPLE_LINE` reads it (and
    kept in :data:`_VALUE_TEXTS`); None when that does not fit its value part."""
    part = VALUE_PART.fullmatch(text)
    if part is None:
        return None
    value = float(part.group("value"))
    if len(text) <= MAX_KEPT_VALUE_TEXT:
        if len(_VALUE_TEXTS) >= MAX_VALUE_TEXTS:
            _VALUE_TEXTS.clear()
        _VALUE_TEXTS[text] = value
    return value


def _named(line: str, names: Collection[str]) -> str | None:
    """Which of ``names`` a malformed line concerns; None when it names none of them."""
    stripped = line.strip(" \t\r")
    if stripped.startswith("#"):
        parts = stripped[1:].split(None, 2)
        return parts[1] if len(parts) > 1 and parts[1] in names else None
    name = METRIC_NAME.match(stripped)
    return name.group() if name is not None and name.group() in names else None


def _read_line(line: str, names: Collection[str] | None) -> Sample | None:
    # Most lines are a sample of the usual shape with nothing around it: one match reads it.
    whole = SAMPLE_LINE.fullmatch(line) \
        if line[:1] in NAME_STARTS and len(line) <= MAX_USUAL_LINE else None
    if whole is not None:
        if names is not None and whole.group("name") not in names:
            return None
        sample = _matched_sample(whole)
        if sample is not None:
            return sample
    stripped = line.strip(" \t\r")
    if not stripped:
        return None
    if stripped.startswith("#"):
        _check_comment(stripped, names)
        return None
    if names is not None:
        name = METRIC_NAME.match(stripped)
        if name is not None and name.group() not in names:
            return None
    return _usual_sample(stripped) or _read_sample(stripped)


def _usual_sample(line: str) -> Sample | None:
    """The sample of a line of the usual shape, read at once; None for any other line."""
    whole = SAMPLE_LINE.fullmatch(line) if len(line) <= MAX_USUAL_LINE else None
    return None if whole is None else _matched_sample(whole)


def _matched_sample(whole: re.Match) -> Sample | None:
    """The sample of a :data:`SAMPLE_LINE` match; None when its labels are not of the
    usual kind (the line is then read piece by piece, which says what is wrong)."""
    name, label_text, text = whole.group("name", "labels", "value")
    labels = _LABEL_SETS.get(label_text or "")
    if labels is None:
        labels = _usual_labels(label_text or "")
    return None if labels is None else Sample(name, labels, float(text))


# The label sets already read, by their text: the servers of one model write the same ones
# (bucket bounds, model and engine), so 300 servers' answers hold a few hundred. Bounded in
# number and length: a box writing new label text on every line only empties it.
_LABEL_SETS: dict[str, Mapping[str, str]] = {}
MAX_LABEL_SETS = 2048
MAX_KEPT_LABEL_TEXT = 2048


def _usual_labels(label_text: str) -> Mapping[str, str] | None:
    """The labels of a usual line (escapes undone); None when a name is given twice."""
    pairs = LABEL_PAIR.findall(label_text)
    labels = dict(pairs)
    if len(labels) != len(pairs):
        return None
    for label, raw in pairs:
        if "\\" in raw:
            labels[label] = ESCAPE.sub(_unescape, raw)
    found = MappingProxyType(labels)
    if len(label_text) <= MAX_KEPT_LABEL_TEXT:
        if len(_LABEL_SETS) >= MAX_LABEL_SETS:
            _LABEL_SETS.clear()
        _LABEL_SETS[label_text] = found
    return found


def _check_comment(line: str, names: Collection[str] | None) -> None:
    """``# HELP name text`` and ``# TYPE name type`` are checked; other comments are free.

    One that passes every check is kept (:data:`_CHECKED_COMMENTS`): whatever the names,
    it is never refused.
    """
    parts = line[1:].split(None, 2)
    if not parts or parts[0] not in ("HELP", "TYPE"):
        return
    if names is not None and len(parts) > 1 and parts[1] not in names:
        return
    if len(parts) < 2 or not METRIC_NAME.fullmatch(parts[1]):
        raise ExpositionError(f"# {parts[0]} without a valid metric name")
    if parts[0] == "TYPE" and (len(parts) < 3 or parts[2].strip() not in METRIC_TYPES):
        raise ExpositionError(f"# TYPE {parts[1]} names no known type")
    if len(line) <= MAX_KEPT_COMMENT:
        if len(_CHECKED_COMMENTS) >= MAX_CHECKED_COMMENTS:
            _CHECKED_COMMENTS.clear()
        _CHECKED_COMMENTS.add(line)


# The ``# HELP`` and ``# TYPE`` lines that passed every check (stripped): each answer of a
# model's servers repeats them word for word, two for each name read. Bounded as
# :data:`_LABEL_SETS` is.
_CHECKED_COMMENTS: set[str] = set()
MAX_CHECKED_COMMENTS = 1024
MAX_KEPT_COMMENT = 1024


def _read_sample(line: str) -> Sample:
    name_match = METRIC_NAME.match(line)
    if name_match is None:
        raise ExpositionError("a sample line must start with a metric name")
    name, rest = name_match.group(), line[name_match.end():]
    labels: dict[str, str] = {}
    if rest.startswith("{"):
        labels, rest = _read_labels(rest[1:])
    if not rest or rest[0] not in " \t":
        raise ExpositionError(f"{name}: a space must separate the value")
    fields = rest.split()
    if len(fields) not in (1, 2):
        raise ExpositionError(f"{name}: expected a value and an optional timestamp")
    if len(fields) == 2 and not TIMESTAMP.fullmatch(fields[1]):
        raise ExpositionError(f"{name}: the timestamp {fields[1][:MAX_NUMBER_CHARS]!r} is not "
                              "an integer")
    return Sample(name, MappingProxyType(labels), _read_value(name, fields[0]))


def _read_labels(text: str) -> tuple[dict[str, str], str]:
    """The label set after ``{``; returns the labels and what follows the ``}``."""
    labels: dict[str, str] = {}
    position = 0
    while True:
        position = _skip_blanks(text, position)
        if text.startswith("}", position):
            return labels, text[position + 1:]
        pair = LABEL_PAIR.match(text, position)
        if pair is None:
            raise ExpositionError(_label_problem(text, position))
        label, raw = pair.group("name"), pair.group("value")
        if label in labels:
            raise ExpositionError(f"label {label} given twice")
        labels[label] = ESCAPE.sub(_unescape, raw) if "\\" in raw else raw
        position = _skip_blanks(text, pair.end())
        if text.startswith(",", position):
            position += 1
        elif not text.startswith("}", position):
            raise ExpositionError(f"after label {label}: ',' or '}}' was expected")


def _unescape(escape: re.Match) -> str:
    char = escape.group(1)
    if char not in ESCAPES:
        raise ExpositionError(f"unknown escape \\{char}")
    return ESCAPES[char]


def _label_problem(text: str, position: int) -> str:
    """What is wrong where a ``name="value"`` pair was expected."""
    name = LABEL_NAME.match(text, position)
    if name is None:
        return "a label name was expected"
    rest = text[name.end():].lstrip(" \t")
    if not rest.startswith("="):
        return f"label {name.group()}: '=' was expected"
    if not rest[1:].lstrip(" \t").startswith('"'):
        return f"label {name.group()}: a quoted value was expected"
    return f"label {name.group()}: the value is not closed"


def _skip_blanks(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t":
        position += 1
    return position


def _read_value(name: str, text: str) -> float:
    if text in SPECIAL_VALUES:
        return SPECIAL_VALUES[text]
    if len(text) > MAX_NUMBER_CHARS:
        raise ExpositionError(f"{name}: the value is over {MAX_NUMBER_CHARS} characters")
    if not NUMBER.fullmatch(text):
        raise ExpositionError(f"{name}: the value {text[:MAX_NUMBER_CHARS]!r} is not a number")
    return float(text)
