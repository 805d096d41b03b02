"""Loading config.yaml + models.yaml: every rule, every message names file, key path and row."""

from __future__ import annotations

import shutil

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils import fleet as fleet_module
from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.tests.unit.fleets import (
    FLEET_KEY,
    SALT,
    SHARED_BEARER,
    base_config,
    base_models,
    write_pair,
)


def load(tmp_path, config=None, models=None, **raw):
    return load_fleet(*write_pair(tmp_path, config, models, **raw))


def refused(tmp_path, config=None, models=None, **raw) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, config, models, **raw)
    return str(caught.value)


def test_base_fleet_loads(tmp_path):
    fleet = load(tmp_path)
    assert list(fleet.assignments) == ["203.0.113.10", "198.51.100.7"]
    assert [s.name for s in fleet.assignment("203.0.113.10").servers] == ["gemma", "qwen"]
    assert fleet.fleet_key_configured
    assert fleet.warnings == ()


def with_config(change):
    config = base_config()
    change(config)
    return config


def with_models(change):
    models = base_models()
    change(models)
    return models


def _hosts(config):
    return config["fleet"]["hosts"]


CONFIG_CASES = [
    ("duplicate port",
     lambda c: _hosts(c).update({"203.0.113.10": [["gemma", 8001], ["qwen", 8001, "q2"]]}),
     "config.yaml: fleet.hosts.203.0.113.10[1]: duplicate port 8001"),
    ("duplicate name",
     lambda c: _hosts(c).update({"203.0.113.10": [["gemma", 8001], ["gemma", 8002]]}),
     "fleet.hosts.203.0.113.10[1]: duplicate name 'gemma'"),
    ("four rows",
     lambda c: _hosts(c).update({"203.0.113.10": [
         ["gemma", 8001], ["qwen", 8002], ["gemma", 8003, "g2"], ["qwen", 8004, "q2"]]}),
     "fleet.hosts.203.0.113.10: has 4 rows; a box runs at most 3"),
    ("port outside the listen ports",
     lambda c: _hosts(c).update({"203.0.113.10": [["gemma", 9000]]}),
     "fleet.hosts.203.0.113.10[0]: port 9000 is not a listen port"),
    ("unknown model",
     lambda c: _hosts(c).update({"203.0.113.10": [["nope", 8001]]}),
     "fleet.hosts.203.0.113.10[0]: model 'nope' is not in models.yaml"),
    ("commercial model on a box",
     lambda c: _hosts(c).update({"203.0.113.10": [["gpt", 8001]]}),
     "fleet.hosts.203.0.113.10[0]: model 'gpt' is a commercial route"),
    ("row too short",
     lambda c: _hosts(c).update({"203.0.113.10": [["gemma"]]}),
     "fleet.hosts.203.0.113.10[0]: must be [model_name, port]"),
    ("row not a list",
     lambda c: _hosts(c).update({"203.0.113.10": ["gemma:8001"]}),
     "fleet.hosts.203.0.113.10[0]: must be [model_name, port]"),
    ("port as string",
     lambda c: _hosts(c).update({"203.0.113.10": [["gemma", "8001"]]}),
     "fleet.hosts.203.0.113.10[0]: the port (second element) must be an integer port"),
    ("port as boolean",
     lambda c: _hosts(c).update({"203.0.113.10": [["gemma", True]]}),
     "the port (second element) must be an integer port"),
    ("name unfit for supervisor",
     lambda c: _hosts(c).update({"203.0.113.10": [["gemma", 8001, "a b:c"]]}),
     "fleet.hosts.203.0.113.10[0]: the name 'a b:c' cannot name a Supervisor program"),
    ("bad public port",
     lambda c: _hosts(c).update({"203.0.113.10": [["gemma", 8001, "gemma", "x"]]}),
     "the public port (fourth element) must be a port"),
    ("hosts missing", lambda c: c["fleet"].pop("hosts"),
     "config.yaml: fleet.hosts: is required (write {} for an empty fleet)"),
    ("hosts a list", lambda c: c["fleet"].update(hosts=[]),
     "fleet.hosts: must be a mapping of box name to rows, not a list"),
    ("rows a mapping", lambda c: _hosts(c).update({"203.0.113.10": {"gemma": 8001}}),
     "fleet.hosts.203.0.113.10: must be a list of [model_name, port] rows"),
    ("two keys, one box", lambda c: _hosts(c).update({"::ffff:203.0.113.10": [["gemma", 8001]]}),
     "fleet.hosts.::ffff:203.0.113.10: names the same box as another key (203.0.113.10)"),
    ("box name not a string", lambda c: _hosts(c).update({8080: [["gemma", 8001]]}),
     "fleet.hosts.8080: a box name must be a non-empty string"),
    ("salt missing", lambda c: c["fleet"].pop("vllm_api_salt"),
     "config.yaml: fleet.vllm_api_salt: missing or CHANGE_ME, but 2 host row(s)"),
    ("salt placeholder", lambda c: c["fleet"].update(vllm_api_salt="CHANGE_ME_SALT"),
     "fleet.vllm_api_salt: missing or CHANGE_ME"),
    ("shared bearer missing for a legacy pair", lambda c: c["fleet"].pop("selfhost_api_key"),
     "fleet.selfhost_api_key: missing or CHANGE_ME, but 1 legacy server(s) use it"),
    ("legacy pair malformed", lambda c: c["fleet"].update(legacy_servers=[["198.51.100.7"]]),
     "fleet.legacy_servers[0]: must be a [host, listen_port] pair"),
    ("unknown fleet key", lambda c: c["fleet"].update(helth_grace_s=10),
     "config.yaml: fleet.helth_grace_s: unknown key"),
    ("unknown section", lambda c: c.update(litelm={"url": "x"}),
     "config.yaml: litelm: unknown key"),
    ("grace not a number", lambda c: c["fleet"].update(health_grace_s="10m"),
     "fleet.health_grace_s: must be a finite number above 0"),
    ("threshold zero", lambda c: c["fleet"].update(health_fail_threshold=0),
     "fleet.health_fail_threshold: must be an integer from 1 to 1000"),
    ("fleet key not a string", lambda c: c["fleet"].update(key=12345),
     "fleet.key: must be a string, not an integer"),
    ("fleet missing", lambda c: c.pop("fleet"), "config.yaml: fleet: is required"),
    ("provider without key", lambda c: c.update(providers={"vast": {"url": "http://x"}}),
     "providers.vast.api_key: is required to enable this provider listing"),
    ("kv usage above 1", lambda c: c["fleet"].update(saturated_kv_usage=1.5),
     "fleet.saturated_kv_usage: must be a finite number above 0 and at most 1"),
    ("saturated passes zero", lambda c: c["fleet"].update(saturated_passes=0),
     "fleet.saturated_passes: must be an integer from 1 to 1000"),
    ("costs a list", lambda c: c["fleet"].update(cost_per_hour=[0.5]),
     "fleet.cost_per_hour: must be a mapping of box name to a price per hour"),
    ("cost negative", lambda c: c["fleet"].update(cost_per_hour={"203.0.113.10": -1}),
     "fleet.cost_per_hour.203.0.113.10: must be a price per hour of 0 or more"),
    ("cost text", lambda c: c["fleet"].update(cost_per_hour={"203.0.113.10": "$1"}),
     "fleet.cost_per_hour.203.0.113.10: must be a price per hour of 0 or more"),
    ("rollout a list", lambda c: c.update(rollout=[30]),
     "config.yaml: rollout: must be a mapping, not a list"),
    ("follow below a second", lambda c: c.update(rollout={"follow_s": 0.5}),
     "config.yaml: rollout.follow_s: must be a finite number from 1 and at most 86400"),
    ("follow above a day", lambda c: c.update(rollout={"follow_s": 86401}),
     "rollout.follow_s: must be a finite number from 1 and at most 86400"),
    ("follow .nan", lambda c: c.update(rollout={"follow_s": float("nan")}),
     "rollout.follow_s: must be a finite number from 1 and at most 86400, not nan"),
    ("follow .inf", lambda c: c.update(rollout={"follow_s": float("inf")}),
     "rollout.follow_s: must be a finite number from 1 and at most 86400, not inf"),
    ("follow text", lambda c: c.update(rollout={"follow_s": "30s"}),
     "rollout.follow_s: must be a finite number"),
    ("drain negative", lambda c: c.update(rollout={"drain_s": -1}),
     "rollout.drain_s: must be a finite number from 0 and at most 3600"),
    ("drain .inf", lambda c: c.update(rollout={"drain_s": float("inf")}),
     "rollout.drain_s: must be a finite number from 0 and at most 3600, not inf"),
    ("max unavailable zero", lambda c: c.update(rollout={"max_unavailable": 0}),
     "rollout.max_unavailable: must be an integer from 1 to 100"),
    ("max unavailable a float", lambda c: c.update(rollout={"max_unavailable": 1.5}),
     "rollout.max_unavailable: must be an integer from 1 to 100"),
    ("max unavailable above 100", lambda c: c.update(rollout={"max_unavailable": 101}),
     "rollout.max_unavailable: must be an integer from 1 to 100"),
    ("rollout unknown key", lambda c: c.update(rollout={"folow_s": 30}),
     "config.yaml: rollout.folow_s: unknown key"),
    ("attempts per peer zero", lambda c: c.update(admin=dict(attempts={"per_peer": 0})),
     "config.yaml: admin.attempts.per_peer: must be an integer from 1 to 1000, not 0"),
    ("attempts overall a float", lambda c: c.update(admin=dict(attempts={"overall": 2.5})),
     "config.yaml: admin.attempts.overall: must be an integer from 1 to 100000"),
    ("attempt window .inf", lambda c: c.update(admin=dict(attempts={"window_s": float("inf")})),
     "config.yaml: admin.attempts.window_s: must be a finite number from 1 and at most 86400"),
    ("trusted peers a string", lambda c: c.update(admin=dict(
        attempts={"trusted_peers": "203.0.113.5"})),
     "config.yaml: admin.attempts.trusted_peers: must be a list of at most 100 IP addresses"),
    ("trusted peer an integer", lambda c: c.update(admin=dict(
        attempts={"trusted_peers": ["203.0.113.5", 5]})),
     "config.yaml: admin.attempts.trusted_peers[1]: must be an IP address or a network"),
    ("trusted network with host bits", lambda c: c.update(admin=dict(
        attempts={"trusted_peers": ["203.0.113.5/28"]})),
     "config.yaml: admin.attempts.trusted_peers[0]: must be an IP address or a network such "
     "as 203.0.113.0/28 (no host bits set), not '203.0.113.5/28'"),
    ("trusted peer a name", lambda c: c.update(admin=dict(
        attempts={"trusted_peers": ["controller.example"]})),
     "admin.attempts.trusted_peers[0]: must be an IP address or a network"),
    ("attempts unknown key", lambda c: c.update(admin=dict(attempts={"per_ip": 3})),
     "config.yaml: admin.attempts.per_ip: unknown key"),
]


