"""The follow program: written when a fetched payload carries ``rollout``, and only then.

Its file is 0600 with the marker line, carries the box program's environment (the fleet key
too, so it is never printed), does not depend on the revision, and Supervisor's own reader
gets back exactly the command and environment meant. The payload's ``rollout`` is checked
like every other key.
"""

from __future__ import annotations

import json
import shlex
import stat
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from .follow_llmao import ROLLOUT, following
from .helpers import FLEET_KEY, INSTALL_SET, payload, server_entry

FOLLOW = "llmao-follow.conf"


def fetch_and_apply(contract, run_main, doc, *flags):
    contract.intended = doc
    return run_main(*flags)


def test_a_fetched_payload_with_rollout_writes_the_follow_program(box, contract, run_main):
    outcome = fetch_and_apply(contract, run_main, following(server_entry(0), revision="rev-1"))
    assert outcome.rc == 0, outcome.err
    path = box.conf / FOLLOW
    text = path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = text.splitlines()
    assert lines[0].startswith("; managed by llmao install_set.py")
    assert lines[1] == "[program:llmao-follow]"
    assert lines[2] == f"command={sys.executable} {INSTALL_SET.resolve()} --follow"
    assert f'FLEET_KEY="{FLEET_KEY}"' in text and f'LLMAO_URL="{contract.url}"' in text
    assert f"stdout_logfile={box.data}/llmao/follow.log" in text
    assert f"wrote {path}" in outcome.out
    assert FLEET_KEY not in outcome.text
    assert json.loads(box.record.read_text())["rollout"] == ROLLOUT


def test_its_text_does_not_depend_on_the_revision(box, contract, run_main):
    assert fetch_and_apply(contract, run_main, following(server_entry(0), revision="rev-1")).rc \
        == 0
    path = box.conf / FOLLOW
    before = (path.stat().st_ino, path.read_bytes())
    changed = following(server_entry(0, max_model_len=2048), server_entry(1), revision="rev-2",
                        follow_s=5.0, drain_s=0.0)
    assert fetch_and_apply(contract, run_main, changed).rc == 0
    assert (path.stat().st_ino, path.read_bytes()) == before


def test_without_rollout_there_is_no_follow_program_and_an_earlier_one_goes(
        box, contract, run_main):
    assert fetch_and_apply(contract, run_main, following(server_entry(0), revision="rev-1")).rc \
        == 0
    outcome = fetch_and_apply(contract, run_main, payload(server_entry(0), revision="rev-2"))
    assert outcome.rc == 0, outcome.err
    assert not (box.conf / FOLLOW).exists()
    assert f"removed {box.conf / FOLLOW}" in outcome.out
    assert "rollout" not in json.loads(box.record.read_text())


def test_a_given_payload_never_writes_the_follow_program(box, contract, run_main):
    assert fetch_and_apply(contract, run_main, following(server_entry(0), revision="rev-1")).rc \
        == 0
    given_doc = box.write_payload(following(server_entry(0), revision="rev-1"))
    outcome = run_main("--payload", str(given_doc))
    assert outcome.rc == 0, outcome.err
    assert not (box.conf / FOLLOW).exists(), "--payload: the push path does not follow"
    assert box.program("model-0").exists()


def test_a_dry_run_shows_it_with_the_key_masked_and_writes_nothing(box, contract, run_main):
    outcome = fetch_and_apply(contract, run_main, following(server_entry(0), revision="rev-1"),
                              "--dry-run")
    assert outcome.rc == 0, outcome.err
    assert f"would write {box.conf / FOLLOW}" in outcome.out
    assert '+environment=LLMAO_URL="' in outcome.out and 'FLEET_KEY="***"' in outcome.out
    assert FLEET_KEY not in outcome.text
    assert list(box.conf.iterdir()) == []
    as_json = fetch_and_apply(contract, run_main, following(server_entry(0), revision="rev-1"),
                              "--dry-run", "--json")
    diff = {entry["path"]: entry["after"] for entry in as_json.json()["diff"]}
    assert 'FLEET_KEY="***"' in diff[str(box.conf / FOLLOW)]
    assert FLEET_KEY not in as_json.text
    programs = {entry["name"]: entry["file"] for entry in as_json.json()["programs"]}
    assert programs == {"model-0": "added", "llmao-follow": "added"}


# --------------------------------------------------------------------------- Supervisor reads it

@pytest.fixture(scope="module")
def supervisor_options():
    """Supervisor's own config reader (a test dependency, not the box program's)."""
    return pytest.importorskip("supervisor.options")


