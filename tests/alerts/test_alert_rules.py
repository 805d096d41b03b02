"""The shipped alert rules are valid and fire when, and only when, their unit tests say.

``promtool`` (Debian's ``prometheus`` package) checks the rules and runs
``docs/alerts/llmao-rules.test.yml``, whose series are written as llmao-server's
``/metrics`` writes them. A rule edited without its test fails here.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ALERTS = Path(__file__).resolve().parents[2] / "docs" / "alerts"
RULES, RULE_TESTS = ALERTS / "llmao-rules.yml", ALERTS / "llmao-rules.test.yml"
PROMTOOL = shutil.which("promtool")
TIMEOUT_S = 120

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed "
                                "(apt-get install prometheus)")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL or "promtool", *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)


def test_the_rules_are_valid() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 18 rules found" in checked.stdout


def test_the_rules_pass_their_unit_tests() -> None:
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_rule_that_fires_too_early_fails_its_unit_test(tmp_path: Path) -> None:
    """The control: the unit tests notice a changed ``for``."""
    (tmp_path / RULES.name).write_text(RULES.read_text().replace("for: 10m", "for: 5m", 1))
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    tested = promtool("test", "rules", str(tmp_path / RULE_TESTS.name))
    assert tested.returncode != 0
    assert "LlmaoServerStalled" in tested.stdout + tested.stderr