@pytest.mark.parametrize(("change", "message"), [c[1:] for c in CONFIG_CASES],
                         ids=[c[0] for c in CONFIG_CASES])
def test_config_rule(tmp_path, change, message):
    assert message in refused(tmp_path, config=with_config(change))


def _gemma(models):
    return models["models"][0]


MODELS_CASES = [
    ("models missing", lambda m: m.pop("models"), "models.yaml: models: is required"),
    ("models a mapping", lambda m: m.update(models={}), "models.yaml: models: must be a list"),
    ("no model_name", lambda m: _gemma(m).pop("model_name"),
     "models.yaml: models[0].model_name: is required"),
    ("no litellm_params", lambda m: _gemma(m).pop("litellm_params"),
     "models[0].litellm_params: is required"),
    ("no litellm model", lambda m: _gemma(m)["litellm_params"].pop("model"),
     "models[0].litellm_params.model: is required"),
    ("self-hosted without recipe", lambda m: _gemma(m)["model_info"].pop("vllm"),
     "models[0].model_info.vllm: is required when self_hosted is true"),
    ("recipe without weights", lambda m: _gemma(m)["model_info"]["vllm"].pop("model"),
     "models[0].model_info.vllm.model: is required"),
    ("args with a number", lambda m: _gemma(m)["model_info"]["vllm"].update(args=["--x", 3]),
     "models[0].model_info.vllm.args: must be a list of strings or one string"),
    ("args unbalanced quote", lambda m: _gemma(m)["model_info"]["vllm"].update(args="--x 'a"),
     "models[0].model_info.vllm.args: cannot be split like a shell line"),
    ("utilisation above one",
     lambda m: _gemma(m)["model_info"]["vllm"].update(gpu_memory_utilization=1.5),
     "vllm.gpu_memory_utilization: must be a finite number above 0 and at most 1,"),
    ("max_model_len a float", lambda m: _gemma(m)["model_info"]["vllm"].update(max_model_len=1.5),
     "vllm.max_model_len: must be an integer from 1 to"),
    ("vram negative", lambda m: _gemma(m)["model_info"]["vllm"].update(vram_gb=-1),
     "vllm.vram_gb: must be a finite number above 0"),
    ("unknown recipe key", lambda m: _gemma(m)["model_info"]["vllm"].update(max_len=1),
     "models[0].model_info.vllm.max_len: unknown key"),
    ("self_hosted not a boolean", lambda m: _gemma(m)["model_info"].update(self_hosted="yes"),
     "models[0].model_info.self_hosted: must be true or false"),
    ("duplicate self-hosted name", lambda m: m["models"].append(_gemma(base_models())),
     "models.yaml: models[3].model_name: 'gemma' is already defined"),
    ("entry not a mapping", lambda m: m["models"].append("gemma"),
     "models.yaml: models[3]: must be a mapping, not a string"),
    ("unknown entry key", lambda m: _gemma(m).update(modle_info={}),
     "models[0].modle_info: unknown key"),
    ("routed model a typo", lambda m: _gemma(m)["litellm_params"].update(model="hosted_vllm/gema"),
     "models.yaml: models[0].litellm_params.model: 'hosted_vllm/gema' does not name the served "
     "model: a self-hosted model is routed as 'hosted_vllm/gemma'"),
    ("routed to the model name, not the served one",
     lambda m: m["models"][1]["litellm_params"].update(model="hosted_vllm/qwen"),
     "models[1].litellm_params.model: 'hosted_vllm/qwen' does not name the served model"),
    ("routed under another provider", lambda m: _gemma(m)["litellm_params"].update(model="gemma"),
     "models[0].litellm_params.model: 'gemma' does not name the served model"),
    ("gpus zero", lambda m: _gemma(m)["model_info"]["vllm"].update(gpus=0),
     "models.yaml: models[0].model_info.vllm.gpus: must be an integer from 1 to 16, not 0"),
    ("gpus above 16", lambda m: _gemma(m)["model_info"]["vllm"].update(gpus=17),
     "models[0].model_info.vllm.gpus: must be an integer from 1 to 16, not 17"),
    ("gpus a float", lambda m: _gemma(m)["model_info"]["vllm"].update(gpus=2.0),
     "models[0].model_info.vllm.gpus: must be an integer from 1 to 16"),
    ("parallel sizes without gpus",
     lambda m: _gemma(m)["model_info"]["vllm"].update(args=["--tensor-parallel-size", "2"]),
     "models.yaml: models[0].model_info.vllm.args: tensor x pipeline parallel size is 2 x 1 = "
     "2 cards, but gpus is 1: set gpus: 2, or change the sizes"),
    ("parallel sizes off gpus",
     lambda m: _gemma(m)["model_info"]["vllm"].update(gpus=4, args="-tp 2 -pp=1"),
     "models[0].model_info.vllm.args: tensor x pipeline parallel size is 2 x 1 = 2 cards, "
     "but gpus is 4"),
    ("parallel size abbreviated",
     lambda m: _gemma(m)["model_info"]["vllm"].update(gpus=2, args=["--tensor-parallel", "2"]),
     "models[0].model_info.vllm.args: '--tensor-parallel' abbreviates a parallel size option: "
     "write it in full"),
    ("parallel size set twice",
     lambda m: _gemma(m)["model_info"]["vllm"].update(gpus=2,
                                                      args="-tp 2 --tensor_parallel_size 2"),
     "models[0].model_info.vllm.args: the tensor parallel size is set twice"),
]


