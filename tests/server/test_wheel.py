"""The built wheel is the whole server: installed alone into a fresh virtual environment, its
``llmao-server`` starts and serves a box's config.

Offline: the wheel is built without build isolation (hatchling comes with the test tools) and
installed with ``--no-index``. The fresh environment sees this one's packages for the
dependencies (a ``.pth`` line naming their folder, as ``--system-site-packages`` would), but
not the checkout: the editable install's own ``.pth`` in that folder is not read from there,
and the server runs from a folder outside the repository, so every line of llmao it runs
comes from the wheel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import pytest

from tests.llmao_process import start_llmao_server
from tests.server.fleet_pair import KNOWN, box_headers, write_pair

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "llmao_fleet"
PIP_TIMEOUT_S = 300


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=PIP_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the fresh environment's bin folder, the environment to run it in)."""
    work = tmp_path_factory.mktemp("wheel")
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
         "--wheel-dir", str(work / "dist"), str(ROOT)], work, env)
    (wheel,) = (work / "dist").glob(f"{DISTRIBUTION}-*.whl")
    fresh = work / "venv"
    run([sys._base_executable, "-m", "venv", "--without-pip", str(fresh)], work, env)
    purelib = Path(run([str(fresh / "bin" / "python"), "-c",
                        "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work, env)
                   .strip())
    (purelib / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([sys.executable, "-m", "pip", "--python", str(fresh / "bin" / "python"), "install",
         "--no-index", "--no-cache-dir", str(wheel)], work, env)
    return fresh / "bin", env


@pytest.mark.slow
def test_the_wheel_carries_the_core_the_server_imports(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_folder, env = installed
    where = run([str(bin_folder / "python"), "-c",
                 "import llmao_server.cli, ansible_collections.llmao.fleet.plugins.module_utils"
                 ".fleet as core; print(llmao_server.cli.__file__); print(core.__file__)"],
                tmp_path, env).split()
    prefix = str(bin_folder.parent)
    assert all(path.startswith(prefix) for path in where), where
    version = run([str(bin_folder / "llmao-server"), "--version"], tmp_path, env)
    assert version.split() == ["llmao-server", run(
        [sys.executable, "-c", "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))"
         "['project']['version'])"], ROOT, env).strip()]


@pytest.mark.slow
def test_the_installed_llmao_server_serves_a_box_its_config(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_folder, env = installed
    config, models = write_pair(tmp_path / "fleet")
    server = start_llmao_server(Path(config), Path(models), tmp_path, workers=1,
                                server=bin_folder / "llmao-server", env=env)
    with server:
        request = urllib.request.Request(f"{server.url}/vllm/config", headers=box_headers())
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200
            assignment = json.loads(answer.read())
    assert [entry["port"] for entry in assignment["servers"]] == [8001, 8002]
    assert f"host='{KNOWN}'" in server.log()
