"""Stand-in for the pip bootstrap script that ``ansible-test`` downloads.

``ansible-test --venv`` creates empty virtual environments and bootstraps pip
into them with a ``get-pip`` script fetched from a site outside PyPI, caching it
as ``~/.ansible/test/cache/get_pip_<version>.py``. ``ansible_test_sanity.py``
copies this file to that name, with the pip wheel of that version (from PyPI)
beside it. Run like the original (``python get_pip_X.py [pip options]
[--no-setuptools] [--no-wheel] pip==X``), it installs pip from that wheel.
"""

from __future__ import annotations

import glob
import os
import runpy
import sys

# Flags of the original bootstrap that pip itself does not know.
BOOTSTRAP_ONLY_FLAGS = {"--no-setuptools", "--no-wheel"}


def pip_wheel() -> str:
    """The pip wheel cached beside this file, for the version in this file's name."""
    here = os.path.dirname(os.path.abspath(__file__))
    version = os.path.splitext(os.path.basename(__file__))[0].removeprefix("get_pip_")
    pattern = os.path.join(here, f"pip-{version.replace('_', '.')}-*.whl")
    wheels = sorted(glob.glob(pattern))
    if not wheels:
        sys.exit(f"no pip wheel matching {pattern}: run scripts/ansible_test_sanity.py")
    return wheels[0]


def main() -> None:
    wheel = pip_wheel()
    options = [arg for arg in sys.argv[1:] if arg not in BOOTSTRAP_ONLY_FLAGS]
    sys.path.insert(0, wheel)
    sys.argv = ["pip", "install", "--upgrade", "--force-reinstall",
                "--find-links", os.path.dirname(wheel), *options]
    runpy.run_module("pip", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
