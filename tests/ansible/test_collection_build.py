"""The collection as Galaxy would ship it: built, installed where nothing else is, documented,
and run.

``ansible-galaxy collection build`` makes the tarball (from a copy of the collection holding
the caches and virtual environments a working tree collects, which the build leaves out),
``ansible-galaxy collection install`` puts it in an empty collections path, and
``ansible-doc`` reads every plugin and the role from there, and ``ansible-playbook
llmao.fleet.reconcile`` runs from there, from a folder with an empty ``ansible.cfg`` and with
Python's path not scanned for collections (the editable install puts this checkout's
collections on it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rig.boxes import free_port
from rig.fleet_files import strong_secret
from rig.litellm_process import start_litellm
from rig.local_fleet import (
    MODEL,
    LocalFleet,
    loopback_boxes,
    one_model_hosts,
    running_stubs,
)
from tests.llmao_process import start_llmao_server

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "collections" / "ansible_collections" / "llmao" / "fleet"
BIN = Path(sys.executable).parent
# plugins/<folder> → ansible-doc's plugin type
DOCUMENTED = {"modules": "module", "inventory": "inventory", "lookup": "lookup"}
# What a working tree of the collection collects and the tarball must leave out.
LITTER = ("__pycache__/galaxy.cpython-311.pyc", "plugins/module_utils/__pycache__/fleet.pyc",
          "roles/vllm_box/files/__pycache__/install_set.cpython-311.pyc",
          ".pytest_cache/README.md", "tests/unit/.pytest_cache/v/cache/lastfailed",
          ".venv/pyvenv.cfg", ".venv-2.19/bin/python", "plugins/.venv/pyvenv.cfg",
          ".mypy_cache/CACHEDIR.TAG", "plugins/.ruff_cache/CACHEDIR.TAG",
          "tests/output/junit/sanity.xml", "llmao.egg-info/PKG-INFO")
# The external collections the project installs (scripts/bundled_collections.py): this
# interpreter's site-packages, which holds ansible_collections/<namespace>/ of those alone.
BUNDLED = Path(sysconfig.get_paths()["purelib"])


def run(folder: Path, *command: str, bundled: bool = False) -> subprocess.CompletedProcess[str]:
    """``command`` with the installed collection (and, if ``bundled``, the bundled ones) as the
    only collections Ansible knows."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    config = folder / "ansible.cfg"  # Ansible's defaults, not the checkout's settings
    config.write_text("[defaults]\n", encoding="utf-8")
    (folder / "home").mkdir(exist_ok=True)  # a home of its own: no user's ~/.ansible either
    paths = [folder / "installed", *([BUNDLED] if bundled else [])]
    env.update(ANSIBLE_CONFIG=str(config),
               ANSIBLE_COLLECTIONS_PATH=os.pathsep.join(map(str, paths)),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(folder / "tmp"), HOME=str(folder / "home"))
    return subprocess.run([str(BIN / command[0]), *command[1:]], cwd=folder, env=env, text=True,
                          capture_output=True, timeout=300, check=False)


def littered_copy(folder: Path) -> Path:
    """A copy of the collection with a file at every path of LITTER."""
    copy = folder / "source" / "ansible_collections" / "llmao" / "fleet"
    shutil.copytree(COLLECTION, copy, ignore=shutil.ignore_patterns(
        "output", "__pycache__", ".pytest_cache", "*.tar.gz"))
    for name in LITTER:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text("litter\n", encoding="utf-8")
    return copy


@pytest.fixture(scope="module")
def galaxy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test's folder: the built tarball, and the collection installed under installed/."""
    folder = tmp_path_factory.mktemp("galaxy")
    built = run(folder, "ansible-galaxy", "collection", "build", str(littered_copy(folder)),
                "--output-path", str(folder))
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    tarball = next(folder.glob("llmao-fleet-*.tar.gz"))
    done = run(folder, "ansible-galaxy", "collection", "install", "--offline", str(tarball),
               "-p", str(folder / "installed"))
    assert done.returncode == 0, done.stderr
    return folder


def installed(folder: Path) -> Path:
    return folder / "installed" / "ansible_collections" / "llmao" / "fleet"


