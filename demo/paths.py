"""Where the demo keeps its files, and how it names them to the user."""

from __future__ import annotations

import os
from pathlib import Path

from rig import REPO_ROOT

DIR_ENV = "LLMAO_DEMO_DIR"


def demo_dir() -> Path:
    """`.demo/` at the repository root (git-ignored), or $LLMAO_DEMO_DIR."""
    return Path(os.environ.get(DIR_ENV) or REPO_ROOT / ".demo").resolve()


def shown(path: Path) -> str:
    """A path as the user should type it: relative to where they are when it is below."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
