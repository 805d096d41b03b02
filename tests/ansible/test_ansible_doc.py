"""``ansible-doc`` renders every plugin of the collection, from a plain checkout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

PLUGINS = [
    ("module", "llmao.fleet.vllm_api_key", {"host", "port", "config", "models", "salt"}),
    ("module", "llmao.fleet.box_program", {"program", "payload", "python", "data_directory",
                                           "supervisor_conf_dir", "vllm_bin", "handover",
                                           "certificate_request", "certificate"}),
    ("module", "llmao.fleet.box_cert", {"box", "csr", "timeout", "config", "models"}),
    ("module", "llmao.fleet.pass_lease", {"state", "ttl", "holder", "timeout", "config",
                                          "models"}),
    ("module", "llmao.fleet.box_turn", {"box", "state", "servers", "applied", "wait_timeout",
                                        "poll_interval", "timeout", "config", "models"}),
    ("inventory", "llmao.fleet.fleet", {"plugin", "config", "models", "compose", "groups",
                                        "keyed_groups", "strict", "cache"}),
]
# Plugins that cannot work without both fleet files, and what their doc says of each attribute.
FILES_REQUIRED = [
    ("module", "llmao.fleet.fleet_observe", {"diff_mode": "none"}),
    ("module", "llmao.fleet.vllm_probe", {"diff_mode": "none"}),
    ("module", "llmao.fleet.fleet_plan", {"diff_mode": "none"}),
    ("module", "llmao.fleet.litellm_deployment", {"diff_mode": "full"}),
    ("module", "llmao.fleet.fleet_verdicts", {"diff_mode": "none"}),
    ("module", "llmao.fleet.box_pool", {"diff_mode": "full"}),
    ("lookup", "llmao.fleet.box_assignment", {}),
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
    # A plain line holding ': ' turns into a mapping: ansible-doc renders it, sanity refuses it.
    assert all(isinstance(line, str) for line in doc["doc"]["description"])


def test_module_documents_what_it_returns(ansible) -> None:
    done = ansible("ansible-doc", "--json", "llmao.fleet.vllm_api_key")
    returned = json.loads(done.stdout)["llmao.fleet.vllm_api_key"]["return"]
    assert {"api_key", "api_keys", "host"} <= set(returned)


def test_every_plugin_of_the_collection_is_checked_here() -> None:
    root = Path(__file__).resolve().parents[2]
    plugins = root / "collections" / "ansible_collections" / "llmao" / "fleet" / "plugins"
    folders = {"module": "modules", "inventory": "inventory", "lookup": "lookup"}
    present = {(kind, f"llmao.fleet.{path.stem}") for kind, folder in folders.items()
               for path in (plugins / folder).glob("*.py") if path.stem != "__init__"}
    checked = {(kind, name) for kind, name, _ in PLUGINS + FILES_REQUIRED}
    assert present == checked


def test_collection_lists_its_plugins(ansible) -> None:
    modules = ansible("ansible-doc", "-l", "llmao.fleet")
    inventories = ansible("ansible-doc", "-t", "inventory", "-l", "llmao.fleet")
    assert "llmao.fleet.vllm_api_key" in modules.stdout
    assert "llmao.fleet.fleet" in inventories.stdout


def plugin_doc(ansible, kind: str, name: str) -> dict:
    done = ansible("ansible-doc", "--json", "-t", kind, name)
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr
    return json.loads(done.stdout)[name]["doc"]


@pytest.mark.parametrize(("kind", "name", "attributes"), FILES_REQUIRED)
def test_fleet_files_show_as_required_where_they_are(ansible, kind: str, name: str,
                                                     attributes: dict[str, str]) -> None:
    doc = plugin_doc(ansible, kind, name)
    assert doc["options"]["config"]["required"] is True
    assert doc["options"]["models"]["required"] is True
    assert "llmao_config_file" in " ".join(doc["options"]["config"]["description"])
    for attribute, support in attributes.items():
        assert doc["attributes"][attribute]["support"] == support
    if attributes:  # a reconcile module: one step of the chain, on the controller
        assert any("One step of a reconcile pass" in note for note in doc["notes"])
        assert doc["attributes"]["check_mode"]["support"] == "full"
        assert doc["attributes"]["platform"]["platforms"] == "posix"
        assert doc["attributes"]["check_mode"]["description"]  # ansible-core's wording


def test_a_salt_makes_the_fleet_files_optional(ansible) -> None:
    doc = plugin_doc(ansible, "module", "llmao.fleet.vllm_api_key")
    assert not doc["options"]["config"].get("required")
    assert not doc["options"]["models"].get("required")
    assert doc["attributes"]["diff_mode"]["support"] == "none"
