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
   real server among others; then, between two passes run at chosen moments, both servers
   answer requests whose first tokens fall in different buckets (the real one's in tens of
   milliseconds, the stub's in under one): the model's TTFT in llmao's /metrics is a number,
   and the real Prometheus (promtool) computes the same from the raw buckets of both;
4. a change of max_model_len, with box TLS turned on in the same reload, rolls box by box under
   a chat load through LiteLLM with no failed request, and the real server then serves the new
   context;
5. the real server serves HTTPS with the certificate llmao's fleet CA signed for its address
   (asked for by the box program, its key made on the box): reconcile's probes verify it and
   register https api_bases that LiteLLM verifies, and the `openai` client streams through
   LiteLLM to it over TLS;
6. a renewal while streams run on it: the box's follow program asks for a new certificate and
   vLLM's --enable-ssl-refresh loads it in place, no stream fails, vLLM is not restarted;
7. another CA's certificate at its address is Rejected and unrouted. On the way, what the real
   server does with a certificate that does not fit its key: it drops the key, and every new
   handshake fails until a pair that fits is written (the stub does the same).
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rig import REPO_ROOT
from rig.chat_load import ChatLoad, Shape
from rig.litellm_process import litellm_python
from rig.route_watch import RouteWatch
from rig.web import authorization, call, events
from tests.prometheus_quantile import TTFT, Expected, bucket_lines, promtool_disagreement
from tests.real_vllm_fleet import (
    FIRST_CONTEXT,
    KV_CACHE_BYTES,
    LISTEN_PORT,
    LOAD_MAX_TOKENS,
    MAX_RUNNING,
    MODEL,
    NEXT_CONTEXT,
    SERVER,
    RealVllmFleet,
    real_vllm_fleet,
)
from tests.rolling_fleet import mask
from tests.tls_files import make_test_ca

pytestmark = [pytest.mark.vllm, pytest.mark.litellm, pytest.mark.slow]

OPENAI_STREAM = REPO_ROOT / "rig" / "openai_stream.py"
# The recipe runs at most MAX_RUNNING requests at once, each holding 4 of the cache's 16 blocks
# of 128 tokens at 480 tokens: twice as many streams keep some waiting at any moment, and the
# cache is never full, so nothing is preempted. vLLM's engine takes a core whatever the count;
# reconcile's passes then take minutes on a busy machine.
HOLD_STREAMS = 2 * MAX_RUNNING
HOLD_TOKENS = 480
SCRAPE_TIMEOUT_S = 360.0
ROLL_TIMEOUT_S = 600.0
# Plain and streamed chats; min_tokens=1 only so that an answer of noise is never empty. Its
# tokens are pieces of words or whitespace (one whitespace token alone was once counted as a
# stream cut short), so words are not counted. Each is cut at LOAD_MAX_TOKENS, so that the
# fleet's drain (DRAIN_S) outlasts any of them: unbounded, the real model wrote until its
# context was full, and in CI one stream, 28 s long, was still going when its box restarted.
MIX = (Shape(stream=False, min_tokens=1, words=False, max_tokens=LOAD_MAX_TOKENS),
       Shape(stream=True, min_tokens=1, words=False, max_tokens=LOAD_MAX_TOKENS))
LOAD_RATE_PER_S = 1.0
TLS_DIR = "data/llmao/tls"  # under the box's folder: the box program's key, certificate, CA
RENEW_STREAMS = 4
RENEW_TIMEOUT_S = 90.0
VERIFIED_TIMEOUT_S = 240.0
REAL_ANSWER_TRIES = 10
# Requests each server answers between the two passes whose interval the latency covers.
LATENCY_REQUESTS = 4


class StreamHolder:
    """Keeps ``count`` long streams in flight on one server until stopped: vLLM's gauges are
    snapshots, so a scrape must land while requests run."""

    def __init__(self, url: str, api_key: str, count: int,
                 context: ssl.SSLContext | None = None) -> None:
        self.url, self.api_key, self.context = url, api_key, context
        # (began, ended, status or the error that ended it), monotonic clock
        self.spans: list[tuple[float, float, int | str]] = []
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

    @property
    def statuses(self) -> list[int | str]:
        return [status for _, _, status in self.spans]

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                status, _ = events(f"{self.url}/v1/completions",
                                   headers=authorization(self.api_key),
                                   body={"model": MODEL, "prompt": "hold", "stream": True,
                                         "max_tokens": HOLD_TOKENS, "min_tokens": HOLD_TOKENS},
                                   context=self.context, timeout=120)
            except OSError as exc:
                status = f"{type(exc).__name__}: {exc}"
            self.spans.append((began, time.monotonic(), status))


def real_verdict(fleet: RealVllmFleet) -> dict:
    """Reconcile's last verdict on the real server, as llmao keeps it (what the dashboard and
    llmao's /metrics show)."""
    verdicts = fleet.observations()["verdicts"].values()
    (verdict,) = [v for v in verdicts if v.get("box") == fleet.real_box]
    return verdict


def scraped(fleet: RealVllmFleet, figure: str) -> float | None:
    """A figure of reconcile's last scrape of the real server."""
    return (real_verdict(fleet).get("metrics") or {}).get(figure)


def served_certificate(fleet: RealVllmFleet) -> str:
    """The certificate the real server presents now (PEM), unverified."""
    return ssl.get_server_certificate((fleet.real_box, LISTEN_PORT), timeout=10)


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
    assert set(holder.statuses) == {200}, f"{holder.statuses}\n{said()}"
    fleet.wait("a pass after the streams", lambda: (scraped(
        fleet, "generation_tokens_total") or 0) >= generated_before + HOLD_TOKENS,
        SCRAPE_TIMEOUT_S)

    # 3. The openai client streams through LiteLLM; the real server answers some.
    answers = [openai_stream(real_litellm.url, litellm_master_key, kind, 6)
               for kind in ("chat", "completions") * 3]
    assert {a["finish_reason"] for a in answers} == {"length"}
    assert all(a["usage"]["completion_tokens"] == 6 and a["chunks"] >= 2 for a in answers)
    assert any(not a["text"].startswith("answered by") for a in answers), answers
    check_model_latency(fleet)

    # 4. A change of max_model_len, with box TLS turned on, rolls with no failed request.
    before = fleet.intended()
    with RouteWatch(fleet.litellm, MODEL) as watch, \
            ChatLoad(real_litellm.url, litellm_master_key, MODEL, rate_per_s=LOAD_RATE_PER_S,
                     count=int(ROLL_TIMEOUT_S * LOAD_RATE_PER_S), max_s=ROLL_TIMEOUT_S,
                     mix=MIX) as load:
        new = fleet.change(NEXT_CONTEXT, box_tls=True)
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

    # 5. The real vLLM serves HTTPS with the certificate llmao signed for its address; LiteLLM
    # and the probes verify it against the fleet CA.
    check_real_tls(fleet, real_litellm.url, litellm_master_key, url)


def raw_metrics(fleet: RealVllmFleet) -> dict[str, str]:
    """Each server's own /metrics answer now."""
    answers = {}
    for server in fleet.local.load().servers():
        status, body = call(f"{fleet.box_url(server.box)}/metrics",
                            headers=authorization(server.api_key), context=fleet.context(),
                            timeout=10)
        assert status == 200, body[:300]
        answers[server.box] = body.decode()
    return answers


def llmao_ttft(fleet: RealVllmFleet) -> dict[tuple[str, str], float]:
    """llmao's TTFT quantiles of the last pass: (model or box, quantile) -> seconds."""
    status, body = call(f"{fleet.server.url}/metrics", context=fleet.server.context,
                        headers=authorization(fleet.local.settings.get("metrics", {})
                                              .get("token")), timeout=30)
    assert status == 200, body[:300]
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name in ("llmao_model_time_to_first_token_seconds",
                               "llmao_server_time_to_first_token_seconds"):
                owner = sample.labels.get("model") if "box" not in sample.labels \
                    else sample.labels["box"]
                found[owner, sample.labels["quantile"]] = sample.value
    return found


def check_model_latency(fleet: RealVllmFleet) -> None:
    """Two servers of the model answer between two passes, in different TTFT buckets: the
    model's TTFT is known and is Prometheus's quantile of both servers' raw bucket deltas."""
    said = fleet.diagnostics
    with fleet.loop.held():
        fleet.loop.step()
        before = raw_metrics(fleet)
        for server in fleet.local.load().servers():
            for _ in range(LATENCY_REQUESTS):
                status, body = call(f"{fleet.box_url(server.box)}/v1/completions",
                                    headers=authorization(server.api_key),
                                    body={"model": MODEL, "prompt": "when", "max_tokens": 2},
                                    context=fleet.context(), timeout=60)
                assert status == 200, body[:300]
        after = raw_metrics(fleet)
        fleet.loop.step()
    scrapes = {box: (before[box], after[box]) for box in fleet.boxes}
    first = {box: first_bucket(*pair) for box, pair in scrapes.items()}
    assert first[fleet.real_box] != first[fleet.stub_box], first
    shown = llmao_ttft(fleet)
    checks = [Expected(q, shown[MODEL, label]) for q, label in ((0.5, "0.5"), (0.95, "0.95"))]
    checks += [Expected(q, shown[box, label], (box,)) for box in fleet.boxes
               for q, label in ((0.5, "0.5"), (0.95, "0.95"))]
    disagreement = promtool_disagreement(scrapes, checks)
    assert disagreement is None, f"{shown}\n{disagreement}\n{said()}"
    print(f"model TTFT p50 / p95 {shown[MODEL, '0.5']:.4f} / {shown[MODEL, '0.95']:.4f} s "
          f"(first buckets {first})")


def first_bucket(before: str, after: str) -> str:
    """The lowest ``le`` whose TTFT count grew between two answers of one server."""
    old, new = bucket_lines(before, TTFT), bucket_lines(after, TTFT)
    grown = [dict(labels)["le"] for labels, value in new.items() if value > old.get(labels, 0)]
    return min(grown, key=float)


def check_real_tls(fleet: RealVllmFleet, litellm_url: str, master_key: str,
                   plain_url: str) -> None:
    said = fleet.diagnostics
    box = fleet.boxes[fleet.real_box]
    server = fleet.real_server()
    url = fleet.box_url(fleet.real_box)
    tls = box.folder / TLS_DIR

    # 5. The box made its key (0600) and got its certificate through POST /vllm/cert; the
    # Supervisor program starts the real vLLM with both and the refresh watch.
    program = (box.folder / "conf.d" / f"llmao-{SERVER}.conf").read_text()
    assert (f"--ssl-keyfile {tls / 'key.pem'} --ssl-certfile {tls / 'cert.pem'} "
            "--enable-ssl-refresh") in program, program
    assert (tls / "key.pem").stat().st_mode & 0o777 == 0o600
    assert call(f"{url}/health", context=fleet.context()) == (200, b"")
    # Plain HTTP to the TLS port: the real server closes the connection without an answer.
    with pytest.raises(http.client.RemoteDisconnected):
        call(f"{plain_url}/health")
    # A client that trusts only the system's CAs does not trust a box.
    with pytest.raises(OSError) as untrusted:
        call(f"{url}/health")
    assert isinstance(getattr(untrusted.value, "reason", None), ssl.SSLCertVerificationError)
    # Reconcile's probes verified it (the verdict keeps the expiry of the certificate served)
    # and every deployment is registered over https.
    fleet.wait("a pass verified the real server's certificate",
               lambda: real_verdict(fleet).get("cert_not_after") is not None,
               VERIFIED_TIMEOUT_S)
    assert real_verdict(fleet)["state"] == "Healthy", said()
    assert fleet.api_bases() == {name: f"https://{name}:{LISTEN_PORT}/v1"
                                 for name in fleet.boxes}, said()
    # The openai client streams through LiteLLM, which verifies the fleet CA; the real server
    # answers (the stub's answers start "answered by").
    for _ in range(REAL_ANSWER_TRIES):
        answer = openai_stream(litellm_url, master_key, "chat", 6)
        assert answer["finish_reason"] == "length" and answer["chunks"] >= 2, answer
        if not answer["text"].startswith("answered by"):
            break
    else:
        raise AssertionError(f"the real server answered none of {REAL_ANSWER_TRIES} chats\n"
                             f"{said()}")

    # 6. A renewal under streams: the box's record of its certificate says that less than a
    # third of its life is left, so the follow program asks llmao for a new one and rewrites
    # cert.pem; vLLM loads it in place.
    first = served_certificate(fleet)
    pid = box.supervisorctl("pid", SERVER)
    meta_path = tls / "cert.json"
    with StreamHolder(url, server.api_key, RENEW_STREAMS, fleet.context()) as holder:
        fleet.wait("the streams running", lambda: scraped_running(url, server.api_key,
                                                                   fleet.context()), 60)
        meta = json.loads(meta_path.read_text())
        meta.update(issued_at=time.time() - 3600, not_after=time.time() + 600)
        staged = meta_path.with_suffix(".test")
        staged.write_text(json.dumps(meta))
        os.replace(staged, meta_path)
        took = fleet.wait("the real server serving a renewed certificate",
                          lambda: served_certificate(fleet) != first, RENEW_TIMEOUT_S)
        renewed_at = time.monotonic()
        time.sleep(2)
    assert holder.spans and set(holder.statuses) == {200}, f"{holder.statuses}\n{said()}"
    assert any(began < renewed_at < ended for began, ended, _ in holder.spans), holder.spans
    assert box.supervisorctl("pid", SERVER) == pid, said()
    assert call(f"{url}/health", context=fleet.context()) == (200, b"")
    print(f"renewal seen {took:.0f} s after the box's record said it was due")

    # 7. A certificate that does not fit the key: the real server's refresh drops its key
    # (OpenSSL's load on the live context), and new handshakes fail until a pair that fits is
    # there. Then another CA's pair at the box's address: Rejected, its route deleted.
    stranger_key, stranger_cert = make_test_ca(box.folder.parent / "stranger-ca").leaf(
        box.folder.parent / "stranger", fleet.real_box)
    (tls / "cert.pem").write_bytes(stranger_cert.read_bytes())
    fleet.wait("handshakes failing on a certificate without its key",
               lambda: handshake_fails(fleet), 30)
    (tls / "key.pem").write_bytes(stranger_key.read_bytes())
    fleet.wait("the stranger's certificate served",
               lambda: not handshake_fails(fleet)
               and served_certificate(fleet) == stranger_cert.read_text(), 30)
    fleet.wait("reconcile rejecting the real server",
               lambda: real_verdict(fleet)["state"] == "Rejected", VERIFIED_TIMEOUT_S)
    assert "a certificate the fleet CA did not sign" in real_verdict(fleet)["reason"], said()
    fleet.wait("its route deleted", lambda: fleet.routed() == {fleet.stub_box}, 60)


def scraped_running(url: str, api_key: str, context: ssl.SSLContext | None) -> bool:
    """The real server runs requests now (its own /metrics, not reconcile's last pass)."""
    status, body = call(f"{url}/metrics", headers=authorization(api_key), context=context,
                        timeout=10)
    return status == 200 and any(
        line.startswith("vllm:num_requests_running") and float(line.split()[-1]) >= 1
        for line in body.decode().splitlines())


def handshake_fails(fleet: RealVllmFleet) -> bool:
    try:
        served_certificate(fleet)
    except (ssl.SSLError, OSError):
        return True
    return False
