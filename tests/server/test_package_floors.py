"""The server's floor plan (docs/architecture.md), executable: every import inside
``llmao_server`` points down a floor, or stays in its own folder, and no module imports
itself back through others.

The picture in the document and :data:`FLOORS` say the same thing; a new folder or a new
module of the frame must be placed on a floor here before it imports anything.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import llmao_server

PACKAGE = "llmao_server"
ROOT = Path(llmao_server.__file__).parent

# Highest floor first. A top-level module not named here is on the ground floor (state.py
# and what it owns, and the plumbing every face shares).
FRAME = {"__init__", "app", "cli", "enroll_cli", "keycli", "fleet_ca_cli", "gunicorn_app",
         "worker", "health"}
FLOORS: dict[str, int] = {
    **dict.fromkeys(FRAME, 4),
    "admin": 3, "metrics": 3, "web": 3,
    "boxes": 2,
    # ground floor: 1 (every other top-level module)
    "store": 0, "tls": 0,
}
GROUND = 1
# Floors of single modules, which import each other freely (no cycle: the test below);
# a folder of a floor of folders imports none of its neighbours.
LOOSE_MODULES = (GROUND, FLOORS["app"])


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join((PACKAGE, *parts))


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def resolved(importer: str, package: bool, node: ast.ImportFrom, known: set[str]) -> set[str]:
    """The package's modules one ``from … import …`` names (a submodule named after
    ``import`` counts as that module)."""
    if node.level == 0:
        base = node.module or ""
    else:
        here = importer.split(".")
        anchor = here if package else here[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, *([node.module] if node.module else [])])
    found = {f"{base}.{alias.name}" for alias in node.names} & known
    return found or ({base} if base in known else set())


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of the package ``name`` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            found |= resolved(name, is_package(path), node, known)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
    return found - {name}


def import_graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def unit(module: str) -> str:
    """A folder's name for a module in it, else the top-level module's own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def floor(module: str) -> int:
    return FLOORS.get(unit(module), GROUND)


def is_folder(name: str) -> bool:
    return (ROOT / name).is_dir() and (ROOT / name / "__init__.py").exists()


def test_every_folder_is_on_a_floor() -> None:
    folders = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    assert folders == {name for name in FLOORS if is_folder(name)}


def test_no_import_cycle() -> None:
    try:
        tuple(TopologicalSorter(import_graph()).static_order())
    except CycleError as cycle:
        pytest.fail(f"import cycle: {' -> '.join(cycle.args[1])}")


def test_imports_point_down_or_stay_in_their_folder() -> None:
    upward = []
    for importer, imported in import_graph().items():
        for target in imported:
            if not (floor(target) < floor(importer) or unit(importer) == unit(target)
                    or floor(importer) == floor(target) in LOOSE_MODULES):
                upward.append(f"{importer} -> {target}")
    assert upward == []


def test_the_rule_sees_imports() -> None:
    """The walk finds what the package imports (a rule over an empty graph passes anything)."""
    graph = import_graph()
    assert "llmao_server.boxes.bindings" in graph["llmao_server.web.views"]
    assert "llmao_server.state" in graph["llmao_server.boxes.box_api"]
    assert "llmao_server.enroll_cli" in graph["llmao_server.cli"]  # imported in a function
    assert {"llmao_server.admin.admin_api", "llmao_server.health"} <= graph["llmao_server.app"]
