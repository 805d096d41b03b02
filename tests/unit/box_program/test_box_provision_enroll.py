"""Both provider scripts hand LLMAO_BOOTSTRAP_TOKEN to the box program alone: in its environment,
never on a command line, never printed, and never to supervisord (which would pass it to every
program it runs)."""

from __future__ import annotations

import json

import pytest

from .test_box_provision import RUNPOD_ENV, RUNPOD_PROVISION, VAST_ENV, VAST_PROVISION, Provision

BOOTSTRAP = "Bootstrap-" + "x" * 33
HELD = 'if [ -n "${LLMAO_BOOTSTRAP_TOKEN+set}" ]; then echo "$0 holds the bootstrap token" ' \
       '>> "$CALLS"; fi\n'
RECORDING_INSTALLER = """\
import json, os, sys
with open(os.environ["STUB_RECORD"], "a") as out:
    out.write(json.dumps({"argv": sys.argv[1:],
                          "bootstrap": os.environ.get("LLMAO_BOOTSTRAP_TOKEN")}) + "\\n")
"""

@pytest.fixture
def prov(tmp_path) -> Provision:
    return Provision(tmp_path)


def boot(prov: Provision, script, env: dict[str, str]):
    """Run ``script`` with the recording installer and a supervisord that says whether its
    environment holds the token; what it said, the installer's runs, the tools' calls."""
    prov.installer.write_text(RECORDING_INSTALLER)
    flag = prov.root / "supervisord.up"
    prov.fake("supervisord", f'touch "{flag}"\nCALLS="{prov.calls}"\n{HELD}')
    prov.fake("supervisorctl", f'test -e "{flag}"\n')
    done = prov.run(script, prov.env(**env))
    runs = [json.loads(line) for line in prov.record.read_text().splitlines()] \
        if prov.record.exists() else []
    return done, runs, prov.tool_calls()


@pytest.mark.parametrize("script, env", [(VAST_PROVISION, VAST_ENV),
                                         (RUNPOD_PROVISION, RUNPOD_ENV)],
                         ids=["vast", "runpod"])
def test_the_bootstrap_token_reaches_the_box_program_alone(prov, script, env):
    done, runs, calls = boot(prov, script, {**env, "LLMAO_BOOTSTRAP_TOKEN": BOOTSTRAP})
    assert done.returncode == 0, done.stderr
    (run,) = runs
    assert run["bootstrap"] == BOOTSTRAP and BOOTSTRAP not in json.dumps(run["argv"])
    assert any(call.startswith("supervisord") for call in calls), calls
    assert not [call for call in calls if "holds the bootstrap token" in call]
    assert BOOTSTRAP not in done.stdout + done.stderr


@pytest.mark.parametrize("script, env", [(VAST_PROVISION, VAST_ENV),
                                         (RUNPOD_PROVISION, RUNPOD_ENV)],
                         ids=["vast", "runpod"])
def test_without_one_the_box_program_gets_none(prov, script, env):
    done, runs, _ = boot(prov, script, env)
    assert done.returncode == 0, done.stderr
    assert [run["bootstrap"] for run in runs] == [""]
