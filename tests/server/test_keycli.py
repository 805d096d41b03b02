"""``llmao-vllm-api-key``: the shared vectors, the legacy pair from a config, clear refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmao_server.keycli import main
from tests.server.fleet_pair import SALT, SHARED_BEARER, write_pair

VECTORS = json.loads((Path(__file__).parents[2] / "collections" / "ansible_collections" / "llmao"
                      / "fleet" / "tests" / "unit" / "plugins" / "module_utils" / "data"
                      / "bearer_vectors.json").read_text())["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: f"{v['host']}:{v['listen_port']}")
def test_prints_the_vector(capsys, vector):
    assert main(["--host", vector["host"], "--port", str(vector["listen_port"]),
                 "--salt", vector["salt"]]) == 0
    assert capsys.readouterr().out.strip() == vector["api_key"]


def test_reads_the_salt_and_legacy_pairs_from_config(tmp_path, capsys):
    config, _ = write_pair(tmp_path)
    assert main(["--host", "198.51.100.7", "--port", "8000", "--config", config]) == 0
    assert main(["--host", "203.0.113.10", "--port", "8001", "--config", config]) == 0
    legacy, derived = capsys.readouterr().out.split()
    assert legacy == SHARED_BEARER and derived.startswith("sk-vllm-")


@pytest.mark.parametrize(("args", "message"), [
    (["--host", "", "--port", "8001", "--salt", SALT], "host is empty"),
    (["--host", "203.0.113.10", "--port", "0", "--salt", SALT], "positive int"),
    (["--host", "203.0.113.10", "--port", "8001", "--salt", "CHANGE_ME"], "CHANGE_ME"),
])
def test_refusals_exit_2_without_the_salt(capsys, args, message):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and SALT not in err


def test_a_bad_config_names_file_and_key(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("fleet:\n  hosts: []\n")
    assert main(["--host", "h", "--port", "8001", "--config", str(config)]) == 2
    assert f"{config}: fleet.hosts: must be a mapping" in capsys.readouterr().err
