"""The payload a box receives, its revision, and approved assignments."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.bearer import derive_vllm_api_key
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import ApprovalError, load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id, revision_of
from ansible_collections.llmao.fleet.tests.unit.fleets import (
    SALT,
    SHARED_BEARER,
    base_config,
    base_models,
    write_pair,
)
from ansible_collections.llmao.fleet.tests.unit.rollout_rule import rollout_problem
from rig.fleet_files import recipe


@pytest.fixture
def fleet(tmp_path):
    return load_fleet(*write_pair(tmp_path))


def test_payload_matches_the_seed_shape(fleet):
    payload = json.loads(fleet.assignment("203.0.113.10").body)
    assert list(payload) == ["host", "servers", "revision"]
    gemma, qwen = payload["servers"]
    assert gemma == {
        "name": "gemma", "model": "google/gemma", "served_model_name": "gemma",
        "host": "203.0.113.10", "port": 8001,
        "api_key": derive_vllm_api_key(SALT, "203.0.113.10", 8001),
        "args": ["--reasoning-parser", "gemma"],
        "max_model_len": 32768, "vram_gb": 18, "disk_gb": 60,
    }
    assert list(gemma) == ["name", "model", "served_model_name", "host", "port", "api_key",
                           "args", "max_model_len", "vram_gb", "disk_gb"]
    # A string of args is split like a shell would; unset numbers are absent.
    assert qwen["args"] == ["--tool-call-parser", "hermes x"]
    assert qwen["served_model_name"] == "qwen-served"
    assert "vram_gb" not in qwen and "gpu_memory_utilization" not in qwen


def test_legacy_pair_carries_the_shared_bearer(fleet):
    (server,) = json.loads(fleet.assignment("198.51.100.7").body)["servers"]
    assert server["port"] == 8000 and server["api_key"] == SHARED_BEARER


def test_revision_is_stable_and_follows_the_assignment(tmp_path):
    first = load_fleet(*write_pair(tmp_path)).assignment("203.0.113.10").revision
    again = load_fleet(*write_pair(tmp_path)).assignment("203.0.113.10").revision
    models = base_models()
    models["models"][0]["model_info"]["vllm"]["max_model_len"] = 16384
    changed = load_fleet(*write_pair(tmp_path, models=models)).assignment("203.0.113.10")
    config = base_config()
    config["fleet"]["vllm_api_salt"] = "another-salt"
    rotated = load_fleet(*write_pair(tmp_path, config=config)).assignment("203.0.113.10")
    assert first == again
    assert len({first, changed.revision, rotated.revision}) == 3
    assert "another-salt" not in rotated.revision


def test_public_view_has_no_bearer(fleet):
    for server in fleet.servers():
        view = server.public_view()
        assert "api_key" not in view
        assert server.api_key not in json.dumps(view)
        assert view["model_name"] == server.model_name


def test_servers_in_file_and_row_order(fleet):
    assert [(s.box, s.listen_port) for s in fleet.servers()] == [
        ("203.0.113.10", 8001), ("203.0.113.10", 8002), ("198.51.100.7", 8000)]


def test_a_server_id_is_its_box_listen_port_and_name(fleet):
    """The one id a server goes by: its LiteLLM deployment, its verdict and its probe."""
    assert [s.id for s in fleet.servers()] == [
        "llmao:203.0.113.10:8001:gemma", "llmao:203.0.113.10:8002:qwen",
        "llmao:198.51.100.7:8000:gemma"]
    assert all(s.id == deployment_id(s.box, s.listen_port, s.name) for s in fleet.servers())


def test_repr_hides_secrets(fleet):
    text = repr(list(fleet.servers())) + repr(fleet)
    assert SALT not in text and SHARED_BEARER not in text
    assert all(s.api_key not in text for s in fleet.servers())


def test_approved_box_gets_listen_ports_in_order(fleet):
    assignment = fleet.approved_assignment(" ::ffff:192.0.2.77", ["qwen", "gemma"])
    payload = json.loads(assignment.body)
    assert payload["host"] == "192.0.2.77"
    assert [(s["name"], s["port"]) for s in payload["servers"]] == [("qwen", 8001), ("gemma", 8002)]
    assert payload["servers"][1]["api_key"] == derive_vllm_api_key(SALT, "192.0.2.77", 8002)
    assert payload["revision"] == assignment.revision


@pytest.mark.parametrize(("box", "models", "reason"), [
    ("192.0.2.77", [], "pick at least one model"),
    ("192.0.2.77", ["gemma", "qwen", "gemma", "qwen"], "at most 3 models"),
    ("192.0.2.77", ["gemma", "gemma"], "each model can be picked once"),
    ("192.0.2.77", ["nope"], "'nope' is not in models.yaml"),
    ("192.0.2.77", ["gpt"], "'gpt' is a commercial route"),
    ("203.0.113.10", ["gemma"], "already in fleet.hosts"),
    ("  ", ["gemma"], "the box name is empty"),
])
def test_approval_refusals(fleet, box, models, reason):
    with pytest.raises(ApprovalError, match=reason):
        fleet.approved_assignment(box, models)


def test_an_approval_naming_a_server_as_the_follow_program_is_refused_while_boxes_follow(
        tmp_path):
    models = base_models()
    models["models"].append(recipe("follow", "org/follow"))
    config = base_config()
    config["rollout"] = {"follow_s": 30}
    following = load_fleet(*write_pair(tmp_path, config, models))
    with pytest.raises(ApprovalError, match="would name a server as the follow program"):
        following.approved_assignment("192.0.2.77", ["gemma", "follow"])
    (tmp_path / "still").mkdir()
    still = load_fleet(*write_pair(tmp_path / "still", base_config(), models))
    assert [s.name for s in still.approved_assignment("192.0.2.77", ["follow"]).servers] == \
        ["follow"]


def test_with_approvals_adds_approved_boxes_after_the_configured_ones(fleet):
    approved = fleet.with_approvals({"192.0.2.77": ["qwen", "gemma"]})
    assert [(s.box, s.name, s.listen_port) for s in approved.servers()][-2:] == [
        ("192.0.2.77", "qwen", 8001), ("192.0.2.77", "gemma", 8002)]
    assert approved.assignment("192.0.2.77").revision == \
        fleet.approved_assignment("192.0.2.77", ["qwen", "gemma"]).revision
    assert approved.warnings == fleet.warnings
    assert fleet.assignment("192.0.2.77") is None  # the original is left as it was


def test_with_approvals_leaves_fleet_hosts_rows_alone(fleet):
    approved = fleet.with_approvals({"203.0.113.10": ["qwen"]})
    assert approved.assignment("203.0.113.10") is fleet.assignment("203.0.113.10")
    assert approved.warnings == fleet.warnings


@pytest.mark.parametrize(("models", "reason"), [
    (["nope"], "approval of 192.0.2.77 ignored: 'nope' is not in models.yaml"),
    ("gemma", "approval of 192.0.2.77 ignored: its models must be a list of names"),
    ([], "approval of 192.0.2.77 ignored: pick at least one model"),
])
def test_with_approvals_warns_of_a_refused_approval_and_keeps_the_rest(fleet, models, reason):
    approved = fleet.with_approvals({"192.0.2.77": models, "192.0.2.78": ["gemma"]})
    assert approved.assignment("192.0.2.77") is None
    assert approved.assignment("192.0.2.78") is not None
    assert approved.warnings[len(fleet.warnings):] == (reason,)


def test_server_bearer_is_the_one_legacy_rule(fleet):
    from ansible_collections.llmao.fleet.plugins.module_utils.bearer import server_bearer

    settings = fleet.settings
    assert server_bearer(settings, " ::ffff:198.51.100.7", 8000) == SHARED_BEARER
    assert server_bearer(settings, "203.0.113.10", 8001) == \
        derive_vllm_api_key(SALT, "203.0.113.10", 8001)
    assert [s.api_key for s in fleet.servers()] == [
        server_bearer(settings, s.box, s.listen_port) for s in fleet.servers()]


def test_settings_list_every_secret(fleet):
    secrets = fleet.settings.secrets()
    assert SALT in secrets and SHARED_BEARER in secrets
    assert fleet.settings.fleet.key in secrets


def test_gpus_is_sent_only_when_the_recipe_sets_it(tmp_path, fleet):
    models = base_models()
    models["models"][0]["model_info"]["vllm"].update(
        gpus=4, args=["--tensor-parallel-size", "2", "-pp", "2"])
    spanning = load_fleet(*write_pair(tmp_path, models=models)).assignment("203.0.113.10")
    gemma = json.loads(spanning.body)["servers"][0]
    assert gemma["gpus"] == 4 and gemma["args"][-2:] == ["-pp", "2"]
    assert spanning.revision != fleet.assignment("203.0.113.10").revision
    assert all("gpus" not in server for server in
               json.loads(fleet.assignment("203.0.113.10").body)["servers"])


def following(**rollout):
    config = base_config()
    config["rollout"] = rollout
    return config


def test_a_fleet_that_does_not_follow_keeps_its_payload_and_revision(tmp_path):
    plain = load_fleet(*write_pair(tmp_path)).assignment("203.0.113.10")
    tuned = load_fleet(*write_pair(tmp_path, config=following(max_unavailable=2, drain_s=5)))
    assert tuned.assignment("203.0.113.10").body == plain.body
    assert tuned.assignment("203.0.113.10").revision == plain.revision
    # The revision is still the hash of host and servers alone, as boxes already applied it.
    entries = [server.payload_entry() for server in plain.servers]
    assert revision_of("203.0.113.10", entries) == plain.revision


def test_a_following_fleet_sends_rollout_and_its_revision_covers_it(tmp_path):
    plain = load_fleet(*write_pair(tmp_path)).assignment("203.0.113.10")
    fleet = load_fleet(*write_pair(tmp_path, config=following(follow_s=30, drain_s=5)))
    payload = json.loads(fleet.assignment("203.0.113.10").body)
    assert list(payload) == ["host", "servers", "revision", "rollout"]
    assert payload["rollout"] == {"follow_s": 30.0, "drain_s": 5.0}
    assert all(isinstance(value, float) for value in payload["rollout"].values())
    assert payload["servers"] == json.loads(plain.body)["servers"]
    assert payload["revision"] != plain.revision
    slower = load_fleet(*write_pair(tmp_path, config=following(follow_s=60, drain_s=5)))
    assert slower.assignment("203.0.113.10").revision != payload["revision"]
    assert rollout_problem(payload["rollout"]) is None


def test_an_approved_box_of_a_following_fleet_follows_too(tmp_path):
    fleet = load_fleet(*write_pair(tmp_path, config=following(follow_s=30)))
    approved = fleet.approved_assignment("192.0.2.50", ["gemma"])
    assert json.loads(approved.body)["rollout"] == {"follow_s": 30.0, "drain_s": 30.0}


ROLLOUT_RULE_CASES = [
    ({"follow_s": 1, "drain_s": 0}, True),
    ({"follow_s": 86400.0, "drain_s": 3600.0}, True),
    ({"follow_s": 0.99, "drain_s": 0}, False),
    ({"follow_s": 86400.5, "drain_s": 0}, False),
    ({"follow_s": 30, "drain_s": -0.1}, False),
    ({"follow_s": 30, "drain_s": 3601}, False),
    ({"follow_s": float("nan"), "drain_s": 1}, False),
    ({"follow_s": 30, "drain_s": float("inf")}, False),
    ({"follow_s": True, "drain_s": 1}, False),
    ({"follow_s": "30", "drain_s": 1}, False),
    ({"follow_s": 30}, False),
    ({"follow_s": 30, "drain_s": 1, "max_unavailable": 1}, False),
    ([30, 1], False),
    (None, False),
]


@pytest.mark.parametrize(("value", "accepted"), ROLLOUT_RULE_CASES)
def test_the_rollout_rule(value, accepted):
    assert (rollout_problem(value) is None) == accepted
