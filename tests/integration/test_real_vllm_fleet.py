"""The real vLLM (CPU build, tiny model) through llmao's own paths, end to end.

One scenario on tests/real_vllm_fleet.py's fleet (a real-vLLM box and a stub box, booted by
Vast's provision.sh, following llmao, reconciled into the real LiteLLM), because each step
builds on the one before and a real start costs a minute or two:

1. the box program's Supervisor program started the real vLLM with the recipe's arguments;
   reconcile found it Healthy and registered it: /health answers, /v1/models with the bearer
   llmao derives lists the model at its context, and 401 without;
2. reconcile's scrape of the real /metrics, as llmao keeps it, moves while streams are held
   open on the real server (running, waiting, KV usage, generated tokens);
3. the `openai` client streams chat and text completions through LiteLLM, answered by the
   real server among others;
4. a change of max_model_len rolls box by box under a chat load through LiteLLM with no failed
   request, and the real server then serves the new context.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from rig import REPO_ROOT
from rig.chat_load import ChatLoad, Shape
from rig.litellm_process import litellm_python
from rig.route_watch import RouteWatch
from rig.web import authorization, call, events
from tests.real_vllm_fleet import (
    FIRST_CONTEXT,
    KV_CACHE_BYTES,
    LISTEN_PORT,
    MODEL,
    NEXT_CONTEXT,
    SERVER,
    RealVllmFleet,
    real_vllm_fleet,
)
from tests.rolling_fleet import mask

pytestmark = [pytest.mark.vllm, pytest.mark.litellm, pytest.mark.slow]

OPENAI_STREAM = REPO_ROOT / "rig" / "openai_stream.py"
# The cache holds 16 KV blocks of 128 tokens, and a running request holds at least one: with 20
# streams in flight at least four wait at any moment, whatever their lengths. (Eight streams of 480
# tokens were seen all running at once, vLLM allotting blocks as they grow, so waiting was only a
# moment's figure that a pass's scrape could miss.) vLLM's engine takes a core whatever the count;
# reconcile's passes then take minutes on a busy machine.
HOLD_STREAMS = 20
HOLD_TOKENS = 480
SCRAPE_TIMEOUT_S = 360.0
ROLL_TIMEOUT_S = 600.0
# Plain and streamed chats; min_tokens=1 only so that an answer of noise is never empty.
MIX = (Shape(stream=False, min_tokens=1), Shape(stream=True, min_tokens=1))
LOAD_RATE_PER_S = 1.0


class StreamHolder:
    """Keeps ``count`` long streams in flight on one server until stopped: vLLM's gauges are
    snapshots, so a scrape must land while requests run."""

    def __init__(self, url: str, api_key: str, count: int) -> None:
        self.url, self.api_key = url, api_key
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]

    def __enter__(self) -> StreamHolder:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            status, _ = events(f"{self.url}/v1/completions", headers=authorization(self.api_key),
                               body={"model": MODEL, "prompt": "hold", "stream": True,
                                     "max_tokens": HOLD_TOKENS, "min_tokens": HOLD_TOKENS},
                               timeout=120)
            self.statuses.append(status)


def scraped(fleet: RealVllmFleet, figure: str) -> float | None:
    """A figure of reconcile's last scrape of the real server, as llmao keeps it (the verdicts
    the dashboard and llmao's /metrics show)."""
    verdicts = fleet.observations()["verdicts"].values()
    (verdict,) = [v for v in verdicts if v.get("box") == fleet.real_box]
    return (verdict.get("metrics") or {}).get(figure)


