"""Build the box program: its package and the core modules it imports, joined into one file.

A box fetches one file, ``roles/vllm_box/files/install_set.py``, and runs it with the
``python3`` of a stock vLLM image: no package, no site-packages, nothing but the standard
library. The program is written as a package (``roles/vllm_box/files/box_program/``,
one module per concern, ``__main__.py`` its entry) that imports the core's stdlib-only
modules (``module_utils/box_protocol.py``, ``module_utils/payload_rules.py``) instead of
copying them. This script joins them into that one file, which is committed:

- every module the entry imports, depth first, each after the modules it imports;
- their standard-library imports hoisted, merged and sorted as ruff's isort sorts them;
- their own imports dropped: the names live in the one namespace of the file.

So the sources must keep a few rules, which the build checks and refuses to break: a
module imports the others of the program (and the core's) only as ``from .x import a``
(``from ansible_collections.llmao.fleet.plugins.module_utils.x import a``), never under
another name; anything else it imports is in the standard library; no top-level name is
bound by two modules; the imports form no cycle. The joined file is exactly what the
sources say, so a test compares the committed file with a fresh build.

    .venv/bin/python scripts/build_box_program.py [--check]
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = ROOT / "collections" / "ansible_collections" / "llmao" / "fleet"
FILES = COLLECTION / "roles" / "vllm_box" / "files"
PACKAGE = FILES / "box_program"
TARGET = FILES / "install_set.py"
CORE = COLLECTION / "plugins" / "module_utils"
CORE_PACKAGE = "ansible_collections.llmao.fleet.plugins.module_utils"
ENTRY = "__main__.py"
LINE_LENGTH = 100
BANNER = ("# Built by scripts/build_box_program.py (make box-program) from roles/vllm_box/files/"
          "box_program/\n# and the core's module_utils it imports: edit those, then build; "
          "never this file.")


class BuildError(Exception):
    """A source breaks a rule the one-file build relies on; the message says where."""


@dataclass(frozen=True)
class StdlibImport:
    """``import module`` (``name`` None) or ``from module import name [as alias]``."""

    module: str
    name: str | None = None
    alias: str | None = None

    @property
    def bound(self) -> str:
        """The name the import binds in the file's namespace."""
        if self.name is None:
            return self.alias or self.module.split(".")[0]
        return self.alias or self.name

    @property
    def meaning(self) -> tuple[str, str | None]:
        """What the bound name stands for: ``import a.b`` and ``import a.c`` both bind ``a``."""
        if self.name is None and self.alias is None:
            return self.module.split(".")[0], None
        return self.module, self.name


@dataclass
class Source:
    """One module of the program as the build reads it."""

    path: Path
    docstring: str
    body: str
    # The docstring as written (the entry's becomes the file's, escapes and all).
    docstring_text: str = ""
    stdlib: list[StdlibImport] = field(default_factory=list)
    # The modules of the program it imports, in order, with the names it takes from each.
    takes: list[tuple[Path, tuple[str, ...]]] = field(default_factory=list)
    defines: set[str] = field(default_factory=set)


def shown(path: Path) -> str:
    """A path as messages and the built file name it: from the checkout's root."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def where(path: Path, node: ast.AST) -> str:
    return f"{shown(path)}:{getattr(node, 'lineno', 0)}"


def imported_file(path: Path, node: ast.ImportFrom) -> Path | None:
    """The program's own module (or the core's) an import names, None for the stdlib."""
    if node.level == 1 and node.module:
        return path.parent / f"{node.module}.py"
    if node.level:
        raise BuildError(f"{where(path, node)}: import a sibling module by name (from .x import)")
    if node.module and node.module.startswith(CORE_PACKAGE + "."):
        return CORE / f"{node.module[len(CORE_PACKAGE) + 1:]}.py"
    return None


def require_stdlib(path: Path, node: ast.AST, module: str) -> None:
    if module.split(".")[0] not in sys.stdlib_module_names:
        raise BuildError(f"{where(path, node)}: {module} is not in the standard library; a box "
                         "has nothing else")


def read_imports(source: Source, node: ast.Import | ast.ImportFrom) -> None:
    """Sort one top-level import into the standard library's and the program's own."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            require_stdlib(source.path, node, alias.name)
            source.stdlib.append(StdlibImport(alias.name, alias=alias.asname))
        return
    if node.module == "__future__":
        return
    own = imported_file(source.path, node)
    if own is None:
        require_stdlib(source.path, node, node.module or "")
        source.stdlib += [StdlibImport(node.module or "", alias.name, alias.asname)
                          for alias in node.names]
        return
    if any(alias.asname or alias.name == "*" for alias in node.names):
        raise BuildError(f"{where(source.path, node)}: take the program's names as they are "
                         "(no alias, no *): the built file has one namespace")
    if not own.is_file():
        raise BuildError(f"{where(source.path, node)}: {shown(own)} does not exist")
    source.takes.append((own, tuple(alias.name for alias in node.names)))


