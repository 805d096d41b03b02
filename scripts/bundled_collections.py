"""Install the external collections of requirements.yml without Ansible Galaxy.

Galaxy is not always reachable; PyPI is. The PyPI package ``ansible`` 12.x
(the line that pairs with ansible-core 2.19, the newest Python 3.11 runs)
bundles every collection llmao uses. This takes just those folders from its
wheel, downloaded once into ``.cache/wheels``, and puts them where ansible-core
looks on its own: ``ansible_collections`` in this interpreter's site-packages.
Each must satisfy its range in requirements.yml. Collections already there at
a satisfying version are left alone, so a second run needs no network.

    .venv/bin/python scripts/bundled_collections.py [--dest DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements.yml"
WHEELS = ROOT / ".cache" / "wheels"
ANSIBLE_PACKAGE = "ansible>=12,<13"
ANSIBLE_WHEELS = "ansible-12.*-py3-none-any.whl"


def external_requirements() -> dict[str, str]:
    """``namespace.name`` → version range of every Galaxy collection requirements.yml lists."""
    listed = yaml.safe_load(REQUIREMENTS.read_text(encoding="utf-8"))["collections"]
    return {entry["name"]: str(entry.get("version", "*")) for entry in listed
            if entry.get("type", "galaxy") == "galaxy"}


def installed_version(dest: Path, name: str) -> str | None:
    manifest = dest.joinpath(*name.split("."), "MANIFEST.json")
    if not manifest.is_file():
        return None
    return json.loads(manifest.read_text(encoding="utf-8"))["collection_info"]["version"]


def unsatisfied(dest: Path, requirements: dict[str, str]) -> list[str]:
    return [name for name, wanted in requirements.items()
            if not (version := installed_version(dest, name))
            or not meets_requirements(version, wanted)]


def ansible_wheel() -> Path:
    """The newest cached wheel of ``ansible`` 12.x, downloaded from PyPI when none is."""
    cached = sorted(WHEELS.glob(ANSIBLE_WHEELS))
    if not cached:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "--dest", str(WHEELS), ANSIBLE_PACKAGE],
                       check=True)
        cached = sorted(WHEELS.glob(ANSIBLE_WHEELS))
    return cached[-1]


def extract(wheel: Path, dest: Path, name: str) -> None:
    """Replace ``dest``'s copy of collection ``name`` with the wheel's."""
    prefix = "ansible_collections/" + name.replace(".", "/") + "/"
    target = dest.joinpath(*name.split("."))
    shutil.rmtree(target, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        members = [member for member in archive.namelist() if member.startswith(prefix)]
        if not members:
            raise SystemExit(f"{wheel.name} does not bundle {name}")
        for member in members:
            archive.extract(member, dest.parent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", type=Path,
                        default=Path(sysconfig.get_paths()["purelib"]) / "ansible_collections",
                        help="the ansible_collections folder to fill (this site-packages')")
    dest = parser.parse_args(argv).dest.resolve()
    if dest.name != "ansible_collections":
        parser.error("--dest must be a folder named ansible_collections")
    requirements = external_requirements()
    missing = unsatisfied(dest, requirements)
    if missing:
        wheel = ansible_wheel()
        for name in missing:
            extract(wheel, dest, name)
        still = unsatisfied(dest, requirements)
        if still:
            raise SystemExit(f"{wheel.name} bundles versions outside requirements.yml's ranges: "
                             + ", ".join(f"{n} {installed_version(dest, n)}" for n in still))
    for name in requirements:
        print(f"{name} {installed_version(dest, name)} in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
