"""The Supervisor program of one server: exact text, quoting, escaping, read back by Supervisor."""

from __future__ import annotations

import shlex
import stat
from decimal import Decimal

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from .helpers import BEARERS, payload, server_entry

GOLDEN = """\
; managed by llmao install_set.py: changes are overwritten
[program:gemma4-26b]
command=vllm serve google/gemma-4-26b-it --host 0.0.0.0 --port 8001 --served-model-name \
gemma4-26b --gpu-memory-utilization 0.745 --max-model-len 32768 --reasoning-parser gemma
environment=VLLM_API_KEY="sk-vllm-TESTbearerONE_abc",HF_HOME="/data/hf"
autostart=true
autorestart=true
startsecs=10
startretries=5
stopsignal=TERM
stopwaitsecs=60
stopasgroup=true
killasgroup=true
stdout_logfile=/data/logs/gemma4-26b.log
stdout_logfile_maxbytes=50MB
stdout_logfile_backups=5
redirect_stderr=true
"""


@pytest.fixture
def box_settings(install_set):
    return install_set.read_settings({}, fetching=False)


def one_server(install_set, **overrides):
    entry = server_entry(0, **overrides)
    return install_set.validate_assignment(payload(entry)).servers[0]


def test_the_program_of_one_server_is_exactly_this(install_set, box_settings):
    server = one_server(install_set, name="gemma4-26b", model="google/gemma-4-26b-it",
                        served_model_name="gemma4-26b", args=["--reasoning-parser", "gemma"],
                        max_model_len=32768)
    assert install_set.render_program(server, Decimal("0.745"), box_settings) == GOLDEN


def test_rendering_is_deterministic(install_set, box_settings):
    server = one_server(install_set, args="--x 'b c' %x", max_model_len=4096)
    texts = {install_set.render_program(server, Decimal("0.5"), box_settings) for _ in range(3)}
    assert len(texts) == 1


def test_without_a_utilization_or_max_model_len_their_flags_are_absent(install_set,
                                                                         box_settings):
    text = install_set.render_program(one_server(install_set), None, box_settings)
    assert "--gpu-memory-utilization" not in text and "--max-model-len" not in text


def test_the_bearer_is_only_in_the_environment(install_set, box_settings):
    text = install_set.render_program(one_server(install_set), Decimal("0.9"), box_settings)
    (command,) = [line for line in text.splitlines() if line.startswith("command=")]
    (environment,) = [line for line in text.splitlines() if line.startswith("environment=")]
    assert BEARERS[0] not in command and "--api-key" not in command
    assert f'VLLM_API_KEY="{BEARERS[0]}"' in environment
    assert text.count(BEARERS[0]) == 1


@pytest.mark.parametrize("arg, written", [
    ("plain", "plain"),
    ("with space", "'with space'"),
    ("it's", "'it'\"'\"'s'"),
    ('say "hi"', "'say \"hi\"'"),
    ("", "''"),
    ("a ;b", "'a '\\;b"),
    ("#x", "\\#x"),
    ("50%", "50%"),
])
def test_each_argument_is_quoted_for_supervisor(install_set, arg, written):
    assert install_set.supervisor_quote(arg) == written


def test_percent_is_doubled_where_supervisor_expands(install_set, tmp_path):
    settings = install_set.read_settings({"VLLM_BIN": "/opt/v%llm/bin/vllm"}, fetching=False)
    server = one_server(install_set, api_key="sk-vllm-100%", args=["--x", "50%"])
    text = install_set.render_program(server, None, settings)
    assert "command=/opt/v%%llm/bin/vllm serve" in text and " --x 50%%" in text
    assert 'VLLM_API_KEY="sk-vllm-100%%"' in text


# --------------------------------------------------------------------------- Supervisor reads it

@pytest.fixture(scope="module")
def supervisor_options():
    """Supervisor's own config reader (a test dependency, not the box program's)."""
    return pytest.importorskip("supervisor.options")


@pytest.fixture(scope="module")
def data_settings(install_set, tmp_path_factory):
    """Settings whose log folder exists: Supervisor checks it while reading a program."""
    data = tmp_path_factory.mktemp("data")
    (data / "logs").mkdir()
    return install_set.read_settings({"DATA_DIRECTORY": str(data)}, fetching=False)


def read_back(supervisor_options, text: str, name: str):
    """Parse a program as supervisord does and return its argv and environment."""
    parser = supervisor_options.UnhosedConfigParser()
    parser.read_string(text)
    (config,) = supervisor_options.ServerOptions().processes_from_section(
        parser, f"program:{name}", name)
    return config, shlex.split(config.command)


def test_supervisor_reads_the_program_as_meant(install_set, supervisor_options, data_settings):
    server = one_server(install_set, name="gemma4-26b", args=["--reasoning-parser", "gemma"])
    text = install_set.render_program(server, Decimal("0.745"), data_settings)
    config, argv = read_back(supervisor_options, text, "gemma4-26b")
    data = data_settings.data_dir
    assert argv == install_set.vllm_argv(server, Decimal("0.745"), "vllm")
    assert config.environment == {"VLLM_API_KEY": BEARERS[0], "HF_HOME": f"{data}/hf"}
    assert config.stdout_logfile == f"{data}/logs/gemma4-26b.log"
    assert config.redirect_stderr and config.stopasgroup and config.killasgroup
    assert config.autostart and config.startsecs == 10


@settings(max_examples=300, deadline=None)
# Controls, format characters, line separators and anything vLLM could read as --api-key
# are refused before rendering; every other character must come back as written.
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc", "Cf", "Zl", "Zp")),
                        max_size=12).filter(lambda arg: "--a" not in arg), max_size=5),
       st.sampled_from(["sk-vllm-abc_DEF-123", "legacy;key#%&!~", "k"]))
@example(["a ;b", "#c", " # ", "%(here)s", "'\"", "\\", "", "--x=1;2", "\xa0;\u3000#"],
         "sk-vllm-abc")
def test_any_argument_survives_supervisor_unchanged(install_set, supervisor_options,
                                                     data_settings, args, api_key):
    try:
        server = one_server(install_set, args=args, api_key=api_key)
    except install_set.Refused as refused:
        # A parallel size the recipe does not set as `gpus` is refused at load (and by the
        # box): such args never reach a program. Any other refusal is a failure here.
        if not any(word in str(refused) for word in ("-tp", "-pp", "parallel")):
            raise
        assume(False)
        return
    text = install_set.render_program(server, None, data_settings)
    config, argv = read_back(supervisor_options, text, "model-0")
    assert argv == install_set.vllm_argv(server, None, "vllm")
    assert config.environment["VLLM_API_KEY"] == api_key


def test_programs_are_written_mode_0600(box, run_main):
    outcome = run_main("--payload", str(box.write_payload(payload(server_entry(0)))))
    assert outcome.rc == 0, outcome.err
    assert stat.S_IMODE(box.program("model-0").stat().st_mode) == 0o600
    assert stat.S_IMODE(box.record.stat().st_mode) == 0o644
    assert (box.data / "logs").is_dir() and (box.data / "hf").is_dir()
    assert not [path for path in box.conf.iterdir() if path.name.startswith(".")], \
        "no temp file may be left behind"
