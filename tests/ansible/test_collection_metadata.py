"""The collection's metadata keeps the promises people check first.

galaxy.yml: the licence pyproject.toml declares, as SPDX, with its text in the
collection; tags Galaxy accepts; no link that leads nowhere. meta/runtime.yml: one
action group for every module that reads llmao's files, used by reconcile.yml. The
changelog: fragments that lint, and a CHANGELOG.rst that is what antsibull-changelog
generates from changelog.yaml, never edited by hand.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "collections" / "ansible_collections" / "llmao" / "fleet"
BIN = Path(sys.executable).parent
# The tags Galaxy and Automation Hub sort collections by; a collection names at least one.
CATEGORY_TAGS = {"application", "cloud", "database", "eda", "infrastructure", "linux",
                 "monitoring", "networking", "security", "storage", "tools", "windows"}
GROUP = "controller"


def read(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_licence_is_pyprojects_as_spdx_with_its_text_shipped() -> None:
    galaxy = read(COLLECTION / "galaxy.yml")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert galaxy["license"] == [project["license"]] == ["GPL-3.0-or-later"]
    assert "license_file" not in galaxy  # Galaxy takes one of the two
    text = (COLLECTION / "COPYING").read_text(encoding="utf-8")
    assert text.lstrip().startswith("GNU GENERAL PUBLIC LICENSE") and "Version 3" in text[:200]
    assert (ROOT / "COPYING").read_text(encoding="utf-8") == text


def test_every_file_header_names_the_shipped_licence_file() -> None:
    headers = [path for path in (COLLECTION / "plugins").rglob("*.py")
               if "see COPYING" in path.read_text(encoding="utf-8")[:300]]
    assert headers and (COLLECTION / "COPYING").is_file()


def test_tags_follow_galaxys_rules() -> None:
    tags = read(COLLECTION / "galaxy.yml")["tags"]
    assert all(re.fullmatch(r"[a-z][a-z0-9_]{0,63}", tag) for tag in tags), tags
    assert len(tags) <= 20 and len(set(tags)) == len(tags)
    assert CATEGORY_TAGS & set(tags)


def test_no_link_to_nowhere() -> None:
    galaxy = read(COLLECTION / "galaxy.yml")
    links = {key: galaxy.get(key) for key in ("repository", "documentation", "homepage", "issues")}
    assert links == dict.fromkeys(links), "the project publishes no address yet: name none"


@pytest.fixture(scope="module")
def module_docs(ansible) -> dict[str, dict]:
    """FQCN → ansible-doc's JSON of every module of the collection."""
    modules = (COLLECTION / "plugins" / "modules").glob("*.py")
    names = [f"llmao.fleet.{path.stem}" for path in modules]
    done = ansible("ansible-doc", "--json", "-t", "module", *names)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_action_group_holds_every_module_that_reads_llmaos_files(module_docs) -> None:
    group = read(COLLECTION / "meta" / "runtime.yml")["action_groups"][GROUP]
    reading = {name.removeprefix("llmao.fleet.") for name, doc in module_docs.items()
               if {"config", "models"} <= set(doc["doc"]["options"])}
    assert sorted(group) == sorted(reading)


def test_a_checkouts_role_and_playbooks_are_the_collections() -> None:
    """The collection holds them; the old paths at the root are links for people who clone."""
    assert (ROOT / "roles" / "vllm_box").is_symlink() and (ROOT / "playbooks").is_symlink()
    assert (ROOT / "roles" / "vllm_box").resolve() == COLLECTION / "roles" / "vllm_box"
    assert (ROOT / "playbooks").resolve() == COLLECTION / "playbooks"


def test_reconcile_sets_the_files_once_for_the_group() -> None:
    plays = read(COLLECTION / "playbooks" / "reconcile.yml")
    defaults = plays[0]["module_defaults"]
    assert defaults == {f"group/llmao.fleet.{GROUP}": {"config": "{{ llmao_config_file }}",
                                                      "models": "{{ llmao_models_file }}"}}
    used = {task_module for task in plays[0]["tasks"]
            for task_module in task if task_module.startswith("llmao.fleet.")}
    group = read(COLLECTION / "meta" / "runtime.yml")["action_groups"][GROUP]
    assert used and used <= {f"llmao.fleet.{name}" for name in group}


