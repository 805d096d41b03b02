"""The box token (docs/box-identity.md): kept 0600 where it survives restarts, presented on
every call, never stored by a dry run; a name bound to another box is one line, nothing written."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator

import pytest

from .conftest import point_box_at
from .helpers import BOX, FakeLlmao, Seen, payload, server_entry

CONFIG = "/vllm/config"
APPLIED = "/vllm/applied"
TOKEN = "T" * 20 + "-tok_" + "en" * 10
OTHER = "O" * 43


class IssuingLlmao(FakeLlmao):
    """Hands out ``issue`` in the token header of every answer to a fetch."""

    issue: str | None = None

    def answer(self, request: Seen) -> tuple[int, bytes, dict[str, str]]:
        status, body = self.next_answer(request.path)
        issued = {"X-LLMAO-Box-Token": self.issue} if request.path == CONFIG and self.issue \
            else {}
        return status, body, issued


@pytest.fixture
def issuing(box, monkeypatch) -> Iterator[IssuingLlmao]:
    with IssuingLlmao().serve() as fake:
        point_box_at(fake, monkeypatch)
        fake.script(CONFIG, (200, payload(server_entry(0))))
        fake.script(APPLIED, (200, {}))
        yield fake


def token_file(box):
    return box.data / "llmao" / "box-token"


def test_a_token_handed_out_is_kept_0600_and_presented_on_the_next_call(issuing, box,
                                                                         run_main):
    issuing.issue = TOKEN
    outcome = run_main()
    assert outcome.rc == 0, outcome.err
    assert token_file(box).read_text().strip() == TOKEN
    assert stat.S_IMODE(token_file(box).stat().st_mode) == 0o600
    (fetch,) = issuing.requests_to(CONFIG)
    assert "x-llmao-box-token" not in fetch.headers
    (report,) = issuing.requests_to(APPLIED)
    assert report.headers["x-llmao-box-token"] == TOKEN
    assert TOKEN not in outcome.text


def test_a_kept_token_is_presented_and_a_new_one_replaces_it(issuing, box, run_main):
    token_file(box).parent.mkdir(parents=True)
    token_file(box).write_text(TOKEN + "\n")
    assert run_main().rc == 0
    assert issuing.requests_to(CONFIG)[0].headers["x-llmao-box-token"] == TOKEN
    issuing.issue = OTHER  # the binding was released: llmao binds the name anew
    assert run_main().rc == 0
    assert token_file(box).read_text().strip() == OTHER


def test_a_dry_run_presents_a_kept_token_and_never_stores_one(issuing, box, run_main):
    issuing.issue = TOKEN
    assert run_main("--dry-run").rc == 0
    assert not token_file(box).exists()
    token_file(box).parent.mkdir(parents=True)
    token_file(box).write_text(OTHER)
    assert run_main("--dry-run").rc == 0
    assert issuing.requests_to(CONFIG)[-1].headers["x-llmao-box-token"] == OTHER
    assert token_file(box).read_text() == OTHER


@pytest.mark.parametrize("code", ["box_token_required", "box_token_mismatch"])
def test_a_name_bound_to_another_box_is_one_line_and_nothing_written(issuing, box, run_main,
                                                                     code):
    issuing.script(CONFIG, (403, {"error": {"message": "bound", "type": "permission_error",
                                            "code": code}}))
    outcome = run_main()
    assert outcome.rc == 2
    assert len(outcome.err.strip().splitlines()) == 1
    assert f"'{BOX}'" in outcome.err and "bound to another box" in outcome.err
    assert "release" in outcome.err
    assert not any(box.conf.iterdir()) and not token_file(box).exists()
    assert len(issuing.seen) == 1


def test_the_token_file_and_the_instance_id_come_from_the_environment(issuing, box, run_main,
                                                                      monkeypatch, tmp_path):
    kept = tmp_path / "volume" / "token"
    monkeypatch.setenv("LLMAO_TOKEN_FILE", str(kept))
    monkeypatch.setenv("CONTAINER_ID", "4242")
    issuing.issue = TOKEN
    assert run_main().rc == 0
    assert kept.read_text().strip() == TOKEN
    assert all(seen.headers["x-llmao-box-instance"] == "4242" for seen in issuing.seen)


def test_a_token_file_that_is_not_a_token_is_not_presented(issuing, box, run_main):
    token_file(box).parent.mkdir(parents=True)
    token_file(box).write_text("short\n")
    assert run_main("--dry-run").rc == 0
    assert "x-llmao-box-token" not in issuing.requests_to(CONFIG)[0].headers


def test_the_follow_program_is_given_where_the_token_is(install_set, box, monkeypatch,
                                                        tmp_path):
    monkeypatch.setenv("LLMAO_TOKEN_FILE", str(tmp_path / "token"))
    monkeypatch.setenv("RUNPOD_POD_ID", "pod-1")
    settings = install_set.read_settings(dict(os.environ), fetching=False)
    assert dict(settings.follow_env)["LLMAO_TOKEN_FILE"] == str(tmp_path / "token")
    assert dict(settings.follow_env)["RUNPOD_POD_ID"] == "pod-1"
    assert json.dumps(dict(settings.follow_env))  # plain strings, as environment= takes them
