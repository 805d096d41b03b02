"""The rules for a value read from a document: a number is finite and never a bool, a word
names an enum's member or nothing; none of them raises."""

from __future__ import annotations

import json
import sys

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.json_values import (
    enum_member,
    is_integer,
    is_number,
)
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import State
from ansible_collections.llmao.fleet.plugins.module_utils.rollout import Phase


@pytest.mark.parametrize("value", [0, -3, 1.5, -0.0, 10**300, sys.float_info.max,
                                   json.loads("1e308")])
def test_a_finite_number_is_a_number(value):
    assert is_number(value)


@pytest.mark.parametrize("value", [True, False, None, "1", [1], {"n": 1},
                                   float("nan"), float("inf"), -float("inf"),
                                   json.loads("NaN"), json.loads("-Infinity"),
                                   10**400, -(10**400)])
def test_anything_else_is_not_and_nothing_raises(value):
    assert not is_number(value)


def test_an_integer_is_an_int_and_never_a_bool():
    assert is_integer(0) and is_integer(10**400) and is_integer(-1)
    assert not any(is_integer(value) for value in (True, False, 1.0, "1", None))


def test_a_word_names_its_member_and_anything_else_none():
    assert enum_member(State, "Healthy") is State.HEALTHY
    assert enum_member(Phase, "drained") is Phase.DRAINED
    assert enum_member(Phase, Phase.DONE) is Phase.DONE
    for value in ("healthy", "paused", "", None, 1, True, ["done"], {"done": 1}):
        assert enum_member(State, value) is None and enum_member(Phase, value) is None