def antsibull_changelog(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    return subprocess.run([str(BIN / "antsibull-changelog"), *args], cwd=folder, env=env,
                          text=True, capture_output=True, timeout=120, check=False)


def test_changelog_fragments_and_history_lint() -> None:
    done = antsibull_changelog(COLLECTION, "lint")
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr
    done = antsibull_changelog(COLLECTION, "lint-changelog-yaml",
                               str(COLLECTION / "changelogs" / "changelog.yaml"))
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_changelog_rst_is_generated_not_edited(tmp_path: Path) -> None:
    copy = tmp_path / "ansible_collections" / "llmao" / "fleet"
    shutil.copytree(COLLECTION, copy, ignore=shutil.ignore_patterns("output", "__pycache__"))
    done = antsibull_changelog(copy, "generate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (copy / "CHANGELOG.rst").read_text() == (COLLECTION / "CHANGELOG.rst").read_text()


def version_tuple(version: object) -> tuple[int, ...]:
    return tuple(map(int, str(version).split(".")))


def released(changelog: Path) -> list[tuple[int, ...]]:
    return sorted(map(version_tuple, read(changelog)["releases"]))


def test_the_collection_version_is_released_or_the_next_release() -> None:
    """galaxy.yml names the release under way: one already in the changelog, or a newer one."""
    version = version_tuple(read(COLLECTION / "galaxy.yml")["version"])
    history = released(COLLECTION / "changelogs" / "changelog.yaml")
    assert version in history or version > history[-1]


def test_a_release_lists_every_module_added_since_the_last(tmp_path: Path) -> None:
    """A module's ``version_added`` is the release that first ships it: antsibull-changelog
    lists a module as new in the release its ``version_added`` names, so a wrong one hides
    it. Released in a copy: galaxy.yml's version, with the fragments as they stand; a version
    already released must already list every module."""
    copy = tmp_path / "ansible_collections" / "llmao" / "fleet"
    shutil.copytree(COLLECTION, copy, ignore=shutil.ignore_patterns("output", "__pycache__"))
    version = str(read(copy / "galaxy.yml")["version"])
    history = read(copy / "changelogs" / "changelog.yaml")["releases"]
    shipped = {entry["name"] for release in history.values()
               for entry in release.get("modules", [])}
    modules = {path.stem for path in (copy / "plugins" / "modules").glob("*.py")}
    if version in history:
        assert modules <= shipped
        return
    env_path = f"{tmp_path}{os.pathsep}{ROOT / 'collections'}"
    done = subprocess.run([str(BIN / "antsibull-changelog"), "release", "--version", version],
                          cwd=copy, text=True, capture_output=True, timeout=300, check=False,
                          env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": env_path,
                               "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert done.returncode == 0, done.stdout + done.stderr
    release = read(copy / "changelogs" / "changelog.yaml")["releases"][version]
    assert {entry["name"] for entry in release.get("modules", [])} == modules - shipped
    rst = (copy / "CHANGELOG.rst").read_text(encoding="utf-8")
    assert all(f"llmao.fleet.{name}" in rst for name in modules - shipped)
    # The role and the playbooks moved into the collection in 0.2.0: its first release with them.
    if version == "0.2.0":
        objects = {kind: {entry["name"] for entry in entries}
                   for kind, entries in release.get("objects", {}).items()}
        assert objects == {"role": {"vllm_box"}, "playbook": {"reconcile", "provision"}}
        assert "New Roles" in rst and "New Playbooks" in rst


def test_the_server_and_the_collection_are_released_together() -> None:
    """One release, one number: the wheel (pyproject.toml) carries the collection's core."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["version"] == str(read(COLLECTION / "galaxy.yml")["version"])
