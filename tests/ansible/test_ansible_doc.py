"""``ansible-doc`` renders every plugin of the collection, from a plain checkout."""

from __future__ import annotations

import json

import pytest

PLUGINS = [
    ("module", "llmao.fleet.vllm_api_key", {"host", "port", "config", "models", "salt"}),
    ("module", "llmao.fleet.box_program", {"program", "payload", "python", "data_directory",
                                           "supervisor_conf_dir", "vllm_bin", "handover"}),
    ("inventory", "llmao.fleet.fleet", {"plugin", "config", "models", "compose", "groups",
                                        "keyed_groups", "strict", "cache"}),
]


@pytest.mark.parametrize(("kind", "name", "options"), PLUGINS)
def test_plugin_documentation_renders(ansible, kind: str, name: str, options: set[str]) -> None:
    done = ansible("ansible-doc", "-t", kind, name)
    assert done.returncode == 0, done.stderr
    assert "ERROR" not in done.stderr and "WARNING" not in done.stderr
    assert name in done.stdout
    assert "EXAMPLES" in done.stdout


@pytest.mark.parametrize(("kind", "name", "options"), PLUGINS)
def test_plugin_documentation_has_its_options(ansible, kind: str, name: str,
                                              options: set[str]) -> None:
    done = ansible("ansible-doc", "--json", "-t", kind, name)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)[name]
    assert options <= set(doc["doc"]["options"])
    assert doc["examples"].strip()


def test_module_documents_what_it_returns(ansible) -> None:
    done = ansible("ansible-doc", "--json", "llmao.fleet.vllm_api_key")
    returned = json.loads(done.stdout)["llmao.fleet.vllm_api_key"]["return"]
    assert {"api_key", "api_keys", "host"} <= set(returned)


def test_collection_lists_its_plugins(ansible) -> None:
    modules = ansible("ansible-doc", "-l", "llmao.fleet")
    inventories = ansible("ansible-doc", "-t", "inventory", "-l", "llmao.fleet")
    assert "llmao.fleet.vllm_api_key" in modules.stdout
    assert "llmao.fleet.fleet" in inventories.stdout
