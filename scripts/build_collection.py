"""Build the llmao.fleet collection's tarball, carrying the project's docs.

The plugins' and the role's documentation send the reader to pages such as
``docs/metrics.md``, and ``ansible-doc`` shows those names wherever the collection is
installed: the installed collection must hold them, at ``docs/`` beside its ``plugins/``. The
pages are written once, in the repository's ``docs/`` folder. ``ansible-galaxy collection
build`` takes only what is under the collection's folder, and ``ansible-test sanity`` refuses
a symbolic link that leaves it, so neither a link nor a second copy in git will do: this
copies the collection to a staging folder, puts the repository's ``docs/`` in it (the pages
and the files they link to), and builds the tarball from there (``galaxy.yml``'s
``build_ignore`` applies as usual).

    .venv/bin/python scripts/build_collection.py [--output-path dist] [--source DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COLLECTION = ROOT / "collections" / "ansible_collections" / "llmao" / "fleet"
DOCS = ROOT / "docs"
# What no page links to (the README's screenshot): left out of the collection's docs.
LEFT_OUT = ("*.png",)


def stage(source: Path, staging: Path) -> Path:
    """A copy of the collection at ``source`` under ``staging``, with the project's docs in
    ``docs/``. Links are copied as links, so the role's executable files and any link inside
    the collection stay as they are."""
    copy = staging / "ansible_collections" / "llmao" / "fleet"
    shutil.copytree(source, copy, symlinks=True)
    if (copy / "docs").exists():
        raise SystemExit(f"{source}/docs exists: the project's docs are {DOCS}, which the build "
                         "puts there; remove the collection's own copy")
    shutil.copytree(DOCS, copy / "docs", ignore=shutil.ignore_patterns(*LEFT_OUT))
    return copy


def build(source: Path, output: Path) -> Path:
    """The tarball ``ansible-galaxy collection build`` makes of the staged collection."""
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llmao-collection-") as staging:
        copy = stage(source, Path(staging))
        galaxy = Path(sys.executable).parent / "ansible-galaxy"
        done = subprocess.run([str(galaxy), "collection", "build", str(copy), "--force",
                               "--output-path", str(output)], text=True, capture_output=True,
                              check=False)
    if done.returncode != 0:
        raise SystemExit(f"ansible-galaxy collection build failed:\n{done.stdout}{done.stderr}")
    sys.stderr.write(done.stderr)
    version = yaml.safe_load((source / "galaxy.yml").read_text(encoding="utf-8"))["version"]
    return output / f"llmao-fleet-{version}.tar.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--output-path", type=Path, default=ROOT / "dist",
                        help="where the tarball is written (default: dist/)")
    parser.add_argument("--source", type=Path, default=COLLECTION,
                        help="the collection's folder (default: the checkout's)")
    args = parser.parse_args()
    print(build(args.source.resolve(), args.output_path.resolve()))


if __name__ == "__main__":
    main()
