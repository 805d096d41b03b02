"""Run ``ansible-test sanity`` on the llmao.fleet collection, with no site but PyPI.

``ansible-test sanity --venv`` builds one virtual environment per test and first
bootstraps pip into it with a script it downloads from outside PyPI, unless
``~/.ansible/test/cache/get_pip_<version>.py`` already exists. This seeds that
cache with ``ansible_test_get_pip.py`` and the matching pip wheel downloaded
from PyPI, then runs the sanity tests from the collection's folder (where
ansible-test must be started) with this interpreter's Python version. The
ansible-test run is this interpreter's: scripts/ansible_core_matrix.py runs this
script with each ansible-core release the collection claims.

    python scripts/ansible_test_sanity.py [--test NAME ...] [extra ansible-test options]
"""

from __future__ import annotations

import argparse
import fcntl
import filecmp
import glob
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLLECTION = ROOT / "collections" / "ansible_collections" / "llmao" / "fleet"
SHIM = Path(__file__).resolve().parent / "ansible_test_get_pip.py"
CACHE = Path(os.path.expanduser("~/.ansible/test/cache"))
# ansible-test keeps its environments under ~/.ansible/test and its output in the
# collection: two runs at once would build the same environment together.
LOCK = CACHE.parent / "llmao-sanity.lock"


def bootstrap_pip_version() -> str:
    """The pip version ansible-test bootstraps into its environments."""
    from ansible_test._internal.python_requirements import get_venv_packages

    python = types.SimpleNamespace(version=f"{sys.version_info.major}.{sys.version_info.minor}")
    return get_venv_packages(python)["pip"]


def seed_bootstrap_cache(version: str) -> None:
    """Put the stand-in bootstrap and pip's wheel where ansible-test looks first."""
    CACHE.mkdir(parents=True, exist_ok=True)
    if not glob.glob(str(CACHE / f"pip-{version}-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "--dest", str(CACHE), f"pip=={version}"],
                       check=True)
    script = CACHE / f"get_pip_{version.replace('.', '_')}.py"
    if not script.exists() or not filecmp.cmp(SHIM, script, shallow=False):
        shutil.copyfile(SHIM, script)


def ansible_test() -> str:
    """ansible-test of this interpreter's environment (the project's .venv)."""
    return str(Path(sys.executable).parent / "ansible-test")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--test", action="append", default=[],
                        help="run only this sanity test (repeatable; default: all)")
    args, extra = parser.parse_known_args(argv)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    command = [ansible_test(), "sanity", "--venv", "--python", python, "--color", "no"]
    for name in args.test:
        command += ["--test", name]
    command += extra
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for a run already going
        seed_bootstrap_cache(bootstrap_pip_version())
        return subprocess.run(command, cwd=COLLECTION, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
