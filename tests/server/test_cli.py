"""``llmao-server`` refuses to start, with a message and no traceback, before it binds.

These call ``main`` in-process: every refusal returns before gunicorn starts.
Starting for real is ``tests/integration/test_server_workers.py``.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest

from llmao_server import cli
from llmao_server.app import SETTINGS_FROM_ENVIRONMENT
from llmao_server.store import Approval, SqliteStore
from tests.server.fleet_pair import FLEET_KEY, SALT, config, write_pair


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.err


@pytest.fixture
def pair(tmp_path: Path) -> tuple[str, str]:
    return write_pair(tmp_path / "fleet")


def test_a_bad_config_is_refused_with_the_core_message(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    hosts = {"203.0.113.10": [["gemma", 8001], ["nope", 8001]]}
    config_path, models_path = write_pair(tmp_path, config(hosts=hosts))
    status, err = run(capsys, "--config", config_path, "--models", models_path,
                      "--bind", "127.0.0.1:0")
    assert status == 2
    assert f"{config_path}: fleet.hosts.203.0.113.10[1]: duplicate port 8001" in err
    assert "'nope' is not in models.yaml" in err
    assert "Traceback" not in err
    assert SALT not in err and FLEET_KEY not in err


def test_a_missing_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, err = run(capsys, "--config", str(tmp_path / "none.yaml"), "--models",
                      str(tmp_path / "none.yaml"), "--bind", "127.0.0.1:0")
    assert status == 2
    assert "cannot be read" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("bind", ["0.0.0.0:8080", "[::]:8080", "192.0.2.1:8080",
                                  "llm.example.org:443"])
def test_plain_http_off_loopback_is_refused(pair: tuple[str, str], bind: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    status, err = run(capsys, "--config", pair[0], "--models", pair[1], "--bind", bind)
    assert status == 2
    assert "--certfile and --keyfile" in err


@pytest.mark.parametrize(("extra", "message"), [
    (["--certfile", "cert.pem"], "pass --certfile and --keyfile together"),
    (["--keyfile", "key.pem"], "pass --certfile and --keyfile together"),
    (["--certfile", "missing.pem", "--keyfile", "missing.pem"], "cannot be read"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--state", "postgresql://u:pw-in-url@127.0.0.1:1/db"],
     "cannot open the state store postgresql://u@127.0.0.1:1/db"),
])
def test_other_refusals(pair: tuple[str, str], extra: list[str], message: str,
                        capsys: pytest.CaptureFixture[str]) -> None:
    status, err = run(capsys, "--config", pair[0], "--models", pair[1],
                      "--bind", "127.0.0.1:0", *extra)
    assert status == 2
    assert message in err
    assert "pw-in-url" not in err


@pytest.mark.parametrize(("bind", "host", "loopback"), [
    ("127.0.0.1:8080", "127.0.0.1", True),
    ("127.8.9.1:80", "127.8.9.1", True),
    ("[::1]:8080", "::1", True),
    ("localhost:8080", "localhost", True),
    ("0.0.0.0:8080", "0.0.0.0", False),
    ("[::]:8080", "::", False),
    ("10.0.0.1:8080", "10.0.0.1", False),
])
def test_bind_addresses(bind: str, host: str, loopback: bool) -> None:
    assert cli.bind_host(bind) == host
    assert cli.is_loopback(host) is loopback


@pytest.mark.parametrize("bind", ["8080", ":8080", "127.0.0.1:", "127.0.0.1:http", "unix:/x"])
def test_a_bind_that_is_not_host_port_is_refused(bind: str) -> None:
    with pytest.raises(cli.Refused, match="expected HOST:PORT"):
        cli.bind_host(bind)


def test_the_core_warnings_are_printed(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    hosts = {"203.0.113.10": [["gemma", 8001, "gemma", 40001]]}
    config_path, models_path = write_pair(tmp_path, config(hosts=hosts, key="CHANGE_ME"))
    args = cli.parse_args(["--config", config_path, "--models", models_path,
                           "--bind", "127.0.0.1:0"])
    cli.load_checked_fleet(args)
    err = capsys.readouterr().err
    assert "fleet.hosts.203.0.113.10[0]: the fourth element (public port) is deprecated" in err
    assert "fleet.key is missing, empty or CHANGE_ME" in err


def test_preparing_the_state_forgets_every_approval(tmp_path: Path) -> None:
    path = str(tmp_path / "state.sqlite3")
    SqliteStore(path).approve(Approval("192.0.2.50", ("gemma",), "admin", 1.0))
    cli.prepare_state(path)
    assert SqliteStore(path).approvals() == []


def test_version_names_the_installed_package(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"llmao-server {version('llmao-fleet')}"


def test_the_app_factorys_environment_is_the_options_default(
        monkeypatch: pytest.MonkeyPatch, pair: tuple[str, str]) -> None:
    for key, value in zip(SETTINGS_FROM_ENVIRONMENT, (*pair, ":memory:"), strict=True):
        monkeypatch.setenv(key, value)
    args = cli.parse_args(["--bind", "127.0.0.1:0"])
    assert (args.config, args.models, args.state) == (*pair, ":memory:")
    assert cli.parse_args(["--bind", "127.0.0.1:0", "--config", "other.yaml"]).config == \
        "other.yaml", "an option given wins over the environment"


def test_without_files_nor_environment_the_cli_says_what_it_needs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for key in SETTINGS_FROM_ENVIRONMENT:
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(SystemExit) as exited:
        cli.main(["--bind", "127.0.0.1:0"])
    assert exited.value.code == 2
    assert "--config and --models (or LLMAO_CONFIG and LLMAO_MODELS)" in capsys.readouterr().err


def test_an_unknown_log_format_is_refused(pair: tuple[str, str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--config", pair[0], "--models", pair[1], "--bind", "127.0.0.1:0",
                  "--log-format", "xml"])
    assert exited.value.code == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err