@pytest.mark.parametrize(("change", "message"), [c[1:] for c in MODELS_CASES],
                         ids=[c[0] for c in MODELS_CASES])
def test_models_rule(tmp_path, change, message):
    assert message in refused(tmp_path, models=with_models(change))


@pytest.mark.parametrize(("raw", "message"), [
    ("fleet: [", "config.yaml: line"),
    ("fleet:\n  hosts: {}\n  hosts: {}\n", "duplicate key 'hosts'"),
    ("- just\n- a list\n", "config.yaml: must be a mapping, not a list"),
    ("", "config.yaml: is required"),
])
def test_config_file_unreadable(tmp_path, raw, message):
    assert message in refused(tmp_path, raw_config=raw)


def test_missing_file_is_named(tmp_path):
    config = write_pair(tmp_path)[0]
    with pytest.raises(ConfigError, match="nowhere.yaml: cannot be read"):
        load_fleet(config, str(tmp_path / "nowhere.yaml"))


def test_every_problem_is_reported_at_once(tmp_path):
    config = base_config()
    _hosts(config)["203.0.113.10"] = [["nope", 8001], ["gemma", 9000]]
    config["fleet"]["rejected_passes"] = 0
    models = base_models()
    models["models"][1]["model_info"]["vllm"]["vram_gb"] = "big"
    problems = refused(tmp_path, config, models).splitlines()
    assert len(problems) >= 4


