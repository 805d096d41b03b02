"""The docs the collection's documentation sends its reader to travel with it.

``ansible-doc`` shows the plugins' and the role's documentation wherever the collection is
installed, and that text names pages such as ``docs/metrics.md``. The collection is built the
way the project builds it (``make collection``: ``scripts/build_collection.py``), installed
into an empty collections path, and every page the installed plugins' and role's
documentation names is looked for in the tarball and in the installed collection; every
relative link of the pages it carries must land on a file it carries.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from scripts.build_collection import COLLECTION, DOCS, stage
from tests.ansible.test_collection_build import installed, run, shipped_plugins, tarball_members

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "scripts" / "build_collection.py"
NAMED_PAGE = re.compile(r"\bdocs/[\w.-]+\.md\b")
LINK = re.compile(r"\]\(([^)#\s]+)[^)]*\)")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test's folder: the tarball ``scripts/build_collection.py`` made, installed under
    installed/."""
    folder = tmp_path_factory.mktemp("built")
    done = run(folder, Path(sys.executable).name, str(BUILD), "--output-path", str(folder))
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    tarball = Path(done.stdout.strip())
    done = run(folder, "ansible-galaxy", "collection", "install", "--offline", str(tarball),
               "-p", str(folder / "installed"))
    assert done.returncode == 0, done.stderr
    return folder


def pages_named_by_ansible_doc(folder: Path) -> set[str]:
    """Every docs/*.md that ansible-doc's pages of the installed plugins and role name."""
    texts = []
    for kind, names in {**shipped_plugins(installed(folder)),
                        "role": ["llmao.fleet.vllm_box"]}.items():
        done = run(folder, "ansible-doc", "--json", "-t", kind, *names)
        assert done.returncode == 0, done.stderr
        texts.append(json.dumps(json.loads(done.stdout)))
    return {page for text in texts for page in NAMED_PAGE.findall(text)}


def test_every_page_ansible_doc_names_is_in_the_tarball_and_the_installed_collection(
        built: Path) -> None:
    named = pages_named_by_ansible_doc(built)
    assert {"docs/metrics.md", "docs/box-tls.md"} <= named  # the search finds what is there
    members = tarball_members(built)
    collection = installed(built)
    for page in sorted(named):
        assert page in members, f"{page} is named by ansible-doc but not in the tarball"
        assert (collection / page).read_bytes() == (ROOT / page).read_bytes(), page


def test_every_relative_link_of_the_carried_pages_lands_in_the_collection(built: Path) -> None:
    collection = installed(built)
    pages = [*(collection / "docs").glob("*.md"), collection / "README.md",
             *(collection / "roles").glob("*/README.md")]
    assert len(pages) > 10
    broken = [f"{page.relative_to(collection)}: {target}"
              for page in pages for target in LINK.findall(page.read_text(encoding="utf-8"))
              if not target.startswith(("http://", "https://", "mailto:"))
              and not (page.parent / target).resolve().is_file()]
    assert not broken, broken


def test_the_checkout_keeps_one_copy_of_each_page(tmp_path: Path) -> None:
    """The pages live in docs/ at the repository's root; the build stages them, and a
    collection folder holding its own docs/ is refused rather than overwritten."""
    assert not (COLLECTION / "docs").exists()
    copy = stage(COLLECTION, tmp_path / "staged")
    assert (copy / "docs" / "metrics.md").read_bytes() == (DOCS / "metrics.md").read_bytes()
    assert (copy / "galaxy.yml").is_file()
    with pytest.raises(SystemExit, match="remove the collection's own copy"):
        stage(copy, tmp_path / "again")
