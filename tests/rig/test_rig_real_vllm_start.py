"""Starts that fail, on the stub and on the real vLLM: both refuse them at once, alike.

A box's Supervisor program fails to start when vLLM exits on its command line; a rollout sees
that turn fail. The stub must fail where the real server fails, or tests would roll changes a
real box refuses. The real refusals are started all at once (each pays vLLM's import, 20 to
60 s) by one module fixture, and so is the dump of the real parser's options the stub's list
(rig/vllm_serve_flags.txt) must equal.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rig import REPO_ROOT
from rig import real_vllm as real
from rig.boxes import STUB_VLLM, free_port

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

FLAGS = REPO_ROOT / "rig" / "vllm_serve_flags.txt"
LIMIT = 4096  # the tiny model's max_position_embeddings (rig/tiny_model.py)
START_TIMEOUT_S = 420.0
STARTS = {
    "unknown-flag": ["--no-such-flag", "3"],
    "misspelt-flag": ["--max-model-length", "512"],
    "above-the-model": ["--max-model-len", str(2 * LIMIT)],
    "above-the-kv-cache": ["--max-model-len", str(LIMIT), "--kv-cache-memory-bytes",
                           str(2**20), "--enforce-eager"],
}


def stub_start(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-S", str(STUB_VLLM), "serve", str(real.MODEL_DIR),
                           "--port", str(free_port()), *args],
                          env={"STUB_VLLM_BEHAVIOUR": str(tmp_path / "none.json")},
                          capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture(scope="module")
def real_starts(real_vllm_installed: None, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[dict[str, tuple[int, str]]]:
    """Each of STARTS on the real vLLM, and the option dump: name -> (exit code, output)."""
    folder = tmp_path_factory.mktemp("starts")
    model = real.ensure_model()
    running = {name: real.start_real_vllm(folder / name, api_key="unused", port=free_port(),
                                          args=args, model=model)
               for name, args in STARTS.items()}
    dump = subprocess.Popen([str(real.venv() / "bin" / "python"),
                             str(REPO_ROOT / "rig" / "vllm_serve_flags.py")],
                            env=real.environment(folder / "dump"), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        results = {name: (server.exit_code(START_TIMEOUT_S), server.log())
                   for name, server in running.items()}
        output, _ = dump.communicate(timeout=START_TIMEOUT_S)
        results["options"] = (dump.returncode, output)
        yield results
    finally:
        for server in running.values():
            server.stop()
        if dump.poll() is None:
            dump.kill()
            dump.wait()


def test_the_stubs_options_are_the_real_parsers(real_starts):
    code, output = real_starts["options"]
    assert code == 0
    assert output.splitlines()[1:] == FLAGS.read_text().splitlines()[1:]


@pytest.mark.parametrize("name", ["unknown-flag", "misspelt-flag"])
def test_an_unknown_option_exits_2_naming_it(real_starts, tmp_path, name):
    flag = STARTS[name][0]
    said = f"vllm: error: unrecognized arguments: {flag}"
    code, log = real_starts[name]
    assert code == 2 and said in log
    stub = stub_start(tmp_path, STARTS[name])
    assert stub.returncode == 2 and said in stub.stderr


def test_a_context_above_the_models_limit_exits_1(real_starts, tmp_path):
    said = (f"User-specified max_model_len ({2 * LIMIT}) is greater than the derived "
            f"max_model_len (max_position_embeddings={LIMIT}")
    code, log = real_starts["above-the-model"]
    assert code == 1 and said in log
    stub = stub_start(tmp_path, STARTS["above-the-model"])
    assert stub.returncode == 1 and said in stub.stderr


def test_the_stub_takes_an_abbreviated_or_underscored_option(tmp_path):
    """vLLM's parser reads `_` as `-` and takes a unique prefix; the stub's check does too
    (it then fails to listen on an impossible address: the options were read)."""
    stub = stub_start(tmp_path, ["--max_model_len", "512", "--enforce-eag",
                                 "--compilation-config.mode", "0", "--host", "256.0.0.1"])
    assert stub.returncode == 1 and "cannot listen" in stub.stderr


def test_a_kv_cache_smaller_than_the_context_stops_the_real_start(real_starts):
    """vLLM 0.32 refuses at start a context its KV cache cannot hold once: no request can then
    outgrow the cache. The stub still starts and lets such a request wait (its "oversized
    server", docs/metrics.md); this records the real behaviour beside it."""
    code, log = real_starts["above-the-kv-cache"]
    assert code == 1
    assert f"To serve at least one request with the model's max seq len ({LIMIT})" in log