def test_no_secret_in_any_message(tmp_path):
    config = base_config()
    _hosts(config)["203.0.113.10"] = [["nope", 8001]]
    config["fleet"]["key"] = 12345  # wrong type, but the others are real secrets
    message = refused(tmp_path, config)
    for secret in (SALT, FLEET_KEY, SHARED_BEARER):
        assert secret not in message


def test_fourth_element_loads_with_a_warning(tmp_path):
    config = base_config()
    _hosts(config)["203.0.113.10"] = [["gemma", 8001, "gemma", 40123]]
    fleet = load(tmp_path, config)
    (server,) = fleet.assignment("203.0.113.10").servers
    assert server.seed_public_port == 40123
    assert "fleet.hosts.203.0.113.10[0]: the fourth element (public port) is deprecated" \
        in fleet.warnings[0]


def test_empty_fleet_needs_no_salt(tmp_path):
    config = {"fleet": {"key": FLEET_KEY, "hosts": {}}}
    fleet = load(tmp_path, config)
    assert dict(fleet.assignments) == {}


@pytest.mark.parametrize("key", [None, "", "CHANGE_ME", "CHANGE_ME_FLEET_KEY"])
def test_placeholder_fleet_key_loads_but_is_not_configured(tmp_path, key):
    config = base_config()
    config["fleet"]["key"] = key
    assert not load(tmp_path, config).fleet_key_configured


