"""R7: whatever config llmao loads, the box program accepts (a hypothesis property).

Hypothesis writes config.yaml/models.yaml pairs from sound values mixed with
hostile ones (control and line-separator characters, lone surrogates, ``.nan``,
``.inf``, absurd sizes, option-looking model ids, every spelling of
``--api-key``, non-ASCII box names, too many rows). Each pair is loaded by the
core: a refusal must be a clean ConfigError naming the file. Each pair that
loads yields payloads, and each goes to ``install_set.py --dry-run --payload``
in its own process: every one must be accepted (exit 0, or 1 when it only does
not fit this test box), with no traceback and no hang. An admin approval of an
unknown box is held to the same rule.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import (
    ApprovalError,
    Fleet,
    load_fleet,
)
from rig.fleet_files import write_fleet
from tests.reliability.box_runs import Ending, dry_run
from tests.unit.box_program.helpers import Box

HOSTILE_ODDS = 25
HOSTILE_CHARS = ["\x00", "\n", "\r", "\t", "\x1b", "\x7f", "\x85", "\u2028", "\u2029",
                 "\u202e", "\u200b", "\ufeff", "\ud800", "é", " ", "'", '"', ";", "#", "%"]
hostile_text = st.builds(
    lambda head, char, tail: head + char + tail,
    st.sampled_from(["", "a", "-", "--", "org/m", " ", "--api"]),
    st.sampled_from(HOSTILE_CHARS),
    st.sampled_from(["", "x", "_key", "-key=k", "del"]))
any_text = st.text(max_size=8)


def sometimes(good: st.SearchStrategy, *hostile: st.SearchStrategy) -> st.SearchStrategy:
    """A sound value, or one time in HOSTILE_ODDS a hostile one: a config holds a few dozen
    values, and many configs must load for the box to have something to judge."""
    return st.integers(1, HOSTILE_ODDS).flatmap(
        lambda draw: st.one_of(*hostile) if draw == HOSTILE_ODDS // 2 else good)


def mixed(good: list, *hostile: st.SearchStrategy) -> st.SearchStrategy:
    return sometimes(st.sampled_from(good), *hostile)


box_names = mixed(["203.0.113.10", "2001:db8::7", "abcd1234pod", " 198.51.100.3 ",
                   "::ffff:192.0.2.9"], hostile_text, any_text)
model_names = mixed(["gemma", "qwen-7b", "m.1"], hostile_text,
                    st.sampled_from(["-gemma", "_x", ".hidden", "a" * 65, "a b"]))
weights = mixed(["google/gemma-4-26b-it", "/data/models/x", "Qwen/Qwen3-8B"], hostile_text,
                any_text, st.sampled_from(["--api-key=k", "-m", " lead", "x" * 600]))
one_arg = mixed(["--reasoning-parser", "gemma", "--max-num-seqs", "8", "--api-server-count",
                 "--chat-template", "a b", "%(here)s", ";#", "--tensor-parallel-size", "2",
                 "-pp", "-tp=4", "--tensor-par"],
                hostile_text,
                st.sampled_from(["--api-key", "--api_key=k", "--api-k", "--api", "--api-key.x",
                                 "--model=--api-key=k", "x" * 5000]))
args = sometimes(st.one_of(st.none(), st.lists(one_arg, max_size=4),
                           st.lists(one_arg, max_size=3).map(" ".join)),
                 st.just(["--x"] * 129))
HOSTILE_NUMBERS = [math.nan, math.inf, -math.inf, 0, -1, 1e308, 5e-324, 10**30, True, "8",
                   1.5, 2**64, 10**8 + 1, 1.0000001]
numbers = st.fixed_dictionaries({}, optional={
    "gpu_memory_utilization": mixed([0.3, 0.45, 1], st.sampled_from(HOSTILE_NUMBERS)),
    "max_model_len": mixed([4096, 32768, 10**8], st.sampled_from(HOSTILE_NUMBERS)),
    "vram_gb": mixed([8, 18.5, 0.5], st.sampled_from(HOSTILE_NUMBERS)),
    "disk_gb": mixed([20, 60], st.sampled_from(HOSTILE_NUMBERS)),
    "kv_bytes_per_token": mixed([98304, 1], st.sampled_from(HOSTILE_NUMBERS)),
    "gpus": mixed([1, 2, 4, 16, 17], st.sampled_from(HOSTILE_NUMBERS)),
})
knobs = st.fixed_dictionaries({}, optional={
    "health_grace_s": mixed([900, 60.5], st.sampled_from(HOSTILE_NUMBERS)),
    "health_fail_threshold": mixed([3], st.sampled_from(HOSTILE_NUMBERS)),
    "rejected_passes": mixed([3], st.sampled_from(HOSTILE_NUMBERS)),
    "probe_connect_timeout_s": mixed([3.0], st.sampled_from(HOSTILE_NUMBERS)),
    "probe_timeout_s": mixed([10], st.sampled_from(HOSTILE_NUMBERS)),
})
bearers = mixed(["legacy-shared-bearer-0123456789"], hostile_text,
                st.sampled_from(["with space", "x" * 513, 'q"uote']))


@st.composite
def model_entries(draw) -> list[dict]:
    entries = []
    for name in draw(st.lists(model_names, min_size=1, max_size=3, unique=True)):
        recipe = {"model": draw(weights), **draw(numbers)}
        served = draw(st.one_of(st.none(), model_names))
        if served is not None:
            recipe["served_model_name"] = served
        recipe_args = draw(args)
        if recipe_args is not None:
            recipe["args"] = recipe_args
        routed = f"hosted_vllm/{served if served is not None else name}"
        entries.append({"model_name": name, "litellm_params": {"model": routed},
                        "model_info": {"self_hosted": True, "vllm": recipe}})
    return entries


@st.composite
def pairs(draw) -> tuple[dict, dict, list[str]]:
    """(config, models, names of its models): a fleet of one or two boxes, some legacy rows."""
    models = draw(model_entries())
    names = [entry["model_name"] for entry in models]
    hosts: dict = {}
    legacy = []
    for box in draw(st.lists(box_names, min_size=1, max_size=2, unique=True)):
        ports = draw(st.permutations([8001, 8002, 8003, 9000]))
        rows = []
        for index in range(draw(mixed([0, 1, 2, 3], st.just(4)))):
            row = [draw(st.sampled_from(names)), ports[index], draw(mixed([f"s{index}"],
                                                                          model_names))]
            rows.append(row)
            if row[1] == 9000:
                legacy.append([box, 9000])
        hosts[box] = rows
    fleet = {"key": "agreement-fleet-key-0123456789abcdef",
             "vllm_api_salt": "agreement-salt-0123456789abcdef", "hosts": hosts,
             **draw(knobs)}
    if legacy:
        fleet["legacy_servers"] = legacy
        fleet["selfhost_api_key"] = draw(bearers)
    return {"fleet": fleet}, {"models": models}, names


def sound_pair(config: dict | None = None, recipe: dict | None = None,
               row: list | None = None) -> tuple[dict, dict, list[str]]:
    """One box, one model, with ``config`` merged into ``fleet`` and ``recipe`` into its recipe."""
    fleet = {"key": "agreement-fleet-key-0123456789abcdef",
             "vllm_api_salt": "agreement-salt-0123456789abcdef",
             "hosts": {"203.0.113.10": [row or ["gemma", 8001]]}, **(config or {})}
    vllm = {"model": "google/gemma-4-26b-it", **(recipe or {})}
    models = [{"model_name": "gemma", "litellm_params": {"model": "hosted_vllm/gemma"},
               "model_info": {"self_hosted": True, "vllm": vllm}}]
    return {"fleet": fleet}, {"models": models}, ["gemma"]


# Each of these loaded before and was refused by the box (or crashed the loader): the
# discrepancies this test found, kept as examples so they are tried on every run.
FOUND = [
    sound_pair(recipe={"vram_gb": math.nan}),
    sound_pair(recipe={"disk_gb": math.inf}),
    sound_pair(config={"health_grace_s": math.nan}),
    sound_pair(row=["gemma", 8001, "-gemma"]),
    sound_pair(recipe={"model": "  "}),
    sound_pair(recipe={"model": "a\x1bb"}),
    sound_pair(recipe={"model": "a\u2028b"}),
    sound_pair(recipe={"model": "--api-key=x"}),
    sound_pair(recipe={"args": ["--api-key", "x"]}),
    sound_pair(recipe={"args": ["--api-k", "x"]}),
    sound_pair(recipe={"args": "--api_key=x"}),
    sound_pair(recipe={"args": ["a\rb"]}),
    sound_pair(config={"hosts": {"box\x01": [["gemma", 8001]]}}),
    sound_pair(config={"hosts": {"bøx": [["gemma", 8001]]}}),
    sound_pair(config={"selfhost_api_key": "a b", "legacy_servers": [["203.0.113.10", 8001]]}),
    sound_pair(recipe={"kv_bytes_per_token": 0.5}),
    sound_pair(config={"hosts": {"203.0.113.10": [["gemma", 8001, f"g{n}"] for n in range(4)]}}),
]


def accepted(ending: Ending) -> bool:
    """Accepted by the box: applied (0), or valid but too big for this test box's card (1)."""
    return ending.rc in (0, 1) and ending.clean


