# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module llmao.fleet.vllm_api_key run in-process, its JSON answer read as Ansible would."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.bearer import derive_vllm_api_key
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.modules import vllm_api_key
from ansible_collections.llmao.fleet.tests.unit.compat import patch_module_args


def run_module(capsys, **args: Any) -> tuple[dict[str, Any], str]:
    """Run the module with ``args``; its parsed result and the raw text it printed."""
    with patch_module_args(args), pytest.raises(SystemExit):
        vllm_api_key.main()
    printed = capsys.readouterr().out
    return json.loads(printed), printed


def module_result(capsys, **args: Any) -> dict[str, Any]:
    """Run the module with ``args``; its parsed result."""
    return run_module(capsys, **args)[0]


def served_keys(config: str, models: str, box: str) -> dict[int, str]:
    """The bearers the config endpoint hands ``box``: read from the payload's very bytes."""
    body = json.loads(load_fleet(config, models).assignment(box).body)
    return {server["port"]: server["api_key"] for server in body["servers"]}


@pytest.fixture
def files(write_fleet) -> dict[str, str]:
    config, models = write_fleet()
    return {"config": config, "models": models}


def test_one_port_is_the_key_the_box_is_served(capsys, files) -> None:
    result = module_result(capsys, host="203.0.113.10", port=8002, **files)
    assert result["api_key"] == served_keys(files["config"], files["models"],
                                            "203.0.113.10")[8002]
    assert result["changed"] is False
    assert result["host"] == "203.0.113.10"
    assert "api_keys" not in result


def test_without_a_port_every_row_of_the_host(capsys, files) -> None:
    result = module_result(capsys, host="203.0.113.11", **files)
    served = served_keys(files["config"], files["models"], "203.0.113.11")
    assert result["api_keys"] == {str(port): key for port, key in served.items()}
    assert len(set(result["api_keys"].values())) == 2
    assert "api_key" not in result


def test_host_is_normalised_like_the_config_server_does(capsys, files) -> None:
    result = module_result(capsys, host="  ::ffff:203.0.113.10 ", port=8001, **files)
    assert result["host"] == "203.0.113.10"
    assert result["api_key"] == served_keys(files["config"], files["models"],
                                            "203.0.113.10")[8001]


def test_legacy_pair_gets_the_shared_bearer(capsys, files, secrets) -> None:
    result = module_result(capsys, host="198.51.100.7", port=8000, **files)
    assert result["api_key"] == secrets["selfhost"]


def test_salt_alone_derives_the_same_key(capsys, files, secrets) -> None:
    from_salt = module_result(capsys, host="203.0.113.11", port=8002, salt=secrets["salt"])
    from_files = module_result(capsys, host="203.0.113.11", port=8002, **files)
    assert from_salt["api_key"] == from_files["api_key"]
    assert from_salt["api_key"] == derive_vllm_api_key(secrets["salt"], "203.0.113.11", 8002)


def test_check_mode_gives_the_same_answer_and_changes_nothing(capsys, files) -> None:
    normal = module_result(capsys, host="203.0.113.10", **files)
    checked = module_result(capsys, host="203.0.113.10", _ansible_check_mode=True, **files)
    assert checked["api_keys"] == normal["api_keys"]
    assert checked["changed"] is False


def test_the_only_secret_in_a_result_is_the_key_asked_for(capsys, files, secrets) -> None:
    result, printed = run_module(capsys, host="203.0.113.10", port=8001, **files)
    others = set(served_keys(files["config"], files["models"], "203.0.113.10").values())
    others.discard(result["api_key"])
    assert printed.count(result["api_key"]) == 1
    assert not any(secret in printed for secret in {*secrets.values(), *others})


def test_the_salt_never_comes_back(capsys, secrets) -> None:
    result, printed = run_module(capsys, host="203.0.113.10", port=8001, salt=secrets["salt"])
    assert result["api_key"].startswith("sk-vllm-")
    assert secrets["salt"] not in printed


def test_missing_salt_fails_with_the_core_message(capsys, write_fleet, base_config,
                                                  secrets) -> None:
    del base_config["fleet"]["vllm_api_salt"]
    config, models = write_fleet(base_config)
    result, printed = run_module(capsys, host="203.0.113.10", port=8001, config=config,
                                 models=models)
    assert result["failed"] is True
    assert f"{config}: fleet.vllm_api_salt: missing or CHANGE_ME" in result["msg"]
    assert "sk-vllm-" not in printed
    assert not any(secret in printed for secret in secrets.values())


@pytest.mark.parametrize("salt", ["CHANGE_ME", "CHANGE_ME_please", ""])
def test_placeholder_salt_fails_without_echoing_it(capsys, salt: str) -> None:
    result, printed = run_module(capsys, host="203.0.113.10", port=8001, salt=salt)
    assert result["failed"] is True
    # Ansible masks the no_log salt wherever it appears, so the tail may read ********.
    assert result["msg"].startswith("cannot derive a bearer: salt missing or ")
    assert "sk-vllm-" not in printed


@pytest.mark.parametrize(("args", "message"), [
    ({}, "one of the following is required: config, salt"),
    ({"salt": "some-salt"}, "missing parameter(s) required by 'salt': port"),
    ({"config": "c.yaml"}, "parameters are required together: config, models"),
    ({"salt": "some-salt", "port": 8001, "config": "c.yaml", "models": "m.yaml"},
     "parameters are mutually exclusive: salt|config"),
])
def test_option_combinations_are_checked(capsys, args: dict[str, Any], message: str) -> None:
    result = module_result(capsys, host="203.0.113.10", **args)
    assert result["failed"] is True
    assert message in result["msg"]


def test_unknown_host_fails(capsys, files) -> None:
    result = module_result(capsys, host="192.0.2.1", port=8001, **files)
    assert result["failed"] is True
    assert result["msg"] == f"192.0.2.1 is not a fleet.hosts key of {files['config']}"


def test_port_without_a_row_fails_and_lists_the_rows(capsys, files) -> None:
    result, printed = run_module(capsys, host="203.0.113.10", port=8003, **files)
    assert result["failed"] is True
    assert result["msg"].endswith("(its ports: 8001, 8002)")
    assert "sk-vllm-" not in printed


def test_empty_host_fails(capsys) -> None:
    result = module_result(capsys, host="  ", port=8001, salt="some-salt")
    assert result == {**result, "failed": True, "msg": "host is empty"}


def test_bad_files_fail_with_every_problem(capsys, write_fleet, base_config) -> None:
    base_config["fleet"]["hosts"]["203.0.113.10"].append(["nope", 8003])
    base_config["fleet"]["hosts"]["203.0.113.11"][1][1] = 8001
    config, models = write_fleet(base_config)
    result = module_result(capsys, host="203.0.113.10", port=8001, config=config,
                           models=models)
    assert result["failed"] is True
    assert result["problems"] == [
        f"{config}: fleet.hosts.203.0.113.11[1]: duplicate port 8001",
        f"{config}: fleet.hosts.203.0.113.10[2]: model 'nope' is not in models.yaml",
    ]
