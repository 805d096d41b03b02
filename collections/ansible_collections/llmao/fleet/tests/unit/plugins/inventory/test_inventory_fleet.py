# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory plugin llmao.fleet.fleet: its populate step on loaded fleets, and parse.

The plugin comes from Ansible's own plugin loader, as ansible-inventory gets it, so its
documented options (constructed, cache) are the ones under test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleError, AnsibleParserError
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import inventory_loader

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet
from ansible_collections.llmao.fleet.tests.unit.compat import (
    TRUST_TAGS,
    trust_as_template,
    with_templar,
)

PLUGIN = "llmao.fleet.fleet"


@pytest.fixture(autouse=True)
def _plugins(ansible_plugins: None) -> None:
    """Every test here gets the plugin from Ansible's loader."""


def make_plugin(**options: Any) -> Any:
    """A fresh plugin with ``options`` set as a source file would set them."""
    plugin = inventory_loader.get(PLUGIN)
    plugin.loader = DataLoader()
    plugin._vars = {}
    with_templar(plugin)
    trusted = {name: trust_as_template(value) if isinstance(value, str) else value
               for name, value in options.items()}
    plugin.set_options(direct={"plugin": PLUGIN, "config": "config.yaml",
                               "models": "models.yaml", **trusted})
    return plugin


def trusted_entries(entries: dict[str, str]) -> dict[str, str]:
    return {name: trust_as_template(text) for name, text in entries.items()}


def populate(fleet: Fleet, **options: Any) -> InventoryData:
    inventory = InventoryData()
    make_plugin(**options).populate(inventory, fleet)
    return inventory


def members(inventory: InventoryData, group: str) -> set[str]:
    return {host.name for host in inventory.groups[group].get_hosts()}


def plain(value: Any) -> Any:
    """Hostvars as plain JSON data (drops Ansible's tags) for comparisons and searches."""
    return json.loads(json.dumps(value, default=str))


@pytest.fixture
def fleet(write_fleet) -> Fleet:
    return load_fleet(*write_fleet())


def test_one_host_per_fleet_hosts_key_all_in_llmao_boxes(fleet: Fleet) -> None:
    inventory = populate(fleet)
    assert set(inventory.hosts) == set(fleet.assignments)
    assert members(inventory, "llmao_boxes") == set(fleet.assignments)


def test_one_group_per_model_with_a_sanitized_name(fleet: Fleet) -> None:
    inventory = populate(fleet)
    assert members(inventory, "llmao_model_gemma4_26b") == {
        "203.0.113.10", "198.51.100.7", "pod-abc123"}
    assert members(inventory, "llmao_model_qwen3_8b") == {
        "203.0.113.10", "203.0.113.11", "2001:db8::5"}
    assert not any(name.startswith("llmao_model_gpt") for name in inventory.groups)


def test_hostvars_describe_the_box_from_its_public_view(fleet: Fleet) -> None:
    inventory = populate(fleet)
    for box, assignment in fleet.assignments.items():
        hostvars = inventory.get_host(box).get_vars()
        assert hostvars["llmao_box"] == box
        assert hostvars["llmao_revision"] == assignment.revision
        assert hostvars["llmao_servers"] == [server.public_view()
                                             for server in assignment.servers]
        assert hostvars["llmao_provider"] == "local"


def test_servers_carry_names_ports_and_recipes_but_no_bearer(fleet: Fleet) -> None:
    servers = populate(fleet).get_host("203.0.113.11").get_vars()["llmao_servers"]
    assert [(s["name"], s["model_name"], s["served_model_name"], s["port"]) for s in servers] == [
        ("qwen3-8b", "qwen3-8b", "qwen-served", 8001),
        ("qwen3-8b-b", "qwen3-8b", "qwen-served", 8002),
    ]
    assert servers[0]["args"] == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    assert all("api_key" not in server for server in servers)


def test_ansible_host_only_for_addresses(fleet: Fleet) -> None:
    inventory = populate(fleet)
    assert inventory.get_host("203.0.113.10").get_vars()["ansible_host"] == "203.0.113.10"
    assert inventory.get_host("2001:db8::5").get_vars()["ansible_host"] == "2001:db8::5"
    assert "ansible_host" not in inventory.get_host("pod-abc123").get_vars()


