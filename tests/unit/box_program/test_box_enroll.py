"""Enrollment (docs/box-identity.md): the box presents LLMAO_BOOTSTRAP_TOKEN once, on the fetch
that binds its name, and keeps the box token it buys; the bootstrap token is never printed,
written, handed to the follow program, or spent by a dry run, and each refusal of a binding is
one line, exit 2, nothing written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import point_box_at
from .follow_llmao import following
from .helpers import BOX, FakeLlmao, Seen, payload, server_entry
from .test_box_follow import Clock, Stop

CONFIG = "/vllm/config"
APPLIED = "/vllm/applied"
BOOTSTRAP = "B" * 20 + "-boot_" + "st" * 10
TOKEN = "T" * 43
BOOTSTRAP_HEADER = "x-llmao-bootstrap-token"


class EnrollingLlmao(FakeLlmao):
    """llmao under ``fleet.binding: enrolled``: a fetch presenting the bootstrap token binds the
    name and gets the box token; the box token admits every later call; anything else is
    403 box_not_enrolled."""

    doc: dict = payload(server_entry(0))

    def answer(self, request: Seen) -> tuple[int, bytes, dict[str, str]]:
        enrolling = request.path == CONFIG and request.headers.get(BOOTSTRAP_HEADER) == BOOTSTRAP
        if not enrolling and request.headers.get("x-llmao-box-token") != TOKEN:
            return 403, refused("box_not_enrolled"), {}
        body = json.dumps(self.doc if request.path == CONFIG else {}).encode()
        return 200, body, {"X-LLMAO-Box-Token": TOKEN} if enrolling else {}


def refused(code: str) -> bytes:
    return json.dumps({"error": {"message": "no", "type": "permission_error",
                                 "code": code}}).encode()


@pytest.fixture
def enrolling(box, monkeypatch) -> Iterator[EnrollingLlmao]:
    with EnrollingLlmao().serve() as fake:
        point_box_at(fake, monkeypatch)
        monkeypatch.setenv("LLMAO_BOOTSTRAP_TOKEN", BOOTSTRAP)
        yield fake


def files_holding(folder: Path, text: str) -> list[Path]:
    return [path for path in folder.rglob("*")
            if path.is_file() and text.encode() in path.read_bytes()]


def test_the_bootstrap_token_binds_on_the_first_fetch_and_the_box_token_is_kept(enrolling,
                                                                               box, run_main):
    first = run_main()
    assert first.rc == 0, first.err
    (fetch,) = enrolling.requests_to(CONFIG)
    assert fetch.headers[BOOTSTRAP_HEADER] == BOOTSTRAP
    assert "x-llmao-box-token" not in fetch.headers
    (report,) = enrolling.requests_to(APPLIED)
    assert BOOTSTRAP_HEADER not in report.headers and report.headers["x-llmao-box-token"] == TOKEN
    assert (box.data / "llmao" / "box-token").read_text().strip() == TOKEN
    assert f"enrolled: llmao bound {BOX} to this box" in first.out
    again = run_main()
    assert again.rc == 0, again.err
    refetch = enrolling.requests_to(CONFIG)[-1]
    assert BOOTSTRAP_HEADER not in refetch.headers, "a box that keeps a token never spends one"
    assert refetch.headers["x-llmao-box-token"] == TOKEN
    assert BOOTSTRAP not in first.text + again.text


def test_the_bootstrap_token_is_written_nowhere_and_never_given_to_the_follow_program(
        enrolling, box, run_main, install_set, monkeypatch):
    enrolling.doc = following(server_entry(0), revision="rev-0001")
    outcome = run_main()
    assert outcome.rc == 0, outcome.err
    follow_program = box.program("follow").read_text()
    assert "FLEET_KEY=" in follow_program and "LLMAO_BOOTSTRAP_TOKEN" not in follow_program
    assert files_holding(box.root, BOOTSTRAP) == []
    assert "LLMAO_BOOTSTRAP_TOKEN" not in dict(
        install_set.read_settings({**box.env(), "LLMAO_BOOTSTRAP_TOKEN": BOOTSTRAP,
                                   "LLMAO_URL": enrolling.url, "FLEET_KEY": "k"},
                                  fetching=True).follow_env)


def test_the_follow_program_never_presents_it_even_when_its_environment_has_it(
        enrolling, box, install_set, capsys):
    """supervisord may hand the follow program the image's environment, bootstrap token and
    all; with no box token kept (a lost file), its checks still go without it."""
    enrolling.doc = following(server_entry(0), revision="rev-0001")
    settings = install_set.read_settings(dict(box.env(), LLMAO_URL=enrolling.url,
                                              FLEET_KEY="k", LLMAO_BOOTSTRAP_TOKEN=BOOTSTRAP),
                                         fetching=True)
    clock = Clock(stop_at=2)
    follower = install_set.Follower(settings, install_set.Console(False, stamped=True),
                                    sleep=clock.sleep, uniform=clock.uniform)
    with pytest.raises(Stop):
        follower.run()
    assert enrolling.requests_to(CONFIG), capsys.readouterr()
    assert all(BOOTSTRAP_HEADER not in seen.headers for seen in enrolling.seen)
    assert BOOTSTRAP not in "".join(capsys.readouterr())


def test_a_dry_run_never_spends_it(enrolling, box, run_main):
    outcome = run_main("--dry-run")
    assert outcome.rc == 2
    assert "dry run: LLMAO_BOOTSTRAP_TOKEN is not presented" in outcome.out
    assert all(BOOTSTRAP_HEADER not in seen.headers for seen in enrolling.seen)
    assert "box_not_enrolled" in outcome.err and BOOTSTRAP not in outcome.text
    assert box.snapshot() == {}


@pytest.mark.parametrize("value", [
    "short", "B" * 31, "B" * 129, "B" * 40 + "/+=", "B" * 40 + " B", "B" * 40 + "é"])
def test_a_malformed_bootstrap_token_is_refused_before_any_call(enrolling, box, run_main,
                                                                monkeypatch, value):
    monkeypatch.setenv("LLMAO_BOOTSTRAP_TOKEN", value)
    outcome = run_main()
    assert outcome.rc == 2
    (line,) = outcome.err.strip().splitlines()
    assert line.startswith("install_set: LLMAO_BOOTSTRAP_TOKEN is not a bootstrap token")
    assert value not in outcome.text
    assert enrolling.seen == [] and box.snapshot() == {}


@pytest.mark.parametrize("code, says", [
    ("box_not_enrolled", "the fleet binds names only through enrollment: ask an admin for a "
                         f"bootstrap token (llmao-server enroll {BOX} --ttl 1h) and set "
                         "LLMAO_BOOTSTRAP_TOKEN"),
    ("bootstrap_token_invalid", "LLMAO_BOOTSTRAP_TOKEN is not this name's: expired, used "
                                "already"),
    ("box_pending_elsewhere", "another box, from another address, claimed this name a moment "
                              "ago and its binding is pending"),
    ("box_reserved", "the name was released for another provider instance"),
])
def test_each_refusal_of_a_binding_is_one_line_exit_2_and_nothing_written(enrolling, box,
                                                                          run_main, code, says):
    enrolling.answer = lambda request: (403, refused(code), {})
    outcome = run_main()
    assert outcome.rc == 2
    (line,) = outcome.err.strip().splitlines()
    assert f"llmao refused '{BOX}' (403 {code}): {says}" in line
    assert line.endswith("nothing was written (docs/box-identity.md)")
    assert len(enrolling.seen) == 1, "a refusal is not retried"
    assert box.snapshot() == {} and BOOTSTRAP not in outcome.text
