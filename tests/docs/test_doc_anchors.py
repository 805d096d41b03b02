"""Every link to a heading of a doc lands on one: pages get reordered and moved (the
benchmark history left docs/metrics.md for bench/README.md), and a link to a heading that is
gone opens the page at its top with no word that the section moved."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "bench" / "README.md"]
LINK = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")


def heading_anchor(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's rule) gives a heading: lower case, punctuation
    other than '-' and '_' dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return {heading_anchor(heading) for heading in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}


def test_heading_anchor_follows_the_renderers_rule() -> None:
    assert heading_anchor("llmao-server's own metrics (`GET /metrics`)") == \
        "llmao-servers-own-metrics-get-metrics"
    assert heading_anchor("Verdicts (in the core, `module_utils/server_load.py`)") == \
        "verdicts-in-the-core-module_utilsserver_loadpy"


def test_every_link_to_a_heading_finds_it() -> None:
    broken = []
    for page in PAGES:
        for target, anchor in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            linked = (page.parent / target).resolve() if target else page
            if not linked.is_file() or anchor not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert not broken, broken