def test_local_fleet_publishes_listen_ports_and_honours_a_seeded_one(fleet: Fleet) -> None:
    inventory = populate(fleet)
    assert members(inventory, "llmao_provider_local") == set(fleet.assignments)
    assert inventory.get_host("203.0.113.10").get_vars()["llmao_public_ports"] == {
        8001: 8001, 8002: 8002}
    assert inventory.get_host("pod-abc123").get_vars()["llmao_public_ports"] == {8001: 40001}


def test_configured_provider_leaves_only_seeded_public_ports(write_fleet, base_config) -> None:
    base_config["providers"] = {"vast": {"api_key": "unit-vast-api-key-0d0d"}}
    inventory = populate(load_fleet(*write_fleet(base_config)))
    assert "llmao_provider_local" not in inventory.groups
    assert members(inventory, "llmao_provider_unlisted") == set(inventory.hosts)
    assert inventory.get_host("203.0.113.10").get_vars()["llmao_public_ports"] == {}
    assert inventory.get_host("pod-abc123").get_vars()["llmao_public_ports"] == {8001: 40001}


@pytest.mark.parametrize("group", ["llmao_boxes", "all"])
def test_the_files_are_named_for_modules(fleet: Fleet, group: str) -> None:
    """On ``all`` too: a play on the implicit localhost reads only ``all``'s variables."""
    group_vars = populate(fleet).groups[group].get_vars()
    assert group_vars == {"llmao_config_file": fleet.config_path,
                          "llmao_models_file": fleet.models_path}


def test_legacy_server_is_marked(fleet: Fleet) -> None:
    servers = populate(fleet).get_host("198.51.100.7").get_vars()["llmao_servers"]
    assert [(s["port"], s["legacy"]) for s in servers] == [(8000, True)]


def test_no_secret_anywhere_in_the_inventory(fleet: Fleet, secrets: dict[str, str]) -> None:
    base_options = {"compose": trusted_entries({"names": "llmao_servers | map(attribute='name')"})}
    inventory = populate(fleet, **base_options)
    everything = json.dumps(plain({
        "hosts": {name: host.get_vars() for name, host in inventory.hosts.items()},
        "groups": {name: group.get_vars() for name, group in inventory.groups.items()},
    }))
    bearers = {server.api_key for server in fleet.servers()}
    assert len(bearers) == 7
    for secret in {*secrets.values(), *bearers}:
        assert secret not in everything
    assert "api_key" not in everything


def test_compose_sets_variables_from_hostvars(fleet: Fleet) -> None:
    compose = trusted_entries({"vllm_ports": "llmao_servers | map(attribute='port') | list"})
    inventory = populate(fleet, compose=compose)
    assert inventory.get_host("203.0.113.10").get_vars()["vllm_ports"] == [8001, 8002]
    assert inventory.get_host("198.51.100.7").get_vars()["vllm_ports"] == [8000]


def test_groups_and_keyed_groups(fleet: Fleet) -> None:
    groups = trusted_entries({"multi_model": "llmao_servers | length > 1"})
    keyed = [{"key": trust_as_template("llmao_servers | map(attribute='served_model_name') "
                                       "| list"), "prefix": "serves"}]
    inventory = populate(fleet, groups=groups, keyed_groups=keyed)
    assert members(inventory, "multi_model") == {"203.0.113.10", "203.0.113.11"}
    assert members(inventory, "serves_qwen_served") == {
        "203.0.113.10", "203.0.113.11", "2001:db8::5"}
    assert members(inventory, "serves_gemma4_26b") == {
        "203.0.113.10", "198.51.100.7", "pod-abc123"}


def test_lenient_compose_skips_an_expression_that_fails(fleet: Fleet) -> None:
    compose = trusted_entries({"broken": "no_such_variable.port"})
    inventory = populate(fleet, compose=compose, strict=False)
    assert all("broken" not in host.get_vars() for host in inventory.hosts.values())


def test_strict_compose_fails_on_an_expression_that_fails(fleet: Fleet) -> None:
    compose = trusted_entries({"broken": "no_such_variable.port"})
    with pytest.raises(AnsibleError, match="Could not set broken"):
        populate(fleet, compose=compose, strict=True)


def test_core_warnings_go_to_display_warning(fleet: Fleet, monkeypatch) -> None:
    shown: list[str] = []
    plugin = make_plugin()
    monkeypatch.setattr(sys.modules[type(plugin).__module__].display, "warning", shown.append)
    plugin.populate(InventoryData(), fleet)
    assert fleet.warnings and shown == list(fleet.warnings)
    assert any("pod-abc123" in warning and "deprecated" in warning for warning in shown)