def load(folder: Path, config: dict, models: dict) -> Fleet | None:
    config_path, models_path = write_fleet(folder, config, models).paths()
    try:
        return load_fleet(config_path, models_path)
    except ConfigError as refused:
        assert all(line.startswith((config_path, models_path)) for line in refused.problems), \
            refused.problems
        return None


def assert_box_accepts(folder: Path, name: str, body: bytes) -> None:
    (folder / name).mkdir()
    ending = dry_run(Box(folder / name), body)
    assert accepted(ending), f"{body[:300]!r}\n{ending}"


@settings(max_examples=40, deadline=30_000, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(pairs(), box_names, st.lists(model_names, min_size=1, max_size=4))
@example(sound_pair(), "192.0.2.50\u2028x", ["gemma"])
def test_whatever_loads_the_box_accepts(pair, approved_box, approved_models):
    check_pair(pair, approved_box, approved_models)


@pytest.mark.parametrize("pair", FOUND, ids=range(len(FOUND)))
def test_each_discrepancy_found_is_refused_at_load(tmp_path: Path, pair):
    config, models, _ = pair
    assert load(tmp_path, config, models) is None


def check_pair(pair, approved_box: str, approved_models: list[str]) -> None:
    config, models, _ = pair
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        fleet = load(folder, config, models)
        event("refused at load" if fleet is None else "loaded")
        if fleet is None:
            return
        lifecycle = fleet.settings.fleet.lifecycle
        assert all(math.isfinite(value) for value in vars(lifecycle).values())
        for index, assignment in enumerate(fleet.assignments.values()):
            assert_box_accepts(folder, f"box{index}", assignment.body)
        try:
            approved = fleet.approved_assignment(approved_box, approved_models)
        except ApprovalError:
            return
        event("approval accepted")
        assert_box_accepts(folder, "approved", approved.body)
