"""ansible-test sanity and the collection's unit tests on every ansible-core it claims.

``requires_ansible`` in the collection's ``meta/runtime.yml`` is a promise: each
ansible-core release in its range is tested. The range must be closed (an upper
bound), since an open one claims releases nobody has run. Each release gets its
own virtual environment, ``.cache/ansible-core/<release>`` (that ansible-core,
pytest and ``tests/unit/requirements.txt``), built with pip from PyPI alone and
kept while its stamp matches. There
scripts/ansible_test_sanity.py runs that release's ``ansible-test sanity``, and
pytest runs the unit tests: they share the repository's test rig (``rig/``), which
``ansible-test units`` cannot see from the collection's folder.

The newest claimed release runs every sanity test. The older ones skip the style
linters (:data:`STYLE_TESTS`): they judge how the code is written, which does not
change with ansible-core, and their environments (pylint's above all) are most of
a sanity run's cost. Every test that loads the code against that release (import,
compile, ansible-doc, validate-modules, runtime-metadata, ...) runs on each.

    python scripts/ansible_core_matrix.py [--core 2.18 ...] [--sanity-only | --units-only]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "collections" / "ansible_collections" / "llmao" / "fleet" / "meta" / "runtime.yml"
ENVIRONMENTS = ROOT / ".cache" / "ansible-core"
SANITY = Path(__file__).resolve().parent / "ansible_test_sanity.py"
UNITS = RUNTIME.parent.parent / "tests" / "unit"
# What the unit tests import beside ansible-core and pytest, where ansible-test looks for it.
UNIT_REQUIREMENTS = UNITS / "requirements.txt"
STYLE_TESTS = ("pylint", "pep8", "yamllint", "changelog", "pslint", "shellcheck")
# ansible-core 2.x releases worth looking at; 2.30 is far beyond any range written today.
MINORS = range(9, 31)


def claimed_releases(requires_ansible: str) -> list[str]:
    """The ``2.N`` releases whose first version ``requires_ansible`` admits."""
    specifiers = SpecifierSet(requires_ansible)
    if not any(spec.operator in ("<", "<=", "==", "~=") for spec in specifiers):
        raise SystemExit(f"{RUNTIME}: requires_ansible {requires_ansible!r} has no upper bound: "
                         "it would claim ansible-core releases nobody has tested")
    releases = [f"2.{minor}" for minor in MINORS if Version(f"2.{minor}.0") in specifiers]
    if not releases:
        raise SystemExit(f"{RUNTIME}: requires_ansible {requires_ansible!r} admits no release")
    return releases


def runtime_releases() -> list[str]:
    runtime = yaml.safe_load(RUNTIME.read_text(encoding="utf-8"))
    return claimed_releases(str(runtime["requires_ansible"]))


def unit_requirements() -> list[str]:
    """The requirement lines of :data:`UNIT_REQUIREMENTS`, comments and blanks left out."""
    lines = UNIT_REQUIREMENTS.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def environment(release: str) -> Path:
    """The virtual environment of ansible-core ``release``, built when missing or stale."""
    folder = ENVIRONMENTS / release
    python = folder / "bin" / "python"
    stamp = folder / ".llmao-ansible-core"
    wanted = [f"ansible-core=={release}.*", "pytest>=8", *unit_requirements()]
    if python.exists() and stamp.is_file() and stamp.read_text(encoding="utf-8") == str(wanted):
        return folder
    stamp.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *wanted], check=True)
    stamp.write_text(str(wanted), encoding="utf-8")
    return folder


def run(release: str, *, units: bool, newest: bool) -> int:
    """ansible-test sanity, or the unit tests, with ansible-core ``release``."""
    python = environment(release) / "bin" / "python"
    print(f"==> ansible-core {release}: {'unit tests' if units else 'ansible-test sanity'}",
          flush=True)
    if not units:
        skipped = [] if newest else [arg for test in STYLE_TESTS for arg in ("--skip-test", test)]
        return subprocess.run([str(python), str(SANITY), *skipped], check=False).returncode
    # The repository's settings (pyproject.toml), its rig and the checkout's collection.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "collections")])}
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(UNITS)]
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--core", action="append", default=[],
                        help="only this claimed release, e.g. 2.18 (repeatable; default: all)")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--sanity-only", action="store_true")
    only.add_argument("--units-only", action="store_true")
    args = parser.parse_args(argv)
    claimed = runtime_releases()
    unknown = sorted(set(args.core) - set(claimed))
    if unknown:
        parser.error(f"not claimed by requires_ansible: {', '.join(unknown)} "
                     f"(claimed: {', '.join(claimed)})")
    failed = []
    for release in args.core or claimed:
        kinds = [False] if args.sanity_only else [True] if args.units_only else [False, True]
        failed += [f"{release} {'units' if units else 'sanity'}" for units in kinds
                   if run(release, units=units, newest=release == claimed[-1]) != 0]
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