@pytest.mark.parametrize(("name", "accepted"), [
    ("fleet.yml", True), ("fleet.yaml", True), ("prod.fleet.yml", True),
    ("hosts.yml", False), ("fleet.yml.bak", False),
])
def test_verify_file_takes_fleet_sources_only(tmp_path: Path, name: str, accepted: bool) -> None:
    source = tmp_path / name
    source.write_text(f"plugin: {PLUGIN}\n")
    assert make_plugin().verify_file(str(source)) is accepted


def test_verify_file_refuses_a_missing_file(tmp_path: Path) -> None:
    assert make_plugin().verify_file(str(tmp_path / "fleet.yml")) is False


def write_source(folder: Path, extra: str = "") -> str:
    source = folder / "fleet.yml"
    source.write_text(f"plugin: {PLUGIN}\nconfig: config.yaml\nmodels: models.yaml\n{extra}")
    return str(source)


def parse(source: str, cache: bool = True) -> InventoryData:
    inventory = InventoryData()
    plugin = inventory_loader.get(PLUGIN)
    plugin.parse(inventory, DataLoader(), source, cache=cache)
    if getattr(plugin, "_cache", None) is not None:
        plugin.update_cache_if_changed()
    return inventory


def test_parse_reads_paths_relative_to_the_source(write_fleet, tmp_path: Path,
                                                  monkeypatch) -> None:
    config_path = write_fleet()[0]
    monkeypatch.chdir("/")
    inventory = parse(write_source(tmp_path))
    assert "203.0.113.10" in inventory.hosts
    assert inventory.groups["llmao_boxes"].get_vars()["llmao_config_file"] == config_path


def test_parse_fails_with_the_loaders_message(write_fleet, base_config, tmp_path: Path,
                                              secrets: dict[str, str]) -> None:
    base_config["fleet"]["hosts"]["203.0.113.10"][1][1] = 8001
    base_config["fleet"]["hosts"]["198.51.100.7"] = [["nope", 8000]]
    config_path = write_fleet(base_config)[0]
    with pytest.raises(AnsibleParserError) as caught:
        parse(write_source(tmp_path))
    message = str(caught.value)
    assert f"{config_path}: fleet.hosts.203.0.113.10[1]: duplicate port 8001" in message
    assert f"{config_path}: fleet.hosts.198.51.100.7[0]: model 'nope' is not in models.yaml" \
        in message
    assert not any(secret in message for secret in secrets.values())


CACHE_OPTIONS = "cache: true\ncache_plugin: ansible.builtin.jsonfile\ncache_connection: {}\n"


def count_loads(monkeypatch) -> list[str]:
    """Record every load_fleet the plugin makes (it still loads for real)."""
    calls: list[str] = []
    module = sys.modules[type(inventory_loader.get(PLUGIN)).__module__]

    def counting(config: str, models: str) -> Fleet:
        calls.append(config)
        return load_fleet(config, models)

    monkeypatch.setattr(module, "load_fleet", counting)
    return calls


def test_cache_is_reused_while_the_files_are_unchanged(write_fleet, tmp_path: Path,
                                                       monkeypatch) -> None:
    write_fleet()
    source = write_source(tmp_path, CACHE_OPTIONS.format(tmp_path / "cache"))
    calls = count_loads(monkeypatch)
    first = parse(source)
    second = parse(source)
    assert len(calls) == 1
    assert plain(second.get_host("pod-abc123").get_vars()) == plain(
        first.get_host("pod-abc123").get_vars())
    assert second.get_host("pod-abc123").get_vars()["llmao_public_ports"] == {8001: 40001}
    assert members(second, "llmao_model_qwen3_8b") == members(first, "llmao_model_qwen3_8b")


def test_cache_is_refreshed_when_a_file_changes(write_fleet, base_config, tmp_path: Path,
                                                monkeypatch) -> None:
    write_fleet()
    source = write_source(tmp_path, CACHE_OPTIONS.format(tmp_path / "cache"))
    calls = count_loads(monkeypatch)
    parse(source)
    base_config["fleet"]["hosts"]["192.0.2.99"] = [["qwen3-8b", 8001]]
    write_fleet(base_config)
    assert "192.0.2.99" in parse(source).hosts
    assert len(calls) == 2


