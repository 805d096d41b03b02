# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``models.yaml``: LiteLLM's model entries plus the vLLM recipe a box runs.

An entry is what LiteLLM's ``/model/new`` takes (``model_name``,
``litellm_params``, ``model_info``); ``model_info.self_hosted`` marks the ones a
box serves and ``model_info.vllm`` says how. Commercial entries are kept too so
that a row or an approval naming one is refused with a precise reason.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .config_errors import Problems
from .field_checks import MISSING, Section, type_name
from .payload_rules import (
    INTEGER_NUMBERS,
    NUMBER_LIMITS,
    args_problem,
    parallel_problem,
    text_problem,
)
from .yaml_source import read_yaml

# Optional recipe numbers, in the order they appear in a payload.
RECIPE_NUMBERS = ("gpu_memory_utilization", "max_model_len", "vram_gb", "disk_gb",
                  "kv_bytes_per_token", "gpus")
# LiteLLM's provider prefix for an OpenAI-compatible vLLM server.
HOSTED_VLLM_PREFIX = "hosted_vllm/"


@dataclass(frozen=True)
class VllmRecipe:
    """How a box launches one model: weights, advertised name, extra flags, sizes."""

    model: str
    served_model_name: str
    args: tuple[str, ...] = ()
    numbers: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class ModelEntry:
    """One ``models.yaml`` entry; ``vllm`` is set exactly when it is self-hosted."""

    model_name: str
    litellm_params: MappingProxyType
    model_info: MappingProxyType
    vllm: VllmRecipe | None

    @property
    def self_hosted(self) -> bool:
        return self.vllm is not None


def load_models(path: str) -> dict[str, ModelEntry]:
    """Read and validate ``models.yaml``: model name → entry (self-hosted names unique)."""
    problems = Problems()
    top = Section(problems, path, (), read_yaml(path), required=True)
    raw_models = top.raw("models", None)
    top.close()
    entries: dict[str, ModelEntry] = {}
    if not isinstance(raw_models, list):
        top.problem("models", "must be a list of model entries" if raw_models is not None
                    else "is required")
        raw_models = []
    for index, raw in enumerate(raw_models):
        entry = _read_entry(problems, path, index, raw)
        if entry is None:
            continue
        earlier = entries.get(entry.model_name)
        if earlier is not None and (earlier.self_hosted or entry.self_hosted):
            problems.add(path, f"models[{index}].model_name",
                         f"{entry.model_name!r} is already defined by an earlier entry")
        elif earlier is None:
            entries[entry.model_name] = entry
    problems.raise_if_any()
    return entries


def _read_entry(problems: Problems, path: str, index: int, raw: Any) -> ModelEntry | None:
    entry = Section(problems, path, ("models", index), raw, required=True)
    name = entry.text("model_name", required=True)
    params = entry.sub("litellm_params", required=True)
    routed = params.text("model", required=True)
    params.seen.update(params.mapping)  # the rest is LiteLLM's business
    info = entry.sub("model_info")
    self_hosted = info.flag("self_hosted")
    recipe = _read_recipe(info, name, self_hosted)
    info.seen.update(info.mapping)
    if recipe is not None and routed:
        _check_routed_model(params, routed, recipe.served_model_name)
    entry.close()
    if not (name and params.valid and info.valid) or (self_hosted and recipe is None):
        return None
    info_copy = {k: v for k, v in info.mapping.items() if k not in ("vllm", "self_hosted")}
    return ModelEntry(name, MappingProxyType(dict(params.mapping)),
                      MappingProxyType(info_copy), recipe)


def _check_routed_model(params: Section, routed: str, served: str) -> None:
    """LiteLLM asks the box's vLLM for the model after ``hosted_vllm/``: it must be the
    name vLLM serves, or probes pass while every chat through LiteLLM fails."""
    expected = f"{HOSTED_VLLM_PREFIX}{served}"
    if routed != expected:
        params.problem("model", f"{routed!r} does not name the served model: "
                                f"a self-hosted model is routed as {expected!r}")


def _read_recipe(info: Section, model_name: str | None, self_hosted: bool) -> VllmRecipe | None:
    if info.raw("vllm", MISSING) is MISSING:
        if self_hosted:
            info.problem("vllm", "is required when self_hosted is true")
        return None
    recipe = info.sub("vllm", required=True)
    if not self_hosted:
        info.problem("vllm", "is only read for self_hosted models; set self_hosted: true")
    weights = _command_line_text(recipe, "model", recipe.text("model", required=True))
    served = _command_line_text(recipe, "served_model_name",
                                recipe.text("served_model_name", model_name))
    args = _read_args(recipe)
    problem = args_problem(args)
    if problem:
        recipe.problem("args", problem)
    numbers = {}
    for key in RECIPE_NUMBERS:
        if key in INTEGER_NUMBERS:
            value = recipe.integer(key, maximum=NUMBER_LIMITS[key])
        else:
            value = recipe.number(key, maximum=NUMBER_LIMITS[key])
        if value is not None:
            numbers[key] = value
    if not problem:
        problem = parallel_problem(args, numbers.get("gpus", 1))
        if problem:
            recipe.problem("args", problem)
    recipe.close()
    if not (weights and served and recipe.valid and self_hosted):
        return None
    return VllmRecipe(weights, served, args, MappingProxyType(numbers))


def _command_line_text(recipe: Section, key: str, value: str | None) -> str | None:
    """``value`` when it can be one ``vllm serve`` argument; else a problem and None."""
    problem = None if value is None else text_problem(value)
    if problem:
        recipe.problem(key, problem)
        return None
    return value


def _read_args(recipe: Section) -> tuple[str, ...]:
    """``args`` as written: a list of strings, or one string split as a shell would."""
    value = recipe.raw("args", None)
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:
            recipe.problem("args", f"cannot be split like a shell line: {exc}")
            return ()
    if isinstance(value, list) and all(isinstance(arg, str) for arg in value):
        return tuple(value)
    recipe.problem("args", f"must be a list of strings or one string, not {type_name(value)}")
    return ()
