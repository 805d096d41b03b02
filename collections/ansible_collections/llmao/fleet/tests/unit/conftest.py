# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the collection's unit tests: the plugins' fleet written to disk, its secrets,
and Ansible's plugin loader over this checkout."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible.plugins.loader import init_plugin_loader

from ansible_collections.llmao.fleet.tests.unit.fleets import (
    PLUGIN_CONFIG,
    PLUGIN_MODELS,
    PLUGIN_SECRETS,
)
from rig import fleet_files


@pytest.fixture
def secrets() -> dict[str, str]:
    return dict(PLUGIN_SECRETS)


@pytest.fixture
def base_config() -> dict[str, Any]:
    """A fresh copy of the plugins' base config, for a test to change."""
    return copy.deepcopy(PLUGIN_CONFIG)


@pytest.fixture
def base_models() -> dict[str, Any]:
    """A fresh copy of the base models, for a test to change."""
    return copy.deepcopy(PLUGIN_MODELS)


@pytest.fixture
def write_fleet(tmp_path: Path) -> Callable[..., tuple[str, str]]:
    """``write_fleet(config=None, models=None)`` writes the pair and returns their paths."""

    def write(config: dict[str, Any] | None = None,
              models: dict[str, Any] | None = None) -> tuple[str, str]:
        return fleet_files.write_fleet(tmp_path, PLUGIN_CONFIG if config is None else config,
                                       PLUGIN_MODELS if models is None else models).paths()

    return write


def collections_root() -> str:
    """The folder holding ``ansible_collections``, wherever the checkout is."""
    here = Path(__file__).resolve()
    return str(next(p.parent for p in here.parents if p.name == "ansible_collections"))


@pytest.fixture(scope="session")
def ansible_plugins() -> None:
    """Ansible's collection loader over this checkout, as the ansible CLIs install it.

    The tests import the core as plain packages first, and the loader only records a
    collection's metadata when it imports the collection package itself: drop the three
    package entries (they hold no code, every module under them stays loaded) so the
    loader imports them again its way.
    """
    for name in ("ansible_collections.llmao.fleet", "ansible_collections.llmao",
                 "ansible_collections"):
        sys.modules.pop(name, None)
    init_plugin_loader([collections_root()])
