"""Where the demo keeps its files and finds its tools, and how it names paths to the user."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rig import REPO_ROOT

DIR_ENV = "LLMAO_DEMO_DIR"


class ToolMissing(RuntimeError):
    """A tool the demo runs is not installed where it looks."""


def demo_dir() -> Path:
    """`.demo/` at the repository root (git-ignored), or $LLMAO_DEMO_DIR."""
    return Path(os.environ.get(DIR_ENV) or REPO_ROOT / ".demo").resolve()


def shown(path: Path) -> str:
    """A path as the user should type it: relative to where they are when it is below."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def venv_tool(name: str) -> Path:
    """A console script of the environment the demo runs in (supervisord, llmao-server, ...)."""
    tool = Path(sys.executable).with_name(name)
    if not tool.exists():
        raise ToolMissing(f"{tool} is missing: run `make setup` (the demo runs from .venv)")
    return tool
