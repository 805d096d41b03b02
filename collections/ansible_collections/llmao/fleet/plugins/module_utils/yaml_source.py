# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a YAML file for the loaders: safe types only, duplicate keys refused.

PyYAML keeps the last of two equal keys without a word; in ``fleet.hosts`` that
would silently drop a box, so a duplicate is an error that names its line.
"""

from __future__ import annotations

import functools
from typing import Any

try:
    import yaml
except ImportError:  # ansible-test's import sanity test runs modules without PyYAML
    yaml = None

from .config_errors import ConfigError

# Values a file may stand for once its aliases are expanded: a fleet of 10,000 boxes is
# about 100,000, so ten times that is room to grow and still fast to count.
MAX_EXPANDED_VALUES = 1_000_000


def _check_expansion(path: str, document: Any) -> None:
    """Refuse a file whose aliases stand for a huge tree ("billion laughs").

    PyYAML shares an anchored value instead of copying it, so such a file loads
    at once; but anything that later writes it out (the JSON sent to LiteLLM, an
    inventory) would expand it and never finish.
    """
    remaining = MAX_EXPANDED_VALUES
    stack = [document]
    while stack:
        node = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        remaining -= len(node)
        if remaining < 0:
            raise ConfigError([f"{path}: stands for more than {MAX_EXPANDED_VALUES} values once "
                               "its YAML aliases are expanded"])
        stack.extend(node.values() if isinstance(node, dict) else node)


@functools.cache
def _strict_loader() -> type:
    """A safe loader (libyaml's when built) that refuses a mapping with the same key twice."""
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = type("StrictLoader", (base,), {})
    loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                           _construct_unique_mapping)
    return loader


def _construct_unique_mapping(loader: Any, node: Any) -> dict:
    loader.flatten_mapping(node)
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in mapping
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            ) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


def read_yaml(path: str) -> Any:
    """Parse ``path``; any read or syntax error becomes a :class:`ConfigError` naming it."""
    if yaml is None:
        raise ConfigError([f"{path}: cannot be read: PyYAML is not installed"])
    try:
        with open(path, encoding="utf-8") as stream:
            document = yaml.load(stream, Loader=_strict_loader())  # a safe loader
    except OSError as exc:
        raise ConfigError([f"{path}: cannot be read: {exc.strerror}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: is not UTF-8 text"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError([f"{path}: {where}{what}"]) from None
    except ValueError:  # an integer of thousands of digits: Python refuses to convert it
        raise ConfigError([f"{path}: holds a number too long to read"]) from None
    _check_expansion(path, document)
    return document
