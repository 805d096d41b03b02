"""The collection as Galaxy would ship it: built, installed where nothing else is, documented.

``ansible-galaxy collection build`` makes the tarball, ``ansible-galaxy collection
install`` puts it in an empty collections path, and ``ansible-doc`` reads every plugin
from there, from a folder with an empty ``ansible.cfg`` and with Python's path not scanned
for collections (the editable install puts this checkout's collections on it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "collections" / "ansible_collections" / "llmao" / "fleet"
BIN = Path(sys.executable).parent
# plugins/<folder> → ansible-doc's plugin type
DOCUMENTED = {"modules": "module", "inventory": "inventory", "lookup": "lookup"}


def run(folder: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    config = folder / "ansible.cfg"  # Ansible's defaults, not the checkout's settings
    config.write_text("[defaults]\n", encoding="utf-8")
    (folder / "home").mkdir(exist_ok=True)  # a home of its own: no user's ~/.ansible either
    env.update(ANSIBLE_CONFIG=str(config), ANSIBLE_COLLECTIONS_PATH=str(folder / "installed"),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(folder / "tmp"), HOME=str(folder / "home"))
    return subprocess.run([str(BIN / command[0]), *command[1:]], cwd=folder, env=env, text=True,
                          capture_output=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def galaxy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test's folder: the built tarball, and the collection installed under installed/."""
    folder = tmp_path_factory.mktemp("galaxy")
    built = run(folder, "ansible-galaxy", "collection", "build", str(COLLECTION),
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


def test_the_tarball_carries_licence_changelog_and_metadata(galaxy: Path) -> None:
    with tarfile.open(next(galaxy.glob("llmao-fleet-*.tar.gz"))) as archive:
        names = set(archive.getnames())
    assert {"COPYING", "CHANGELOG.rst", "changelogs/changelog.yaml", "meta/runtime.yml",
            "README.md", "MANIFEST.json"} <= names
    assert not [name for name in names
                if name.startswith("tests/output") or "__pycache__" in name
                or name.endswith((".plugin-cache.yaml", ".tar.gz"))]


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