def tarball_members(folder: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(next(folder.glob("llmao-fleet-*.tar.gz"))) as archive:
        return {member.name: member for member in archive.getmembers()}


def test_the_tarball_carries_licence_changelog_and_metadata(galaxy: Path) -> None:
    names = set(tarball_members(galaxy))
    assert {"COPYING", "CHANGELOG.rst", "changelogs/changelog.yaml", "meta/runtime.yml",
            "README.md", "MANIFEST.json"} <= names
    assert not [name for name in names
                if name.startswith("tests/output") or "__pycache__" in name
                or name.endswith((".plugin-cache.yaml", ".tar.gz"))]


def test_the_tarball_carries_the_role_the_box_program_and_the_playbooks(galaxy: Path) -> None:
    members = tarball_members(galaxy)
    role = COLLECTION / "roles" / "vllm_box"
    shipped_role = {path.relative_to(COLLECTION).as_posix() for path in role.rglob("*")
                    if path.is_file() and "__pycache__" not in path.parts}
    assert "roles/vllm_box/files/install_set.py" in shipped_role
    assert "roles/vllm_box/meta/argument_specs.yml" in shipped_role
    assert shipped_role | {"playbooks/reconcile.yml", "playbooks/provision.yml"} <= set(members)
    assert members["roles/vllm_box/files/install_set.py"].mode & 0o111  # a program, runnable


def test_the_tarball_leaves_out_the_unit_tests_caches_and_virtualenvs(galaxy: Path) -> None:
    """The unit tests import the repository's rig/ and tests/: they run from a checkout."""
    names = set(tarball_members(galaxy))
    assert not [name for name in names if name.startswith("tests/unit")]
    litter_folders = {".pytest_cache", ".venv", ".venv-2.19", ".mypy_cache", ".ruff_cache",
                      "__pycache__", "output", "llmao.egg-info"}
    assert not [name for name in names if litter_folders & set(name.split("/"))]
    assert not [name for name in names if name.endswith(".pyc")]


def shipped_plugins(collection: Path) -> dict[str, list[str]]:
    """ansible-doc type → the FQCNs of the plugins the installed collection holds."""
    found: dict[str, list[str]] = {}
    for folder, kind in DOCUMENTED.items():
        names = sorted(p.stem for p in (collection / "plugins" / folder).glob("*.py")
                       if p.stem != "__init__")
        found[kind] = [f"llmao.fleet.{name}" for name in names]
    return found


def test_every_installed_plugin_is_documented(galaxy: Path) -> None:
    collection = installed(galaxy)
    plugins = shipped_plugins(collection)
    assert len(plugins["module"]) >= 7 and plugins["inventory"] and plugins["lookup"]
    for kind, names in plugins.items():
        done = run(galaxy, "ansible-doc", "--json", "-t", kind, *names)
        assert done.returncode == 0, done.stderr
        assert "WARNING" not in done.stderr, done.stderr
        docs = json.loads(done.stdout)
        assert set(docs) == set(names)
        for name, doc in docs.items():
            assert doc["doc"]["short_description"], name
            assert doc["examples"].strip(), name
            assert Path(doc["doc"]["filename"]).is_relative_to(collection), (
                f"{name} was read from {doc['doc']['filename']}, not from the installed copy")


def test_the_installed_collection_lists_its_modules(galaxy: Path) -> None:
    done = run(galaxy, "ansible-doc", "-l", "llmao.fleet")
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.strip()}
    assert listed == set(shipped_plugins(installed(galaxy))["module"])


def test_ansible_doc_documents_the_installed_role(galaxy: Path) -> None:
    done = run(galaxy, "ansible-doc", "-t", "role", "llmao.fleet.vllm_box")
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    text = done.stdout.replace("*", "")  # without colour, ansible-doc stars what it bolds
    assert text.splitlines()[0] == f"> ROLE: llmao.fleet.vllm_box ({installed(galaxy)})"
    assert "ENTRY POINT: main - Push a box's llmao assignment" in text
    assert "ENTRY POINT: plan - " in text
    assert "vllm_box_config" in text and "vllm_box_models" in text


def test_the_installed_provision_playbook_finds_the_installed_role(galaxy: Path) -> None:
    """--syntax-check loads every statically imported role: the role by its FQCN."""
    done = run(galaxy, "ansible-playbook", "llmao.fleet.provision", "--syntax-check",
               "-i", "localhost,", bundled=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"playbook: {installed(galaxy)}/playbooks/provision.yml" in done.stdout


@pytest.fixture
def local_fleet(tmp_path: Path) -> Iterator[LocalFleet]:
    """Two loopback boxes, the first serving (a vLLM stub), with the fake LiteLLM and
    llmao-server running."""
    master_key = strong_secret("sk-llmao-test-")
    port = free_port()
    litellm = start_litellm("fake", master_key=master_key, log_dir=tmp_path)
    local = LocalFleet(tmp_path / "fleet", one_model_hosts(loopback_boxes(2)))
    local.write(litellm={"url": litellm.url, "master_key": master_key},
                server={"url": f"http://127.0.0.1:{port}",
                        "state": str(tmp_path / "state.sqlite3")})
    first = next(iter(local.hosts))
    try:
        with running_stubs(local.of_boxes([first], "first")), \
                start_llmao_server(local.config_path, local.models_path, tmp_path, port=port,
                                   workers=1):
            yield local
    finally:
        litellm.stop()


@pytest.mark.slow
def test_reconcile_runs_from_the_installed_collection(galaxy: Path,
                                                      local_fleet: LocalFleet) -> None:
    first, silent = local_fleet.hosts
    done = run(galaxy, "ansible-playbook", "llmao.fleet.reconcile", "-i",
               str(local_fleet.inventory_path), "--check", "-v", bundled=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "running playbook inside collection llmao.fleet" in output
    assert "PLAY [Keep LiteLLM in step with the llmao fleet]" in output
    assert f"{first} {MODEL}-8001 ({MODEL}, 8001 -> {first}:8001): Healthy: serving its " \
           "model with our bearer => register: Healthy, not in LiteLLM" in output
    assert f"{silent} {MODEL}-8001 ({MODEL}, 8001 -> {silent}:8001): Awaiting: " in output
    assert "WARNING" not in output, output