def test_keys_are_normalised(tmp_path):
    config = base_config()
    _hosts(config)[" ::ffff:192.0.2.5 "] = [["gemma", 8001]]
    fleet = load(tmp_path, config)
    assert fleet.assignment("192.0.2.5").box == "192.0.2.5"
    assert fleet.assignment("::ffff:192.0.2.5") is not None


def test_state_defaults_beside_the_config(tmp_path):
    fleet = load(tmp_path)
    assert fleet.settings.server.state == str(tmp_path / "llmao-state.sqlite3")


def test_load_knobs_and_costs_default_and_read(tmp_path):
    defaults = load_fleet(*write_pair(tmp_path)).settings.fleet
    assert (defaults.load.saturated_passes, defaults.load.saturated_kv_usage) == (3, 0.9)
    assert dict(defaults.cost_per_hour) == {}
    config = base_config()
    config["fleet"].update(saturated_passes=5, saturated_kv_usage=0.8,
                           cost_per_hour={"203.0.113.10": 0, "::ffff:198.51.100.7": 1.25})
    section = load_fleet(*write_pair(tmp_path, config)).settings.fleet
    assert (section.load.saturated_passes, section.load.saturated_kv_usage) == (5, 0.8)
    assert dict(section.cost_per_hour) == {"203.0.113.10": 0.0, "198.51.100.7": 1.25}


def test_rollout_defaults_to_not_following(tmp_path):
    rollout = load(tmp_path).settings.rollout
    assert (rollout.follow_s, rollout.max_unavailable, rollout.drain_s) == (None, 1, 30.0)
    assert not rollout.following and rollout.payload() is None