def bound_names(node: ast.stmt) -> set[str]:
    """The top-level names a statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return {name.id for target in targets for name in ast.walk(target)
            if isinstance(name, ast.Name)}


def read_source(path: Path) -> Source:
    """A module's docstring, its imports sorted out, and the rest of its text, verbatim."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    docstring = ast.get_docstring(tree, clean=False) or ""
    source = Source(path, docstring, "")
    cut: set[int] = set()
    first_line = 0
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and node is tree.body[0] and docstring:
            first_line = node.end_lineno or 0
            source.docstring_text = "\n".join(text.splitlines()[node.lineno - 1:first_line])
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            read_imports(source, node)
            cut.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        else:
            source.defines |= bound_names(node)
    lines = text.splitlines()
    kept = [line for number, line in enumerate(lines, 1)
            if number > first_line and number not in cut]
    source.body = "\n".join(kept).strip("\n")
    return source


def in_order(entry: Path) -> list[Source]:
    """The entry and every module it imports, each after the modules it imports."""
    done: dict[Path, Source] = {}
    visiting: list[Path] = []

    def visit(path: Path) -> None:
        if path in done:
            return
        if path in visiting:
            cycle = " -> ".join(p.name for p in visiting[visiting.index(path):] + [path])
            raise BuildError(f"the program's imports form a cycle: {cycle}")
        visiting.append(path)
        source = read_source(path)
        for own, _names in source.takes:
            visit(own)
        visiting.pop()
        done[path] = source

    visit(entry)
    return list(done.values())


def check_namespace(sources: list[Source]) -> None:
    """One namespace: no name bound twice, and every name taken is bound where it is taken
    from."""
    owners: dict[str, Path] = {}
    by_path = {source.path: source for source in sources}
    for source in sources:
        for name in sorted(source.defines):
            if name in owners:
                raise BuildError(f"{name} is bound by both {shown(owners[name])} and "
                                 f"{shown(source.path)}: the built file has one namespace")
            owners[name] = source.path
    stdlib = {imported.bound: imported.meaning
              for source in sources for imported in source.stdlib}
    for source in sources:
        for imported in source.stdlib:
            if imported.bound in owners or stdlib[imported.bound] != imported.meaning:
                raise BuildError(f"{shown(source.path)}: {imported.bound} is bound "
                                 "twice in the built file (an import and another import or "
                                 "definition)")
        for own, names in source.takes:
            missing = sorted(set(names) - by_path[own].defines)
            if missing:
                raise BuildError(f"{shown(source.path)} imports {', '.join(missing)} from "
                                 f"{shown(own)}, which does not bind them")


def isort_key(name: str) -> tuple[int, str]:
    """ruff's order within ``from x import``: CONSTANTS, then Classes, then the rest."""
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, name


def import_lines(imports: list[StdlibImport]) -> list[str]:
    """The standard-library imports of the whole file, merged and sorted as ruff sorts them."""
    plain = sorted({(i.module, i.alias) for i in imports if i.name is None})
    lines = [f"import {module}" + (f" as {alias}" if alias else "") for module, alias in plain]
    modules: dict[str, set[str]] = {}
    for imported in imports:
        if imported.name is not None:
            shown = imported.name + (f" as {imported.alias}" if imported.alias else "")
            modules.setdefault(imported.module, set()).add(shown)
    for module in sorted(modules):
        names = sorted(modules[module], key=isort_key)
        line = f"from {module} import {', '.join(names)}"
        if len(line) > LINE_LENGTH:
            line = f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")"
        lines.append(line)
    return lines


def section(source: Source) -> str:
    """A module's text in the built file, under a comment naming it and saying why it is."""
    name = source.path.relative_to(COLLECTION).as_posix() \
        if source.path.is_relative_to(COLLECTION) else shown(source.path)
    said = [f"# {line}".rstrip() for line in source.docstring.strip().splitlines()]
    return "\n".join([f"# ---- {name}", *said]) + "\n\n\n" + source.body


def build(entry: Path = PACKAGE / ENTRY) -> str:
    """The one file: shebang, the entry's docstring, the imports, every module in order."""
    sources = in_order(entry)
    check_namespace(sources)
    main = sources[-1]
    imports = [imported for source in sources for imported in source.stdlib]
    head = ["#!/usr/bin/env python3", main.docstring_text, "", BANNER, "",
            "from __future__ import annotations", "", *import_lines(imports)]
    parts = [section(source) for source in sources[:-1]] + [main.body]
    return "\n".join(head) + "\n\n" + "\n\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Join the box program's package into "
                                                 f"{TARGET.relative_to(ROOT)}.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the committed file is not a fresh build")
    args = parser.parse_args(argv)
    try:
        built = build()
    except BuildError as error:
        print(f"build_box_program: {error}", file=sys.stderr)
        return 2
    current = TARGET.read_text(encoding="utf-8") if TARGET.is_file() else ""
    if args.check:
        if current != built:
            print(f"{TARGET.relative_to(ROOT)} is not a fresh build of its sources: run "
                  "make box-program", file=sys.stderr)
            return 1
        return 0
    if current != built:
        TARGET.write_text(built, encoding="utf-8")
        TARGET.chmod(0o755)
        print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
