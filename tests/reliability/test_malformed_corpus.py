"""R5: every file of the malformed corpus is refused by llmao-server before it serves.

Each corpus file states on its first line the key path its message must name
(``# expect: fleet.hosts.203.0.113.10[1]``). The server is run for real, as an
operator would run it, with the file beside a valid partner.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rig.boxes import free_port

HERE = Path(__file__).parent
CORPUS = sorted((HERE / "malformed").glob("*.yaml"))
SERVER = Path(sys.executable).with_name("llmao-server")
SECRETS = ("corpus-fleet-key", "corpus-salt", "corpus-admin")


def expected_path(corpus_file: Path) -> str:
    first = corpus_file.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{corpus_file.name} has no expect line"
    return first.removeprefix("# expect: ")


def refuse(corpus_file: Path) -> subprocess.CompletedProcess[str]:
    config, models = HERE / "good-config.yaml", HERE / "good-models.yaml"
    if corpus_file.name.startswith("config-"):
        config = corpus_file
    else:
        models = corpus_file
    return subprocess.run(
        [str(SERVER), "--config", str(config), "--models", str(models),
         "--bind", f"127.0.0.1:{free_port()}", "--state", ":memory:"],
        capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def outcomes():
    """Run the whole corpus, two at a time (one per core)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(CORPUS, pool.map(refuse, CORPUS), strict=True))


def test_the_corpus_is_large_enough():
    assert len(CORPUS) >= 30


@pytest.mark.parametrize("corpus_file", CORPUS, ids=lambda p: p.stem)
def test_refused_before_serving(outcomes, corpus_file):
    result = outcomes[corpus_file]
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert str(corpus_file) in result.stderr, "the message names the file"
    assert expected_path(corpus_file) in result.stderr, "the message names the key path"
    assert "Traceback" not in output
    assert "Listening at" not in output and "Booting worker" not in output
    assert not any(secret in output for secret in SECRETS)


def test_the_valid_pair_is_accepted():
    """The partners are valid, so each refusal is the corpus file's own."""
    from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet

    fleet = load_fleet(str(HERE / "good-config.yaml"), str(HERE / "good-models.yaml"))
    assert fleet.assignment("203.0.113.10") is not None
