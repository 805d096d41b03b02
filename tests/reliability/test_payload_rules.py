"""The payload rules of the core and of the stdlib-only box program are the same rules.

``module_utils/payload_rules.py`` is built into ``install_set.py``
(scripts/build_box_program.py), which walks the JSON around them. The constants must
be equal, and the checks the box builds on them must give the core's verdict on any
value (hypothesis draws them, hostile characters included).
test_config_box_agreement.py proves the consequence end to end: whatever loads, the box
accepts.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.llmao.fleet.plugins.module_utils import payload_rules as core
from ansible_collections.llmao.fleet.plugins.module_utils.config_file import MAX_SERVERS_PER_BOX
from ansible_collections.llmao.fleet.plugins.module_utils.models_file import RECIPE_NUMBERS
from ansible_collections.llmao.fleet.tests.unit.rollout_rule import rollout_problem
from tests.unit.box_program.helpers import load_install_set

BOX = load_install_set()
PINNED = ["BOX_NAME_RE", "SERVER_NAME_RE", "API_KEY_RE", "UNSAFE_CHAR_RE", "MAX_TEXT",
          "MAX_ARGS", "MAX_ARG", "MAX_SERVERS", "API_KEY_FLAG", "NUMBER_LIMITS",
          "INTEGER_NUMBERS", "ROLLOUT_LIMITS", "FOLLOW_PROGRAM", "PARALLEL_FLAGS",
          "PARALLEL_SIZE_RE", "MAX_REVISION"]
# Characters that matter, mixed with any others: the edges of every rule.
EDGES = "-_.=/ \t\n\x00\x1f\x7f\x85\x9f\xa0\u200b\u200f\u2028\u2029\u202e\u2066\ufeff\ud800\"'%;#"
texts = st.text(st.one_of(st.sampled_from(EDGES), st.characters()), max_size=12) | \
    st.builds(lambda head, tail: head + tail,
              st.sampled_from(["--api", "--api_k", "--model=--api", "-", "sk-vllm-", "a"]),
              st.text(st.sampled_from("-_key=.a \u2028"), max_size=6))


@pytest.mark.parametrize("name", PINNED)
def test_the_copy_equals_the_original(name: str):
    original, copy = getattr(core, name), getattr(BOX, name)
    if hasattr(original, "pattern"):
        assert (copy.pattern, copy.flags) == (original.pattern, original.flags)
    else:
        assert copy == original


def test_the_box_checks_every_recipe_number_and_the_loader_every_server():
    assert tuple(BOX.OPTIONAL_NUMBERS) == RECIPE_NUMBERS == tuple(core.NUMBER_LIMITS)
    assert MAX_SERVERS_PER_BOX == core.MAX_SERVERS


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["follow", "llmao-follow", "llmao-llmao-follow", "follow2", "gemma"])
       | texts)
def test_a_name_that_clashes_with_the_follow_program_is_judged_alike(name: str):
    assert core.clashes_with_follow_program(name) == BOX.clashes_with_follow_program(name)


def box_accepts(check, *args) -> bool:
    try:
        check(*args)
    except BOX.Refused:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(texts)
def test_a_model_id_is_judged_alike(value: str):
    entry = {"model": value}
    assert (core.text_problem(value) is None) == box_accepts(
        BOX.command_line_field, entry, "model", "servers[0]")


@settings(max_examples=400, deadline=None)
@given(st.lists(texts, max_size=4))
def test_args_are_judged_alike(args: list[str]):
    assert (core.args_problem(args) is None) == box_accepts(BOX.normalize_args, args, "args")


@settings(max_examples=300, deadline=None)
@given(texts)
def test_an_option_is_read_as_the_key_alike(value: str):
    assert core.names_api_key_flag(value) == BOX.names_api_key_flag(value)


@settings(max_examples=300, deadline=None)
@given(texts | st.sampled_from(["r" * 128, "r" * 129, "0" * 16, 16, ["r"]]))
def test_a_revision_is_judged_alike(value):
    """What the box applies is what llmao takes back in its report and its turn asks (an
    absent revision, which llmao never sends, is the box's own affair)."""
    doc = {"host": "box", "servers": [], "revision": value}
    assert (core.revision_problem(value) is None) == box_accepts(BOX.validate_assignment, doc)


# Around and on the bounds of rollout's numbers, of every JSON kind, and objects with a key
# missing or one too many.
rollout_numbers = st.one_of(
    st.sampled_from([0, 1, 0.5, 0.999, 1.0, 3600, 3600.5, 86400, 86400.0, 86401, -0.0, -1,
                     True, False, None, "30", [30], float("inf"), float("nan")]),
    st.integers(-10, 10**6), st.floats(allow_nan=True, allow_infinity=True))
rollouts = st.one_of(
    st.fixed_dictionaries({"follow_s": rollout_numbers, "drain_s": rollout_numbers}),
    st.dictionaries(st.sampled_from(["follow_s", "drain_s", "max_unavailable", ""]),
                    rollout_numbers, max_size=3),
    st.sampled_from([None, [], "follow", 30]))


@settings(max_examples=500, deadline=None)
@given(rollouts)
def test_a_rollout_object_is_judged_alike(value):
    assert (rollout_problem(value) is None) == box_accepts(
        BOX.validate_rollout, value, "rollout")



# Parallel sizes in every spelling vLLM reads, abbreviations, bad values, with gpus on and off
# the product.
parallel_args = st.lists(st.one_of(
    st.sampled_from(["--tensor-parallel-size", "--tensor_parallel_size", "-tp", "-pp",
                     "--pipeline-parallel-size", "--pipeline_parallel-size", "--tensor-par",
                     "--pipe", "--tensor-parallel-size=2", "-tp=4", "-pp=x", "--t", "-t"]),
    st.sampled_from(["1", "2", "4", "8", "16", "17", "0", "02", "x", "", "\u0662"]),
    texts), max_size=5)


@settings(max_examples=500, deadline=None)
@given(parallel_args, st.integers(1, 16))
def test_parallel_sizes_are_judged_alike(args: list[str], gpus: int):
    assert core.parallel_sizes(args) == BOX.parallel_sizes(args)
    assert core.parallel_problem(args, gpus) == BOX.parallel_problem(args, gpus)
    entry = {"name": "m", "host": "box", "port": 8001, "api_key": "k", "model": "m",
             "served_model_name": "m", "args": args, "gpus": gpus}
    if core.args_problem(args) is None:
        assert (core.parallel_problem(args, gpus) is None) == box_accepts(
            BOX.validate_server, entry, "servers[0]")
