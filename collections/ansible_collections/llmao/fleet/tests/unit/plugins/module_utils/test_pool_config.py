"""``pools:`` and ``budget:`` in config.yaml: read whole at load, every problem named by file and
key path, and a pool box's assignment built exactly as a ``fleet.hosts`` box's."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.pool_config import (
    box_name,
    instance_label,
    read_label,
)
from ansible_collections.llmao.fleet.tests.unit.fleets import (
    VAST_KEY,
    base_config,
    pooled,
    write_pair,
)


def load(tmp_path, config):
    return load_fleet(*write_pair(tmp_path, config))


def refused(tmp_path, config) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, config)
    return str(caught.value)


def test_a_pool_loads_with_its_rows_offer_sizes_and_the_budget(tmp_path):
    settings = load(tmp_path, pooled()).settings
    pool = settings.pools["chat"]
    assert (pool.provider, pool.min_boxes, pool.max_boxes) == ("vast", 1, 4)
    assert [(row.model_name, row.port, row.name) for row in pool.rows] == [
        ("gemma", 8001, "gemma"), ("qwen", 8002, "qwen")]
    assert pool.offer.gpu_names == ("RTX 4090",) and pool.offer.max_usd_per_hour == 0.6
    assert (pool.scale_up_passes, pool.idle_s, pool.image) == (3, 1800.0,
                                                               "vllm/vllm-openai:latest")
    assert settings.budget.max_usd_per_hour == 5.0


def test_a_fleet_without_pools_has_none_and_needs_no_budget(tmp_path):
    settings = load(tmp_path, base_config()).settings
    assert dict(settings.pools) == {} and settings.budget is None


def _pool(config):
    return config["pools"]["chat"]


CASES = [
    ("min above max", lambda c: _pool(c).update(boxes={"min": 3, "max": 2}),
     "config.yaml: pools.chat.boxes: min 3 > max 2"),
    ("unknown provider", lambda c: _pool(c).update(provider="aws"),
     "config.yaml: pools.chat.provider: must be one of vast, runpod, not 'aws'"),
    ("provider without its key", lambda c: _pool(c).update(provider="runpod"),
     "config.yaml: pools.chat.provider: runpod has no providers.runpod"),
    ("unknown model", lambda c: _pool(c).update(serve=[["llama", 8001]]),
     "config.yaml: pools.chat.serve[0]: model 'llama' is not in models.yaml"),
    ("commercial model", lambda c: _pool(c).update(serve=[["gpt", 8001]]),
     "config.yaml: pools.chat.serve[0]: model 'gpt' is a commercial route"),
    ("not a listen port", lambda c: _pool(c).update(serve=[["gemma", 9000]]),
     "config.yaml: pools.chat.serve[0]: port 9000 is not a listen port"),
    ("duplicate port", lambda c: _pool(c).update(serve=[["gemma", 8001], ["qwen", 8001]]),
     "config.yaml: pools.chat.serve[1]: duplicate port 8001"),
    ("no rows", lambda c: _pool(c).pop("serve"), "config.yaml: pools.chat.serve: is required"),
    ("budget below one box", lambda c: c.update(budget={"max_usd_per_hour": 0.5}),
     "config.yaml: budget.max_usd_per_hour: 0.5 $/h is below one box of pool chat "
     "(offer.max_usd_per_hour 0.6)"),
    ("no budget", lambda c: c.pop("budget"),
     "config.yaml: budget.max_usd_per_hour: is required while pools are set"),
    ("no price ceiling", lambda c: _pool(c)["offer"].pop("max_usd_per_hour"),
     "config.yaml: pools.chat.offer.max_usd_per_hour: is required"),
    ("no gpu names", lambda c: _pool(c)["offer"].update(gpu_names=[]),
     "config.yaml: pools.chat.offer.gpu_names: must be a list of 1 to 20 GPU names"),
    ("no max", lambda c: _pool(c).update(boxes={"min": 1}),
     "config.yaml: pools.chat.boxes.max: is required"),
    ("bad pool name", lambda c: c["pools"].update({"Chat_X": c["pools"].pop("chat")}),
     "config.yaml: pools.Chat_X: a pool name must be 1 to 32 lowercase letters"),
    ("unknown pool key", lambda c: _pool(c).update(size=3),
     "config.yaml: pools.chat.size: unknown key"),
    ("unknown offer key", lambda c: _pool(c)["offer"].update(gpus=1),
     "config.yaml: pools.chat.offer.gpus: unknown key"),
    ("interruptible not a flag", lambda c: _pool(c)["offer"].update(interruptible="yes"),
     "config.yaml: pools.chat.offer.interruptible: must be true or false"),
    ("pools a list", lambda c: c.update(pools=[]), "config.yaml: pools: must be a mapping"),
    ("runpod spot", lambda c: (c["providers"].update(runpod={"api_key": VAST_KEY + "r"}),
                               _pool(c).update(provider="runpod"),
                               _pool(c)["offer"].update(interruptible=True)),
     "config.yaml: pools.chat.offer.interruptible: RunPod's v2 create has no spot pods"),
    ("env naming llmao's own", lambda c: _pool(c).update(env={"FLEET_KEY": "x"}),
     "config.yaml: pools.chat.env.FLEET_KEY: must be an upper-case variable name other than"),
    ("env not a string", lambda c: _pool(c).update(env={"DATA_DIRECTORY": 5}),
     "config.yaml: pools.chat.env.DATA_DIRECTORY: must be a string"),
    ("bad image", lambda c: _pool(c).update(image="a b"),
     "config.yaml: pools.chat.image: must be a container image reference"),
]


@pytest.mark.parametrize(("change", "message"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_pool_rule(tmp_path, change, message):
    assert message in refused(tmp_path, pooled(change))


def test_every_pool_problem_is_reported_at_once_and_no_secret_in_it(tmp_path):
    def break_all(config):
        _pool(config).update(boxes={"min": 5, "max": 2}, serve=[["llama", 8001]])
        config["budget"] = {"max_usd_per_hour": 0.1}

    message = refused(tmp_path, pooled(break_all))
    assert "pools.chat.boxes: min 5 > max 2" in message
    assert "pools.chat.serve[0]: model 'llama'" in message
    assert "budget.max_usd_per_hour: 0.1 $/h" in message
    assert VAST_KEY not in message


def test_a_pool_box_serves_the_pool_rows_exactly_as_a_hosts_box_with_those_rows(tmp_path):
    box = box_name("chat", "a1b2c3d4")
    pooled_fleet = load(tmp_path / "pool", pooled())

    def as_host(config):
        config["fleet"]["hosts"][box] = [["gemma", 8001], ["qwen", 8002]]

    hosted_fleet = load(tmp_path / "hosts", pooled(as_host))
    from_pool = pooled_fleet.pool_assignment(box, "chat")
    from_hosts = hosted_fleet.assignment(box)
    assert (from_pool.revision, from_pool.body) == (from_hosts.revision, from_hosts.body)
    assert [server.id for server in from_pool.servers] == [
        f"llmao:{box}:8001:gemma", f"llmao:{box}:8002:qwen"]
    assert json.loads(from_pool.body)["host"] == box
    assert pooled_fleet.pool_assignment(box, "chat") is from_pool  # kept, a lookup


def test_two_pool_boxes_get_different_bearers(tmp_path):
    fleet = load(tmp_path, pooled())
    one = fleet.pool_assignment(box_name("chat", "a" * 8), "chat").servers[0]
    two = fleet.pool_assignment(box_name("chat", "b" * 8), "chat").servers[0]
    assert one.api_key != two.api_key


def test_a_pool_assignment_refuses_an_unknown_pool_and_an_unsendable_name(tmp_path):
    fleet = load(tmp_path, pooled())
    with pytest.raises(KeyError):
        fleet.pool_assignment("chat-aaaaaaaa", "other")
    with pytest.raises(ValueError):
        fleet.pool_assignment("two words", "chat")


@pytest.mark.parametrize("label", [
    None, 42, "", "llmao-pool:chat", "llmao-pool:chat/other-aaaaaaaa",
    "llmao-pool:chat/chat-AAAA1111",
    "llmao-pool:chat/chat-aaaa", "other:chat/chat-aaaaaaaa", "llmao-pool:Chat/Chat-aaaaaaaa",
    "llmao-pool:chat/chat-aaaaaaaa/x",
])
def test_only_llmaos_exact_label_reads_as_llmaos(label):
    assert read_label(label) is None


def test_a_label_written_reads_back():
    assert read_label(instance_label("chat", "chat-a1b2c3d4")) == ("chat", "chat-a1b2c3d4")


def test_pool_members_join_the_fleet_as_any_box_and_strays_are_warned_about(tmp_path):
    fleet = load(tmp_path, pooled())
    member = box_name("chat", "a1b2c3d4")
    joined = fleet.with_pool_members({member: "chat", "chat-zzzzzzzz": "gone",
                                      "203.0.113.10": "chat"})
    assert joined.assignment(member) == fleet.pool_assignment(member, "chat")
    assert [s.id for s in joined.servers()][-2:] == [f"llmao:{member}:8001:gemma",
                                                     f"llmao:{member}:8002:qwen"]
    assert joined.assignment("chat-zzzzzzzz") is None
    assert joined.assignment("203.0.113.10") == fleet.assignment("203.0.113.10")
    assert any("pool 'gone' is not in config.yaml" in w for w in joined.warnings)
    assert any("203.0.113.10 ignored: it is in fleet.hosts" in w for w in joined.warnings)


def test_a_pools_template_env_and_onstart_are_kept(tmp_path):
    env = {"PROVISIONING_SCRIPT": "https://example.invalid/provision.sh",
           "DATA_DIRECTORY": "/workspace"}
    pool = load(tmp_path, pooled(env=env, onstart="bash /opt/start.sh")).settings.pools["chat"]
    assert dict(pool.env) == env and pool.onstart == "bash /opt/start.sh"
