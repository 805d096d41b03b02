"""The box program is built from its package into the one file a box fetches.

``scripts/build_box_program.py`` joins ``roles/vllm_box/files/box_program/`` and the core
modules it imports into ``install_set.py``, which is committed: a source changed without a
build must fail here, not on a box. The built file must run where a box runs it, on the
standard library alone, and the build must refuse sources that the one file could not hold.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils import box_protocol
from scripts.build_box_program import PACKAGE, TARGET, BuildError, build

from .helpers import payload, server_entry


def test_the_committed_program_is_a_fresh_build_of_its_sources():
    assert TARGET.read_text(encoding="utf-8") == build(), \
        "install_set.py is stale: run make box-program and commit it"


def test_the_program_carries_the_cores_wire_facts_as_they_are(install_set):
    facts = {name for name in vars(box_protocol) if name.isupper()}
    assert facts >= {"CONFIG_PATH", "TOKEN_HEADER", "BOX_TOKEN_RE", "MAX_LEAF_DAYS",
                     "INSTANCE_ENV"}
    assert {name: getattr(install_set, name) for name in facts} == \
        {name: getattr(box_protocol, name) for name in facts}


def bare_python(*args: str, cwd: Path,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The built file under ``python3 -I -S``: no site-packages, no PYTHONPATH, no user site,
    as a stock image's interpreter would run it with nothing of ours installed."""
    return subprocess.run([sys.executable, "-I", "-S", str(TARGET), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_built_program_runs_on_the_standard_library_alone(tmp_path: Path):
    probe = subprocess.run([sys.executable, "-I", "-S", "-c", "import ansible_collections"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert probe.returncode != 0, "the core is importable here: this run proves nothing"
    helped = bare_python("--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "exit codes:" in helped.stdout


def test_the_built_program_plans_a_payload_on_the_standard_library_alone(box, tmp_path: Path):
    """The dry path: the whole program (validation, cards, placement, rendering, the plan)."""
    doc = tmp_path / "payload.json"
    doc.write_text(json.dumps(payload(server_entry(0))), encoding="utf-8")
    box.gpu(81559, 80000)
    done = bare_python("--payload", str(doc), "--dry-run", "--no-handover", "--json",
                       cwd=tmp_path, env=box.env())
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["dry_run"] is True and answer["changed"] is True
    assert [program["name"] for program in answer["programs"]] == ["model-0"]


def write_package(folder: Path, modules: dict[str, str]) -> Path:
    for name, text in modules.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder / "__main__.py"


@pytest.mark.parametrize(("modules", "refusal"), [
    ({"__main__.py": "import yaml\n"}, "yaml is not in the standard library"),
    ({"__main__.py": "from .a import A\nB = 1\n", "a.py": "A = 1\nB = 2\n"},
     "B is bound by both"),
    ({"__main__.py": "from .a import A\n", "a.py": "from .b import B\nA = 1\n",
      "b.py": "from .a import A\nB = 2\n"}, "cycle: a.py -> b.py -> a.py"),
    ({"__main__.py": "from .a import A as AA\n", "a.py": "A = 1\n"}, "no alias"),
    ({"__main__.py": "from .a import C\n", "a.py": "A = 1\n"}, "which does not bind them"),
    ({"__main__.py": "import json\nfrom .a import A\n", "a.py": "json = 1\nA = 2\n"},
     "json is bound twice"),
])
def test_the_build_refuses_what_one_file_cannot_hold(tmp_path: Path, modules, refusal):
    with pytest.raises(BuildError, match=refusal):
        build(write_package(tmp_path, modules))


def test_the_build_orders_each_module_after_those_it_imports(tmp_path: Path):
    entry = write_package(tmp_path, {
        "__main__.py": '"""The program."""\n\nfrom .b import B\n\nRESULT = B * 10\n',
        "b.py": '"""B, made of A."""\n\nfrom .a import A\n\nB = A + 1\n',
        "a.py": '"""A."""\n\nimport os\n\nA = len(os.sep)\n'})
    built = build(entry)
    assert built.index("A = len(os.sep)") < built.index("B = A + 1") < built.index("RESULT =")
    assert built.startswith('#!/usr/bin/env python3\n"""The program."""\n')
    namespace: dict[str, object] = {}
    exec(compile(built, "built", "exec"), namespace)  # noqa: S102 - the test's own text
    assert namespace["RESULT"] == 20


def test_the_sources_are_a_package_of_small_modules():
    sizes = {path.name: len(path.read_text(encoding="utf-8").splitlines())
             for path in PACKAGE.glob("*.py")}
    assert "__main__.py" in sizes and len(sizes) > 10
    assert max(sizes.values()) <= 900, sizes