def test_flushing_the_cache_reloads(write_fleet, tmp_path: Path, monkeypatch) -> None:
    write_fleet()
    source = write_source(tmp_path, CACHE_OPTIONS.format(tmp_path / "cache"))
    calls = count_loads(monkeypatch)
    parse(source)
    parse(source, cache=False)
    assert len(calls) == 2


def test_cache_holds_no_secret(write_fleet, tmp_path: Path, secrets: dict[str, str]) -> None:
    config_path, models_path = write_fleet()
    parse(write_source(tmp_path, CACHE_OPTIONS.format(tmp_path / "cache")))
    written = "".join(path.read_text() for path in (tmp_path / "cache").iterdir())
    assert "203.0.113.10" in written
    bearers = {server.api_key for server in load_fleet(config_path, models_path).servers()}
    assert not any(secret in written for secret in {*secrets.values(), *bearers})


# ------------------------------------------------------------------ provider listings

def listed_box(provider: str, names: tuple[str, ...], address: str, ports: dict[int, int],
               price: float | None = None) -> Any:
    from types import MappingProxyType

    from ansible_collections.llmao.fleet.plugins.module_utils.listings import ListedBox

    return ListedBox(provider, names, address, MappingProxyType(ports), price)


@pytest.fixture
def listed_fleet(write_fleet, base_config) -> Fleet:
    """Vast boxes keyed by address and by instance id, a RunPod pod, and one no listing names."""
    base_config["providers"] = {"vast": {"api_key": "unit-vast-api-key-0d0d"},
                                "runpod": {"api_key": "unit-runpod-api-key-0e0e"}}
    base_config["fleet"]["hosts"]["4242"] = [["qwen3-8b", 8001]]
    return load_fleet(*write_fleet(base_config))


def fleet_listings(*extra: Any) -> Any:
    from ansible_collections.llmao.fleet.plugins.module_utils.listings import index_listings

    boxes = [
        listed_box("vast", ("1001", "203.0.113.10"), "203.0.113.10",
                   {22: 41022, 8001: 41001, 8002: 41002}, 0.8021),
        listed_box("vast", ("4242", "203.0.113.77"), "203.0.113.77", {22: 42022, 8001: 42001}),
        listed_box("runpod", ("pod-abc123", "198.51.100.20"), "198.51.100.20",
                   {22: 30022, 8001: 30001}, 0.44),
        *extra,
    ]
    return index_listings(["vast", "runpod"], boxes, {})


def test_listings_set_where_to_ssh_and_group_by_provider(listed_fleet: Fleet) -> None:
    inventory = InventoryData()
    make_plugin(listings=True).populate(inventory, listed_fleet, fleet_listings())
    vast = inventory.get_host("203.0.113.10").get_vars()
    assert (vast["ansible_host"], vast["ansible_port"]) == ("203.0.113.10", 41022)
    assert vast["llmao_public_ports"] == {8001: 41001, 8002: 41002}
    assert vast["llmao_price_per_hour"] == pytest.approx(0.8021)
    by_id = inventory.get_host("4242").get_vars()
    assert (by_id["ansible_host"], by_id["ansible_port"]) == ("203.0.113.77", 42022)
    pod = inventory.get_host("pod-abc123").get_vars()
    assert (pod["ansible_host"], pod["ansible_port"], pod["llmao_provider"]) == (
        "198.51.100.20", 30022, "runpod")
    assert pod["llmao_public_ports"] == {8001: 30001}  # the listing replaces the seeded port
    assert members(inventory, "llmao_provider_vast") == {"203.0.113.10", "4242"}
    assert members(inventory, "llmao_provider_runpod") == {"pod-abc123"}
    unlisted = inventory.get_host("203.0.113.11").get_vars()
    assert unlisted["llmao_provider"] == "unlisted" and "ansible_port" not in unlisted
    assert "203.0.113.11" in members(inventory, "llmao_provider_unlisted")


