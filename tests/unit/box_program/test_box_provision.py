"""The provider boot scripts, run with bash against a stub installer and fake Supervisor tools."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import (
    FLEET_KEY,
    RUNPOD_DOCKERFILE,
    RUNPOD_PROVISION,
    VAST_PROVISION,
    FakeLlmao,
    write_script,
)

STUB_INSTALLER = """\
import json, os, sys
with open(os.environ["STUB_RECORD"], "a") as out:
    out.write(json.dumps({"argv": sys.argv[1:], "host": os.environ.get("LLMAO_HOST"),
                          "key_passed": os.environ.get("FLEET_KEY") == os.environ["EXPECT_KEY"]})
              + "\\n")
sys.exit(int(os.environ.get("STUB_EXIT", "0")))
"""
REAL_TOOLS = ("dirname", "mktemp", "sleep", "touch", "chmod")
BASH = shutil.which("bash") or "/bin/bash"


class Provision:
    """A temp folder with a hermetic PATH: python3, a few coreutils and our fakes only."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        (self.bin / "python3").symlink_to(sys.executable)
        for tool in REAL_TOOLS:
            (self.bin / tool).symlink_to(shutil.which(tool))
        self.calls = root / "calls.log"
        self.record = root / "installer.jsonl"
        self.installer = root / "stub_install_set.py"
        self.installer.write_text(STUB_INSTALLER)

    def fake(self, name: str, body: str = "") -> None:
        write_script(self.bin / name, f'echo "{name} $*" >> "{self.calls}"\n{body}')

    def supervisor_up(self) -> None:
        self.fake("supervisord")
        self.fake("supervisorctl")

    def env(self, **values: str) -> dict[str, str]:
        return {"PATH": str(self.bin), "STUB_RECORD": str(self.record), "EXPECT_KEY": FLEET_KEY,
                "LLMAO_INSTALL_SET": str(self.installer), **values}

    def run(self, script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([BASH, str(script), *args], env=env, capture_output=True,
                              text=True, timeout=60, cwd=self.root, check=False)

    def installer_runs(self) -> list[dict]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def tool_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def prov(tmp_path: Path) -> Provision:
    return Provision(tmp_path)


VAST_ENV = {"FLEET_KEY": FLEET_KEY, "LLMAO_URL": "https://llmao.example",
            "PUBLIC_IPADDR": "198.51.100.23"}
RUNPOD_ENV = {"FLEET_KEY": FLEET_KEY, "LLMAO_URL": "https://llmao.example",
              "RUNPOD_POD_ID": "abc123xyz"}


@pytest.mark.parametrize("script, required", [
    (VAST_PROVISION, VAST_ENV), (RUNPOD_PROVISION, RUNPOD_ENV)])
@pytest.mark.parametrize("missing", range(3))
def test_a_missing_variable_stops_the_script_naming_it(prov, script, required, missing):
    name = list(required)[missing]
    env = prov.env(**{key: value for key, value in required.items() if key != name})
    done = prov.run(script, env)
    assert done.returncode == 2
    assert f"{name} is not set" in done.stderr
    assert prov.installer_runs() == [] and prov.tool_calls() == []


@pytest.mark.parametrize("script, required", [
    (VAST_PROVISION, VAST_ENV), (RUNPOD_PROVISION, RUNPOD_ENV)])
def test_an_empty_variable_counts_as_missing(prov, script, required):
    done = prov.run(script, prov.env(**{**required, "LLMAO_URL": ""}))
    assert done.returncode == 2 and "LLMAO_URL is not set" in done.stderr


def assert_ran_the_installer_once(prov, done, argv: list[str], host: str,
                                  tools: list[str]) -> None:
    """The script succeeded, ran the installer once with ``argv`` for ``host`` (the key in its
    environment), called ``tools`` in that order, and printed no key."""
    assert done.returncode == 0, done.stderr
    assert prov.installer_runs() == [{"argv": argv, "host": host, "key_passed": True}]
    assert prov.tool_calls() == tools
    assert FLEET_KEY not in done.stdout + done.stderr


# --------------------------------------------------------------------------- Vast


def test_vast_with_supervisord_running_only_runs_the_installer(prov):
    prov.supervisor_up()
    done = prov.run(VAST_PROVISION, prov.env(**VAST_ENV), "--json")
    assert_ran_the_installer_once(prov, done, ["--json"], "198.51.100.23", ["supervisorctl pid"])


def test_vast_sends_the_instance_id_when_the_template_asks(prov):
    """Two instances can share one public address: the id names exactly one of them."""
    prov.supervisor_up()
    env = {**VAST_ENV, "LLMAO_VAST_BOX_NAME": "instance_id", "CONTAINER_ID": "4242"}
    done = prov.run(VAST_PROVISION, prov.env(**env))
    assert done.returncode == 0, done.stderr
    assert [run["host"] for run in prov.installer_runs()] == ["4242"]
    assert "applying the assignment of 4242" in done.stderr


def test_vast_sends_the_address_by_default_and_when_asked(prov):
    prov.supervisor_up()
    for env in (VAST_ENV, {**VAST_ENV, "LLMAO_VAST_BOX_NAME": "address",
                           "CONTAINER_ID": "4242"}):
        assert prov.run(VAST_PROVISION, prov.env(**env)).returncode == 0
    assert [run["host"] for run in prov.installer_runs()] == ["198.51.100.23"] * 2


@pytest.mark.parametrize("choice, says", [
    ("instance_id", "CONTAINER_ID is not set"),
    ("hostname", "LLMAO_VAST_BOX_NAME must be address or instance_id, not 'hostname'"),
])
def test_vast_box_name_choice_without_its_variable_stops(prov, choice, says):
    prov.supervisor_up()
    done = prov.run(VAST_PROVISION, prov.env(**VAST_ENV, LLMAO_VAST_BOX_NAME=choice))
    assert done.returncode == 2 and says in done.stderr
    assert prov.installer_runs() == []


def test_vast_passes_the_installer_exit_status_on(prov):
    prov.supervisor_up()
    done = prov.run(VAST_PROVISION, prov.env(**VAST_ENV, STUB_EXIT="3"))
    assert done.returncode == 3


def test_vast_starts_supervisord_when_it_is_not_answering(prov):
    flag = prov.root / "supervisord.up"
    prov.fake("supervisord", f'touch "{flag}"\n')
    prov.fake("supervisorctl", f'test -e "{flag}"\n')
    done = prov.run(VAST_PROVISION, prov.env(**VAST_ENV))
    assert done.returncode == 0, done.stderr
    assert prov.tool_calls() == ["supervisorctl pid",
                                 "supervisord -c /etc/supervisor/supervisord.conf",
                                 "supervisorctl pid"]
    assert len(prov.installer_runs()) == 1


def test_vast_installs_supervisor_when_it_is_missing(prov):
    prov.fake("apt-get", f'[ "$1" = install ] && printf "#!/bin/sh\\n" > "{prov.bin}/supervisord"'
                         f' && chmod +x "{prov.bin}/supervisord"\nexit 0\n')
    prov.fake("supervisorctl")
    done = prov.run(VAST_PROVISION, prov.env(**VAST_ENV))
    assert done.returncode == 0, done.stderr
    assert prov.tool_calls()[:2] == [
        "apt-get update -qq",
        "apt-get install -y -qq --no-install-recommends supervisor"]
    assert len(prov.installer_runs()) == 1


def test_vast_uses_the_installer_beside_it(prov):
    prov.supervisor_up()
    folder = prov.root / "image"
    folder.mkdir()
    shutil.copy(VAST_PROVISION, folder / "provision.sh")
    shutil.copy(prov.installer, folder / "install_set.py")
    env = prov.env(**VAST_ENV)
    del env["LLMAO_INSTALL_SET"]
    done = prov.run(folder / "provision.sh", env)
    assert done.returncode == 0, done.stderr
    assert len(prov.installer_runs()) == 1


def test_vast_downloads_the_installer_from_install_set_url(prov, local_ca):
    prov.supervisor_up()
    env = prov.env(**VAST_ENV, SSL_CERT_FILE=str(local_ca.ca_file))
    del env["LLMAO_INSTALL_SET"]
    with FakeLlmao(tls=local_ca.server_context()).serve() as server:
        server.script("/files/install_set.py", (200, prov.installer.read_bytes()))
        done = prov.run(VAST_PROVISION, {**env, "INSTALL_SET_URL":
                                         f"{server.url}/files/install_set.py"})
    assert done.returncode == 0, done.stderr
    assert "downloading install_set.py" in done.stderr
    assert len(prov.installer_runs()) == 1


@pytest.mark.parametrize("url, says", [
    (None, "INSTALL_SET_URL is not set"),
    ("http://127.0.0.1:9/install_set.py", "INSTALL_SET_URL must be an https:// URL"),
])
def test_vast_without_an_installer_to_run_stops(prov, url, says):
    prov.supervisor_up()
    env = prov.env(**VAST_ENV)
    del env["LLMAO_INSTALL_SET"]
    if url:
        env["INSTALL_SET_URL"] = url
    done = prov.run(VAST_PROVISION, env)
    assert done.returncode == 2 and says in done.stderr
    assert prov.installer_runs() == []


# --------------------------------------------------------------------------- RunPod


def test_runpod_writes_without_handover_then_becomes_supervisord(prov):
    prov.fake("supervisord", "exit 0\n")
    done = prov.run(RUNPOD_PROVISION, prov.env(**RUNPOD_ENV))
    assert_ran_the_installer_once(prov, done, ["--no-handover"], "abc123xyz",
                                  ["supervisord -n -c /etc/supervisor/supervisord.conf"])


def test_runpod_stops_when_the_installer_fails(prov):
    prov.fake("supervisord")
    done = prov.run(RUNPOD_PROVISION, prov.env(**RUNPOD_ENV, STUB_EXIT="2"))
    assert done.returncode == 2
    assert prov.tool_calls() == [], "supervisord must not start without programs"


# --------------------------------------------------------------------------- static checks


def test_the_dockerfile_supervisord_conf_is_read_by_supervisor(tmp_path):
    options = pytest.importorskip("supervisor.options")
    text = RUNPOD_DOCKERFILE.read_text()
    block = text[text.index("printf '%s\\n'"):text.index("> /etc/supervisor/supervisord.conf")]
    lines = [part.split("'")[1] for part in block.splitlines()[1:] if "'" in part]
    conf = "\n".join(lines).replace("/etc/supervisor/conf.d", str(tmp_path))
    parser = options.UnhosedConfigParser()
    parser.read_string(conf)
    assert parser.get("include", "files") == f"{tmp_path}/*.conf"
    assert parser.get("supervisorctl", "serverurl") == "unix:///run/supervisor.sock"
    assert parser.get("unix_http_server", "file") == "/run/supervisor.sock"
    assert "supervisor.rpcinterface:make_main_rpcinterface" in parser.get(
        "rpcinterface:supervisor", "supervisor.rpcinterface_factory")


def test_the_dockerfile_ships_the_program_and_the_entrypoint():
    text = RUNPOD_DOCKERFILE.read_text()
    assert "COPY --chmod=0755 install_set.py provision/runpod/provision.sh /opt/llmao/" in text
    assert 'ENTRYPOINT ["/opt/llmao/provision.sh"]' in text
    assert any(line.startswith("FROM vllm/vllm-openai:v") for line in text.splitlines())


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("script", [VAST_PROVISION, RUNPOD_PROVISION])
def test_the_scripts_are_shellcheck_clean(script):
    done = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("script", [VAST_PROVISION, RUNPOD_PROVISION])
def test_the_scripts_are_executable_and_strict(script):
    assert os.access(script, os.X_OK)
    assert "set -euo pipefail" in script.read_text()