def openai_stream(litellm_url: str, key: str, kind: str, tokens: int) -> dict:
    done = subprocess.run([str(litellm_python()), str(OPENAI_STREAM), f"{litellm_url}/v1",
                           MODEL, kind, str(tokens)], env={"OPENAI_API_KEY": key,
                                                          "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, mask(done.stderr[-3000:], [key])
    return json.loads(done.stdout)


@pytest.fixture
def fleet(tmp_path, real_vllm_installed, real_litellm, litellm_master_key):
    with real_vllm_fleet(tmp_path, real_litellm.url, litellm_master_key) as running:
        yield running


def test_the_real_vllm_serves_through_llmao_and_rolls(fleet, real_litellm, litellm_master_key):
    said = fleet.diagnostics
    server = fleet.real_server()
    box = fleet.boxes[fleet.real_box]
    url = box.url(LISTEN_PORT)

    # 1. Started by Supervisor from the box program's program, with the recipe's arguments.
    program = (box.folder / "conf.d" / f"llmao-{SERVER}.conf").read_text()
    assert f"--kv-cache-memory-bytes {KV_CACHE_BYTES}" in program, program
    assert f"--max-model-len {FIRST_CONTEXT}" in program
    assert "RUNNING" in box.supervisorctl("status", SERVER)
    assert call(f"{url}/health") == (200, b"")
    assert call(f"{url}/v1/models")[0] == 401
    assert fleet.served_context(fleet.real_box) == FIRST_CONTEXT, said()

    # 2. Reconcile's scrape of the real /metrics moves while streams are held open.
    # 2 MiB of KV cache at 1 KiB a token (2 layers x K and V x 128 values x 2 bytes). The
    # pass that routed it records its verdicts after writing to LiteLLM: wait for them.
    fleet.wait("reconcile's scrape of the real server recorded",
               lambda: scraped(fleet, "kv_cache_tokens") is not None, 60)
    assert scraped(fleet, "kv_cache_tokens") == KV_CACHE_BYTES // 1024, said()
    assert scraped(fleet, "max_model_len") == FIRST_CONTEXT
    generated_before = scraped(fleet, "generation_tokens_total") or 0
    with StreamHolder(url, server.api_key, HOLD_STREAMS) as holder:
        seen = dict.fromkeys(("requests_running", "requests_waiting", "kv_cache_usage_ratio"),
                             0.0)
        deadline = time.monotonic() + SCRAPE_TIMEOUT_S
        while not all(seen.values()) and time.monotonic() < deadline:
            time.sleep(1)
            seen = {figure: max(value, scraped(fleet, figure) or 0)
                    for figure, value in seen.items()}
    assert seen["requests_running"] >= 1 and seen["requests_waiting"] >= 1, f"{seen}\n{said()}"
    assert 0 < seen["kv_cache_usage_ratio"] <= 1, said()
    assert set(holder.statuses) == {200}
    fleet.wait("a pass after the streams", lambda: (scraped(
        fleet, "generation_tokens_total") or 0) >= generated_before + HOLD_TOKENS,
        SCRAPE_TIMEOUT_S)

    # 3. The openai client streams through LiteLLM; the real server answers some.
    answers = [openai_stream(real_litellm.url, litellm_master_key, kind, 6)
               for kind in ("chat", "completions") * 3]
    assert {a["finish_reason"] for a in answers} == {"length"}
    assert all(a["usage"]["completion_tokens"] == 6 and a["chunks"] >= 2 for a in answers)
    assert any(not a["text"].startswith("answered by") for a in answers), answers

    # 4. A change of max_model_len rolls with no failed request.
    before = fleet.intended()
    with RouteWatch(fleet.litellm, MODEL) as watch, \
            ChatLoad(real_litellm.url, litellm_master_key, MODEL, rate_per_s=LOAD_RATE_PER_S,
                     count=int(ROLL_TIMEOUT_S * LOAD_RATE_PER_S), max_s=ROLL_TIMEOUT_S,
                     mix=MIX) as load:
        new = fleet.change(NEXT_CONTEXT)
        took = fleet.wait("both boxes on the new revision, routed", fleet.settled,
                          ROLL_TIMEOUT_S)
        load.stop()
    report = f"{load.summary()}\n{watch.summary()}\n{said()}"
    assert all(new[name] != before[name] for name in new), report
    assert load.failures() == [] and len(load.outcomes()) >= 10, report
    assert watch.fewest() >= 1 and watch.errors == [], report
    assert {name: fleet.served_context(name) for name in fleet.boxes} == \
        dict.fromkeys(fleet.boxes, NEXT_CONTEXT), report
    assert {name: turn["phase"] for name, turn in fleet.turns().items()} == \
        dict.fromkeys(fleet.boxes, "done"), report
    print(f"roll of the real box and the stub box took {took:.0f} s")