def read_back(supervisor_options, text: str):
    parser = supervisor_options.UnhosedConfigParser()
    parser.read_string(text)
    (config,) = supervisor_options.ServerOptions().processes_from_section(
        parser, "program:llmao-follow", "llmao-follow")
    return config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A data directory whose log folder exists: Supervisor checks it while reading."""
    data = tmp_path_factory.mktemp("data")
    (data / "llmao").mkdir()
    return data


def follow_settings(install_set, data_dir, **environ: str):
    return install_set.read_settings({"DATA_DIRECTORY": str(data_dir), **environ},
                                     fetching=False)


def test_supervisor_reads_the_follow_program_as_meant(install_set, supervisor_options,
                                                      data_dir):
    environ = {"LLMAO_URL": "https://llmao.example:8443", "FLEET_KEY": FLEET_KEY,
               "LLMAO_HOST": "203.0.113.10", "SUPERVISOR_CONF_DIR": "/etc/supervisor/conf.d",
               "VLLM_BIN": "/opt/v%llm/bin/vllm", "VLLM_HOST": "127.0.0.2",
               "SSL_CERT_FILE": "/etc/ssl/ca one.pem", "PATH": "/usr/local/bin:/usr/bin",
               "UNRELATED": "not carried"}
    settings_ = follow_settings(install_set, data_dir, **environ)
    config = read_back(supervisor_options, install_set.render_follow_program(settings_))
    assert shlex.split(config.command) == install_set.follow_argv()
    del environ["UNRELATED"]
    assert config.environment == {**environ, "DATA_DIRECTORY": str(data_dir)}
    assert config.stdout_logfile == f"{data_dir}/llmao/follow.log"
    assert config.autorestart and not config.stopasgroup and config.startsecs == 5


fleet_keys = st.from_regex(r"[!-~]([ -~]{0,20}[!-~])?\Z", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(fleet_keys)
@example('k;ey#with%"quote')
@example("it's ; not")
@example("'quoted'")
def test_any_fleet_key_is_carried_unchanged_or_refused_by_name(install_set, supervisor_options,
                                                              data_dir, key):
    settings_ = follow_settings(install_set, data_dir, FLEET_KEY=key)
    try:
        text = install_set.render_follow_program(settings_)
    except install_set.Refused as refused:
        assert str(refused).startswith("FLEET_KEY cannot be carried to the follow program")
        return
    assert read_back(supervisor_options, text).environment["FLEET_KEY"] == key


@pytest.mark.parametrize("key", ["sk-fleet-0123abcDEF_-", "a;b#c%d", 'with"quote', "it's",
                                 "two words", "100%"])
def test_usual_fleet_keys_are_carried(install_set, supervisor_options, data_dir, key):
    settings_ = follow_settings(install_set, data_dir, FLEET_KEY=key)
    config = read_back(supervisor_options, install_set.render_follow_program(settings_))
    assert config.environment["FLEET_KEY"] == key


# --------------------------------------------------------------------------- the rule

@pytest.mark.parametrize("rollout, where", [
    ({"follow_s": 30}, "assignment.rollout: must be an object with exactly follow_s and drain_s"),
    ({**ROLLOUT, "max_unavailable": 1}, "assignment.rollout: must be an object"),
    ([30, 5], "assignment.rollout: must be an object"),
    (None, "assignment.rollout: must be an object"),
    ({"follow_s": 0.5, "drain_s": 5}, "assignment.rollout.follow_s: must be a finite number "
                                      "from 1 to 86400"),
    ({"follow_s": 86401, "drain_s": 5}, "assignment.rollout.follow_s"),
    ({"follow_s": True, "drain_s": 5}, "assignment.rollout.follow_s"),
    ({"follow_s": "30", "drain_s": 5}, "assignment.rollout.follow_s"),
    ({"follow_s": 30, "drain_s": -1}, "assignment.rollout.drain_s: must be a finite number "
                                      "from 0 to 3600"),
    ({"follow_s": 30, "drain_s": 1e400}, "assignment.rollout.drain_s"),
])
def test_a_malformed_rollout_is_refused_naming_the_key(install_set, rollout, where):
    doc = {**payload(server_entry(0)), "rollout": rollout}
    with pytest.raises(install_set.Refused, match=f"^{where}"):
        install_set.validate_assignment(doc)


def test_the_rollout_bounds_are_accepted(install_set):
    doc = {**payload(server_entry(0)), "rollout": {"follow_s": 1, "drain_s": 0}}
    assert install_set.validate_assignment(doc).rollout == install_set.Rollout(1.0, 0.0)
    doc["rollout"] = {"follow_s": 86400, "drain_s": 3600}
    assert install_set.validate_assignment(doc).rollout == install_set.Rollout(86400.0, 3600.0)


@pytest.mark.parametrize("name", ["follow", "llmao-follow"])
def test_a_server_named_like_the_follow_program_is_refused_only_while_following(install_set,
                                                                                name):
    doc = payload(server_entry(0, name=name))
    assert install_set.validate_assignment(doc).servers[0].name == name
    with pytest.raises(install_set.Refused, match=r"^servers\[0\]\.name: .* follow program"):
        install_set.validate_assignment({**doc, "rollout": dict(ROLLOUT)})


def test_follow_runs_alone(box, run_main, capsys):
    with pytest.raises(SystemExit) as refused:
        run_main("--follow", "--payload", "x.json")
    assert refused.value.code == 2
    assert "--follow runs alone" in capsys.readouterr().err


def test_follow_needs_what_a_fetch_needs(box, run_main):
    outcome = run_main("--follow")
    assert outcome.rc == 2 and "LLMAO_URL is not set" in outcome.err