def test_rollout_reads_its_bounds_inclusive(tmp_path):
    config = with_config(lambda c: c.update(
        rollout={"follow_s": 1, "max_unavailable": 100, "drain_s": 0}))
    rollout = load(tmp_path, config).settings.rollout
    assert (rollout.follow_s, rollout.max_unavailable, rollout.drain_s) == (1, 100, 0)
    assert rollout.following and rollout.payload() == {"follow_s": 1.0, "drain_s": 0.0}


@pytest.mark.parametrize("name", ["follow", "llmao-follow"])
def test_a_server_named_as_the_follow_program_is_refused_while_boxes_follow(tmp_path, name):
    def named(config):
        _hosts(config)["198.51.100.7"] = [["gemma", 8001, name]]

    following = with_config(lambda c: (named(c), c.update(rollout={"follow_s": 30})))
    assert f"config.yaml: fleet.hosts.198.51.100.7[0]: the name {name!r} is the follow " \
        "program's (llmao-follow) while rollout.follow_s is set" in refused(tmp_path, following)
    # Without following, no box runs the follow program: the name is free.
    assert load(tmp_path, with_config(named)).assignment("198.51.100.7").servers[0].name == name


def test_attempt_limits_default_and_read(tmp_path):
    limits = load(tmp_path).settings.admin.attempts
    assert (limits.per_peer, limits.overall, limits.window_s, limits.trusted_peers) == \
        (5, 100, 900.0, ())
    config = with_config(lambda c: c.update(admin={"attempts": {
        "per_peer": 3, "overall": 50, "window_s": 60,
        "trusted_peers": ["203.0.113.5", "198.51.100.0/28", "2001:db8::/64"]}}))
    limits = load(tmp_path, config).settings.admin.attempts
    assert (limits.per_peer, limits.overall, limits.window_s) == (3, 50, 60)
    assert [limits.trusts(peer) for peer in (
        "203.0.113.5", "203.0.113.6", "198.51.100.15", "198.51.100.16", "::ffff:203.0.113.5",
        "2001:db8::7", "2001:db9::7", None, "not-an-address")] == \
        [True, False, True, False, True, True, False, False, False]


def test_the_files_digest_says_whether_two_loads_read_the_same_files(tmp_path):
    config, models = write_pair(tmp_path)
    first, again = load_fleet(config, models), load_fleet(config, models)
    assert len(first.files_digest) == 16 and first.files_digest == again.files_digest
    assert FLEET_KEY not in first.files_digest and SALT not in first.files_digest
    with open(models, "a", encoding="utf-8") as stream:
        stream.write("\n# a comment is a change of the file too\n")
    assert load_fleet(config, models).files_digest != first.files_digest


def test_a_file_saved_while_it_is_read_is_read_again(tmp_path, monkeypatch):
    config, models = write_pair(tmp_path)
    edited = base_config()
    edited["fleet"]["probe_timeout_s"] = 9
    saved_after = write_pair(tmp_path / "edited", edited)[0]
    real_load = fleet_module._load_fleet
    loads = []

    def saved_during_the_first_load(*args):
        loaded = real_load(*args)
        if not loads:
            shutil.copyfile(saved_after, config)  # the operator saves while it is parsed
        loads.append(loaded)
        return loaded

    monkeypatch.setattr(fleet_module, "_load_fleet", saved_during_the_first_load)
    fleet = load_fleet(config, models)
    assert len(loads) == 2 and fleet.settings.fleet.lifecycle.probe_timeout_s == 9
    assert fleet.files_digest == load_fleet(config, models).files_digest


def test_files_that_keep_changing_while_they_are_read_are_refused_by_name(tmp_path,
                                                                          monkeypatch):
    config, models = write_pair(tmp_path)
    real_load = fleet_module._load_fleet

    def saved_during_every_load(*args):
        loaded = real_load(*args)
        with open(config, "a", encoding="utf-8") as stream:
            stream.write("# saved again\n")
        return loaded

    monkeypatch.setattr(fleet_module, "_load_fleet", saved_during_every_load)
    with pytest.raises(ConfigError) as caught:
        load_fleet(config, models)
    assert str(caught.value).startswith(f"{config}: it or {models} changed each of the 3 times")