def test_status_interruptibility_and_a_skipped_entry(listed_fleet: Fleet, monkeypatch) -> None:
    """``llmao_provider_status`` and ``llmao_interruptible`` come from the listing; an entry it
    could not read is a warning naming it, and the inventory is built from the rest."""
    from types import MappingProxyType

    from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
        EntryProblem,
        ListedBox,
        index_listings,
    )

    spot = ListedBox("vast", ("4242",), "", MappingProxyType({}), None, "exited", True)
    running = listed_box("vast", ("1001", "203.0.113.10"), "203.0.113.10", {22: 41022}, 0.8)
    broken = EntryProblem("runpod", "runpod: pods[0]", "runtime is not an object",
                          ("pod-abc123",))
    plugin = make_plugin()
    shown: list[str] = []
    monkeypatch.setattr(sys.modules[type(plugin).__module__].display, "warning", shown.append)
    inventory = InventoryData()
    plugin.populate(inventory, listed_fleet,
                    index_listings(["vast", "runpod"], [spot, running], {}, [broken]))
    preempted = inventory.get_host("4242").get_vars()
    assert (preempted["llmao_provider_status"], preempted["llmao_interruptible"]) == (
        "exited", True)
    on_demand = inventory.get_host("203.0.113.10").get_vars()
    assert on_demand["llmao_interruptible"] is False
    assert "llmao_provider_status" not in on_demand  # the listing gave none
    assert "llmao fleet: runpod: pods[0] (runpod pod-abc123): runtime is not an object: " \
           "skipped; the rest of the listing stands" in shown


def test_an_ambiguous_address_gets_no_ssh_port_and_a_warning(listed_fleet: Fleet,
                                                             monkeypatch) -> None:
    neighbour = listed_box("vast", ("1002", "203.0.113.10"), "203.0.113.10", {22: 43022})
    plugin = make_plugin()
    shown: list[str] = []
    monkeypatch.setattr(sys.modules[type(plugin).__module__].display, "warning", shown.append)
    inventory = InventoryData()
    plugin.populate(inventory, listed_fleet, fleet_listings(neighbour))
    shared = inventory.get_host("203.0.113.10").get_vars()
    assert "ansible_port" not in shared and shared["llmao_provider"] == "vast"
    assert "vast 1001, vast 1002 share this address" in shared["llmao_ambiguous"]
    assert any("203.0.113.10 is ambiguous" in warning for warning in shown)


def test_a_runpod_only_fleet_is_not_local(write_fleet, base_config) -> None:
    base_config["providers"] = {"runpod": {"api_key": "unit-runpod-api-key-0e0e"}}
    inventory = populate(load_fleet(*write_fleet(base_config)))
    assert "llmao_provider_local" not in inventory.groups
    assert members(inventory, "llmao_provider_unlisted") == set(inventory.hosts)


def test_a_listing_that_cannot_be_read_fails_the_source(write_fleet, base_config,
                                                        tmp_path: Path, secrets) -> None:
    base_config["providers"] = {"vast": {"api_key": secrets["vast_key"],
                                         "url": "http://127.0.0.1:9/api/v1"}}
    write_fleet(base_config)
    with pytest.raises(AnsibleParserError) as caught:
        parse(write_source(tmp_path, "listings: true\nlistings_timeout: 2\n"))
    message = str(caught.value)
    assert "the vast listing could not be read" in message
    assert "not built from a partial listing" in message
    assert secrets["vast_key"] not in message


def test_without_the_option_no_listing_is_read(write_fleet, base_config, tmp_path: Path) -> None:
    base_config["providers"] = {"vast": {"api_key": "unit-vast-api-key-0d0d",
                                         "url": "http://127.0.0.1:9/api/v1"}}
    write_fleet(base_config)
    inventory = parse(write_source(tmp_path))
    assert members(inventory, "llmao_provider_unlisted") == set(inventory.hosts)


@pytest.mark.skipif(not TRUST_TAGS, reason="ansible-core before 2.19 tags no string as trusted")
def test_hostvars_are_trusted_plain_strings_but_a_template_stays_untrusted(
        write_fleet, base_config, base_models) -> None:
    """ansible-core 2.19 prints untrusted strings as ``__ansible_unsafe``; ours are trusted."""
    from ansible.template import is_trusted_as_template

    base_models["models"][0]["model_info"]["vllm"]["args"] = [
        "--chat-template", "{{ messages }}", "--seed", "1"]
    inventory = populate(load_fleet(*write_fleet(base_config, base_models)))
    hostvars = inventory.get_host("198.51.100.7").get_vars()
    assert is_trusted_as_template(hostvars["llmao_box"])
    assert is_trusted_as_template(hostvars["ansible_host"])
    args = hostvars["llmao_servers"][0]["args"]
    assert [is_trusted_as_template(arg) for arg in args] == [True, False, True, True]
    assert is_trusted_as_template(inventory.groups["all"].get_vars()["llmao_config_file"])
