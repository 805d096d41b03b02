"""install_set.py as a box runs it: a separate python3 process, its exit codes and its output."""

from __future__ import annotations

import json
import subprocess
import sys

from .helpers import BEARERS, FLEET_KEY, INSTALL_SET, payload, server_entry


def run_cli(box, *args, stdin: str | None = None, **env):
    return subprocess.run([sys.executable, str(INSTALL_SET), *args], env=box.env(**env),
                          input=stdin, capture_output=True, text=True, timeout=60, check=False)


def test_help_documents_the_exit_codes_and_the_environment(box):
    done = run_cli(box, "--help")
    assert done.returncode == 0
    for text in ("--payload", "--dry-run", "--json", "--no-handover", "LLMAO_URL", "FLEET_KEY",
                 "LLMAO_HOST", "DATA_DIRECTORY", "SUPERVISOR_CONF_DIR", "VLLM_BIN",
                 "0  done", "1  the assignment does not fit", "2  refused",
                 "3  llmao unreachable", "4  programs written"):
        assert text in done.stdout


def test_the_module_docstring_documents_the_exit_codes_too(install_set):
    for code in ("0  done", "1  the assignment does not fit", "2  refused", "3  llmao unreachable",
                 "4  programs written"):
        assert code in install_set.__doc__


def test_a_payload_run_then_a_rerun(box):
    path = box.write_payload(payload(server_entry(0, vram_gb=18, max_model_len=8192)))
    first = run_cli(box, "--payload", str(path))
    assert first.returncode == 0, first.stderr
    assert f"wrote {box.program('model-0')}" in first.stdout
    second = run_cli(box, "--payload", str(path))
    assert second.returncode == 0
    assert "unchanged" in second.stdout
    assert box.ctl_calls() == ["reread", "update"]
    for done in (first, second):
        assert not any(bearer in done.stdout + done.stderr for bearer in BEARERS)


def test_a_payload_from_standard_input(box):
    done = run_cli(box, "--payload", "-", "--json", "--no-handover",
                   stdin=json.dumps(payload(server_entry(0))))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["written"][0] == str(box.program("model-0"))


def test_a_box_too_small_exits_1(box):
    box.gpu(total_mib=8192, free_mib=8192)
    done = run_cli(box, "--payload", str(box.write_payload(payload(server_entry(0, vram_gb=9)))))
    assert done.returncode == 1
    assert "the weights do not fit" in done.stderr


def test_fetch_over_tls_with_the_ca_from_the_environment(box, local_ca, llmao_tls):
    llmao_tls.script("/vllm/config", (200, payload(server_entry(0))))
    llmao_tls.script("/vllm/applied", (200, {}))
    env = {"LLMAO_URL": llmao_tls.url, "FLEET_KEY": FLEET_KEY, "LLMAO_HOST": "203.0.113.10",
           "SSL_CERT_FILE": str(local_ca.ca_file)}
    done = run_cli(box, **env)
    assert done.returncode == 0, done.stderr
    assert [seen.path for seen in llmao_tls.seen] == ["/vllm/config", "/vllm/applied"]
    assert FLEET_KEY not in done.stdout + done.stderr
    del env["SSL_CERT_FILE"]
    refused = run_cli(box, **env)
    assert refused.returncode == 2 and "TLS verification failed" in refused.stderr


def test_unreachable_llmao_exits_3(box):
    done = run_cli(box, LLMAO_URL="http://127.0.0.1:9", FLEET_KEY=FLEET_KEY)
    assert done.returncode == 3
    assert FLEET_KEY not in done.stdout + done.stderr
