#!/usr/bin/env python3
"""A test double of vLLM's OpenAI-compatible server, run as `vllm serve MODEL ...`.

Why: test boxes have no GPU, so this stands in for the process Supervisor runs. It keeps what the
fleet relies on: the port is bound only once the "model" has loaded (as vLLM does), `/health` and
`/metrics` need no key, everything under `/v1` needs `Authorization: Bearer $VLLM_API_KEY`, and
`/v1/models` lists the served name. Chat answers name the box and the listen port, so a test can
tell which server a request reached. Standard library only: it runs in a bare Debian box.

Faults and slowness come from a JSON file (env STUB_VLLM_BEHAVIOUR, default
/etc/llmao-stub/vllm.json; missing means defaults) keyed by listen port, with "*" for all:

    {"*": {"answer_delay_s": 0.2}, "8002": {"load_delay_s": 5, "fail": "reject"}}

- load_delay_s: sleep before binding the port;
- fail: null, "exit" (exit 1 at start), "health_500" (/health answers 500), or "reject"
  (/v1 answers 401 to every key);
- answer_delay_s: sleep before every answer (the server is slow: requests pipelined on one
  connection wait for each other, as vLLM answers them in turn);
- round_trip_s: the box is this far away: whatever the client sends in one flight (a TLS
  ClientHello, a request, or requests pipelined together) is answered no sooner than this long
  after it arrived, as over a path with this round-trip time; the server itself is quick, so
  requests pipelined together come back together. The TCP connect is not delayed (the kernel
  answers it);
- generation_delay_s: how long each chat request runs once scheduled, holding its KV blocks
  (only chat answers wait for it, so probes and /metrics stay quick);
- token_delay_s: the pace of a streamed answer, one server-sent event every so many seconds;
- refuse_args: command-line arguments the stub refuses to start with, as vLLM exits at once on
  a bad argument or value: each entry is a flag (`"--enforce-eager"`, refused whatever its
  value) or a flag and a value (`"--max-model-len=4096"`, given as `--max-model-len 4096` or
  `--max-model-len=4096`). A test makes one revision of a config fail to start with it.

Like vLLM, `--ssl-keyfile` and `--ssl-certfile` make it serve HTTPS (the handshake in each
connection's thread), and `--enable-ssl-refresh` loads both files again when either changes,
for new connections only, so a renewal drops nothing. As vLLM 0.32 does, it loads them into the
context in use (OpenSSL's rules, not a fresh context): a half-written file is refused and the
pair in use kept, a key that does not fit the certificate in use is refused, but a certificate
that does not fit the key in use replaces the certificate and drops the key, and every new
handshake then fails until a pair that fits is written (seen on the real server).

`GET /stub/devices` (test-only, no key; vLLM has no such path) says which cards the process was
given: `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER` as its environment had them (null when
unset), and the `--tensor-parallel-size`, `--pipeline-parallel-size` and
`--gpu-memory-utilization` it was started with, so a box test can assert the placement.

Like vLLM, `/v1/chat/completions` and `/v1/completions` answer whole or, with `"stream": true`,
as server-sent events token by token (`data: <chunk JSON>` lines, `data: [DONE]` last). The
answer's tokens are words; `min_tokens` (vLLM's sampling parameter) pads it, so a test can ask
for a stream several seconds long, and `max_tokens` cuts it (finish reason "length").

Its `/metrics` tells the truth in vLLM's own names and labels (V1 engine, labels `model_name` and
`engine`): the KV cache it was launched with (vLLM's `--num-gpu-blocks-override` and
`--block-size`), and running, waiting, KV usage and token counters moved by the chat requests it
really serves. Like vLLM's scheduler, it runs at most `--max-num-seqs` requests at once, each
holding the KV blocks of its prompt and answer; the others wait. A request longer than
`--max-model-len` is refused; one that fits the context but not the whole KV cache waits for ever,
as vLLM hangs on it: that is the oversized server.
"""

from __future__ import annotations

import argparse
import bisect
import hmac
import io
import json
import math
import os
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

DEFAULT_BEHAVIOUR_FILE = "/etc/llmao-stub/vllm.json"
# vLLM's own list of `serve` options (rig/vllm_serve_flags.py makes it from the real parser):
# beside this file in the repository, in /etc/llmao-stub in the box image.
FLAGS_FILES = (os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_serve_flags.txt"),
               "/etc/llmao-stub/vllm-serve-flags.txt")
FAILURE_MODES = (None, "exit", "health_500", "reject")
DEFAULT_MAX_MODEL_LEN = 8192
# vLLM's defaults for the KV block size and the scheduler's batch; the stub's cache: 64k tokens.
DEFAULT_BLOCK_SIZE = 16
DEFAULT_GPU_BLOCKS = 4096
DEFAULT_MAX_NUM_SEQS = 256


def say(message: str) -> None:
    print(f"stub-vllm: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Behaviour:
    load_delay_s: float = 0.0
    fail: str | None = None
    answer_delay_s: float = 0.0
    round_trip_s: float = 0.0
    generation_delay_s: float = 0.0
    token_delay_s: float = 0.0
    refuse_args: tuple[str, ...] = ()


def load_behaviour(path: str, port: int) -> Behaviour:
    """The knobs for this listen port: defaults, then the "*" entry, then the port's own entry."""
    try:
        with open(path, encoding="utf-8") as handle:
            table = json.load(handle)
    except FileNotFoundError:
        return Behaviour()
    except (OSError, ValueError) as exc:
        raise SystemExit(f"stub-vllm: cannot read behaviour file {path}: {exc}") from exc
    if not isinstance(table, dict):
        raise SystemExit(f'stub-vllm: {path}: expected an object keyed by port or "*"')
    merged = {**table.get("*", {}), **table.get(str(port), {})}
    known = {field.name for field in fields(Behaviour)}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise SystemExit(f"stub-vllm: {path}: unknown key(s) {unknown}; known: {sorted(known)}")
    if merged.get("fail") not in FAILURE_MODES:
        raise SystemExit(f"stub-vllm: {path}: fail must be one of {list(FAILURE_MODES)}")
    refused = merged.get("refuse_args", [])
    if not isinstance(refused, list) or not all(
            isinstance(entry, str) and entry.startswith("--") for entry in refused):
        raise SystemExit(f'stub-vllm: {path}: refuse_args must be a list of "--flag" or '
                         '"--flag=value" strings')
    return Behaviour(**{**merged, "refuse_args": tuple(refused)})


def given_arguments(argv: list[str]) -> list[tuple[str, str | None]]:
    """Each `--flag` of the command line with its value (`--flag=value`, or the next word when
    that is not a flag), None for a bare flag."""
    given = []
    for index, word in enumerate(argv):
        if not word.startswith("--"):
            continue
        flag, equals, value = word.partition("=")
        if not equals:
            following = argv[index + 1] if index + 1 < len(argv) else None
            value = None if following is None or following.startswith("--") else following
        given.append((flag, value))
    return given


def refused_argument(argv: list[str], refused: tuple[str, ...]) -> str | None:
    """The first argument of the command line the behaviour refuses, as `--flag[=value]`."""
    for flag, value in given_arguments(argv):
        shown = flag if value is None else f"{flag}={value}"
        for entry in refused:
            if entry in (flag, shown):
                return shown
    return None


def known_options() -> frozenset[str] | None:
    """The options real `vllm serve` accepts (FLAGS_FILES, or $STUB_VLLM_FLAGS), or None when
    no list is found: then every option is taken, as the stub did before it had one."""
    for path in (os.environ.get("STUB_VLLM_FLAGS"), *FLAGS_FILES):
        if path and os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return frozenset(line.strip() for line in handle
                                 if line.startswith("--") and line.strip())
    return None


def unrecognized(words: list[str], known: frozenset[str]) -> list[str]:
    """The options vLLM's parser would not recognize, as it reads them: the name up to a `.`
    (which starts a JSON sub-key) with `_` read as `-`, and argparse's unique prefixes."""
    unknown = []
    for word in words:
        if not word.startswith("--"):
            continue
        option = word.partition("=")[0]
        name = "--" + option[2:].split(".", 1)[0].replace("_", "-")
        if name not in known and sum(flag.startswith(name) for flag in known) != 1:
            unknown.append(option)
    return unknown


def model_limit(model: str) -> int | None:
    """The context a local model folder allows (its config.json's max_position_embeddings), or
    None for a hub name or a folder that does not say."""
    try:
        with open(os.path.join(model, "config.json"), encoding="utf-8") as handle:
            limit = json.load(handle).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return limit if isinstance(limit, int) and limit > 0 else None


def context_problem(args: argparse.Namespace) -> str | None:
    """vLLM's refusal at start of a --max-model-len above the model's own limit; without the
    flag the context is the model's limit (DEFAULT_MAX_MODEL_LEN when it is not known)."""
    limit = model_limit(args.model)
    if args.max_model_len is None:
        args.max_model_len = limit or DEFAULT_MAX_MODEL_LEN
    if limit is None or args.max_model_len <= limit \
            or os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1":
        return None
    return (f"User-specified max_model_len ({args.max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={limit} in model's config.json). To "
            "allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """vLLM's `serve` command line; flags the stub has no use for are accepted and returned."""
    parser = argparse.ArgumentParser(prog="vllm", allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", allow_abbrev=False)
    serve.add_argument("model")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", nargs="+")
    serve.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    serve.add_argument("--max-model-len", type=int)
    serve.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    serve.add_argument("--num-gpu-blocks-override", type=int, default=DEFAULT_GPU_BLOCKS)
    serve.add_argument("--max-num-seqs", type=int, default=DEFAULT_MAX_NUM_SEQS)
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    serve.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    serve.add_argument("--api-key", help=argparse.SUPPRESS)
    serve.add_argument("--ssl-keyfile")
    serve.add_argument("--ssl-certfile")
    serve.add_argument("--enable-ssl-refresh", action="store_true")
    return parser.parse_known_args(argv)


class Stub:
    """What the handlers answer from: the launch arguments, the key and the counters."""

    def __init__(self, args: argparse.Namespace, behaviour: Behaviour) -> None:
        self.model: str = args.model
        self.served_names: list[str] = args.served_model_name or [args.model]
        self.port: int = args.port
        self.max_model_len: int = args.max_model_len
        self.gpu_memory_utilization: float = args.gpu_memory_utilization
        self.tensor_parallel_size: int = args.tensor_parallel_size
        self.pipeline_parallel_size: int = args.pipeline_parallel_size
        self.behaviour = behaviour
        key = os.environ.get("VLLM_API_KEY", "")
        self.expected_key = key.encode() if key else None
        self.box = os.environ.get("LLMAO_BOX_NAME") or socket.gethostname()
        self.created = int(time.time())
        self.scheduler = Scheduler(args.num_gpu_blocks_override, args.block_size,
                                   args.max_num_seqs)

    def authorized(self, header: str | None) -> bool:
        """vLLM's rule: with a key configured, the header is `<scheme> <key>`, the scheme
        `Bearer` in any case (vLLM 0.32's middleware compares it lowercased), the key whole."""
        if self.behaviour.fail == "reject":
            return False
        if self.expected_key is None:
            return True
        scheme, _, token = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(),
                                                                   self.expected_key)

    def devices(self) -> dict:
        """The cards this process was given, for `GET /stub/devices`."""
        return {
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
        }

    def models(self) -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "vllm",
                    "root": self.model,
                    "parent": None,
                    "max_model_len": self.max_model_len,
                }
                for name in self.served_names
            ],
        }

    def answer_words(self, request: dict) -> tuple[list[str], str]:
        """The answer's tokens and finish reason: the sentence naming box and port, padded up to
        `min_tokens` and cut at `max_tokens`, as a sampler bounded by both would end."""
        words = f"answered by {self.box} port {self.port}".split()
        wanted = request.get("min_tokens")
        if isinstance(wanted, int) and wanted > len(words):
            words += ["token"] * (min(wanted, self.max_model_len) - len(words))
        limit = request.get("max_tokens")
        if isinstance(limit, int) and 0 < limit <= len(words):
            # vLLM says "length" whenever the answer reached max_tokens, even exactly.
            return words[:limit], "length"
        return words, "stop"

    def completion(self, request: dict) -> dict:
        words, finish = self.answer_words(request)
        content = " ".join(words)
        prompt_words = prompt_tokens(request)
        return {
            "id": f"chatcmpl-{os.urandom(16).hex()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or self.served_names[0],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
            "usage": usage(prompt_words, len(words)),
        }

    def metrics(self) -> str:
        return exposition(self)


def prompt_tokens(request: dict) -> int:
    """The stub's tokens are words: those of every message's content, or of the text prompt."""
    prompt = request.get("prompt")
    if prompt is not None:
        texts = prompt if isinstance(prompt, list) else [prompt]
        return sum(len(str(text).split()) for text in texts)
    return sum(len(str(message.get("content", "")).split())
               for message in request.get("messages", []) if isinstance(message, dict))


def usage(prompt: int, generated: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": generated,
            "total_tokens": prompt + generated}


def text_completion(stub: Stub, request: dict) -> dict:
    """A whole `/v1/completions` answer (OpenAI's text completion shape, as vLLM fills it)."""
    words, finish = stub.answer_words(request)
    return {
        "id": f"cmpl-{os.urandom(16).hex()}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": request.get("model") or stub.served_names[0],
        "choices": [{"index": 0, "text": " ".join(words), "logprobs": None,
                     "finish_reason": finish, "stop_reason": None}],
        "usage": usage(prompt_tokens(request), len(words)),
    }


def pieces(words: list[str]) -> list[str]:
    """The streamed text of each token: joined, they give the whole answer's text."""
    return [word if index == 0 else f" {word}" for index, word in enumerate(words)]


def chat_chunks(stub: Stub, request: dict) -> Iterator[dict]:
    """`chat.completion.chunk` events: the role first, one per token, the finish reason, then the
    usage when `stream_options.include_usage` asks for it (choices empty, as OpenAI sends it)."""
    words, finish = stub.answer_words(request)
    head = {"id": f"chatcmpl-{os.urandom(16).hex()}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": request.get("model") or stub.served_names[0]}

    def event(delta: dict, finish_reason: str | None) -> dict:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish_reason}]}

    yield event({"role": "assistant", "content": ""}, None)
    for piece in pieces(words):
        yield event({"content": piece}, None)
    yield event({}, finish)
    if wants_usage(request):
        yield {**head, "choices": [], "usage": usage(prompt_tokens(request), len(words))}


def text_chunks(stub: Stub, request: dict) -> Iterator[dict]:
    """`text_completion` events for a streamed `/v1/completions`: one per token, then the finish
    reason, then the usage when asked for."""
    words, finish = stub.answer_words(request)
    head = {"id": f"cmpl-{os.urandom(16).hex()}", "object": "text_completion",
            "created": int(time.time()), "model": request.get("model") or stub.served_names[0]}

    def event(text: str, finish_reason: str | None) -> dict:
        return {**head, "choices": [{"index": 0, "text": text, "logprobs": None,
                                     "finish_reason": finish_reason, "stop_reason": None}]}

    for piece in pieces(words):
        yield event(piece, None)
    yield event("", finish)
    if wants_usage(request):
        yield {**head, "choices": [], "usage": usage(prompt_tokens(request), len(words))}


def wants_usage(request: dict) -> bool:
    options = request.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def too_long(stub: Stub, request: dict) -> dict:
    """vLLM's refusal of a prompt longer than the served context."""
    tokens = prompt_tokens(request)
    return error_body(HTTPStatus.BAD_REQUEST,
                      f"This model's maximum context length is {stub.max_model_len} tokens. "
                      f"However, your prompt contains at least {tokens} input tokens, which "
                      "exceeds this limit even without any output tokens. Please reduce the "
                      f"length of the input prompt. (parameter=input_tokens, value={tokens})",
                      "BadRequestError", "input_tokens")


# vLLM 0.32's buckets (shared/vectors/vllm-metrics-0.32.txt), in seconds.
LATENCY_BUCKETS = {
    "vllm:time_to_first_token_seconds": (
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
    "vllm:e2e_request_latency_seconds": (
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
        240.0, 480.0, 960.0, 1920.0, 7680.0),
    "vllm:inter_token_latency_seconds": (
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0),
}
LATENCY_HELP = {
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
}


class Histogram:
    """One of vLLM's latency histograms: a count per bucket, the sum and the count."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, seconds: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += times
        self.total += seconds * times

    def copy(self) -> Histogram:
        copied = Histogram(self.bounds)
        copied.counts, copied.total = list(self.counts), self.total
        return copied

    def lines(self, name: str, labels: str) -> list[str]:
        """The ``_bucket`` (cumulative, ``+Inf`` last), ``_count`` and ``_sum`` lines."""
        lines, cumulative = [], 0
        for bound, count in zip((*map(repr, self.bounds), "+Inf"), self.counts, strict=True):
            cumulative += count
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {float(cumulative)}')
        return [*lines, f"{name}_count{{{labels}}} {float(cumulative)}",
                f"{name}_sum{{{labels}}} {self.total}"]


class Scheduler:
    """vLLM's admission rule, in miniature: a request runs when a batch slot and its KV blocks
    are free, and waits otherwise; a request that needs more blocks than the whole cache never
    runs (vLLM accepts it and hangs). The counters move only with requests really served."""

    def __init__(self, gpu_blocks: int, block_size: int, max_num_seqs: int) -> None:
        self.gpu_blocks = gpu_blocks
        self.block_size = block_size
        self.max_num_seqs = max_num_seqs
        self.changed = threading.Condition()
        self.running = 0
        self.waiting = 0
        self.blocks_used = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = 0
        self.latencies = {name: Histogram(bounds) for name, bounds in LATENCY_BUCKETS.items()}

    def blocks_for(self, tokens: int) -> int:
        return max(1, math.ceil(tokens / self.block_size))

    def serving(self, prompt: int, generated: int) -> ServedRequest:
        return ServedRequest(self, prompt, generated)

    def snapshot(self) -> dict:
        with self.changed:
            return {"running": self.running, "waiting": self.waiting,
                    "usage": self.blocks_used / self.gpu_blocks if self.gpu_blocks else 0.0,
                    "prompt": self.prompt_tokens, "generation": self.generation_tokens,
                    "finished": self.finished,
                    "latencies": {name: histogram.copy()
                                  for name, histogram in self.latencies.items()}}


class ServedRequest:
    """One request's stay in the scheduler: waiting, then running and holding its blocks."""

    def __init__(self, scheduler: Scheduler, prompt: int, generated: int) -> None:
        self.scheduler = scheduler
        self.prompt = prompt
        self.generated = generated
        self.blocks = scheduler.blocks_for(prompt + generated)
        self.arrived = time.monotonic()
        self.started = self.arrived

    def fits(self) -> bool:
        scheduler = self.scheduler
        return (scheduler.running < scheduler.max_num_seqs
                and scheduler.blocks_used + self.blocks <= scheduler.gpu_blocks)

    def __enter__(self) -> ServedRequest:
        scheduler = self.scheduler
        with scheduler.changed:
            scheduler.waiting += 1
            scheduler.changed.wait_for(self.fits)
            scheduler.waiting -= 1
            scheduler.running += 1
            scheduler.blocks_used += self.blocks
        self.started = time.monotonic()
        return self

    def __exit__(self, *exc_info: object) -> None:
        scheduler = self.scheduler
        with scheduler.changed:
            scheduler.running -= 1
            scheduler.blocks_used -= self.blocks
            scheduler.prompt_tokens += self.prompt
            scheduler.generation_tokens += self.generated
            scheduler.finished += 1
            self.observe_latencies(time.monotonic())
            scheduler.changed.notify_all()

    def observe_latencies(self, ended: float) -> None:
        """As vLLM times a request: its first token right after it starts running (the stub's
        prefill is instant), its other tokens evenly over the rest of its stay."""
        latencies = self.scheduler.latencies
        latencies["vllm:time_to_first_token_seconds"].observe(self.started - self.arrived)
        latencies["vllm:e2e_request_latency_seconds"].observe(ended - self.arrived)
        if self.generated > 1:
            latencies["vllm:inter_token_latency_seconds"].observe(
                (ended - self.started) / (self.generated - 1), self.generated - 1)


def exposition(stub: Stub) -> str:
    """`/metrics` as vLLM's V1 engine writes it, for the figures the stub keeps."""
    now = stub.scheduler.snapshot()
    labels = f'engine="0",model_name="{stub.served_names[0]}"'
    cache = (f'block_size="{stub.scheduler.block_size}",cache_dtype="auto",engine="0",'
             f'gpu_memory_utilization="{stub.gpu_memory_utilization}",num_cpu_blocks="None",'
             f'num_gpu_blocks="{stub.scheduler.gpu_blocks}",num_gpu_blocks_override='
             f'"{stub.scheduler.gpu_blocks}"')
    families = [
        ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
         [(labels, now["running"])]),
        ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         [(labels, now["waiting"])]),
        ("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage."
         "DEPRECATED: Use vllm:kv_cache_usage_perc instead.", [(labels, now["usage"])]),
        ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
         [(labels, now["usage"])]),
        ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         [(labels, now["prompt"])]),
        ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         [(labels, now["generation"])]),
        ("vllm:request_success_total", "counter", "Count of successfully processed requests.",
         [(f'{labels},finished_reason="stop"', now["finished"])]),
        ("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig",
         [(cache, 1)]),
    ]
    families.append(("vllm:num_preemptions_total", "counter",
                     "Cumulative number of preemption from the engine.", [(labels, 0)]))
    lines = []
    for name, kind, help_text, samples in families:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{{{sample_labels}}} {float(value)}" for sample_labels, value in samples]
    for name, histogram in now["latencies"].items():
        lines += [f"# HELP {name} {LATENCY_HELP[name]}", f"# TYPE {name} histogram",
                  *histogram.lines(name, labels)]
    return "\n".join(lines) + "\n"


def error_body(status: HTTPStatus, message: str, kind: str, param: str | None = None) -> dict:
    """vLLM's error shape; ``param`` names the field at fault as vLLM does (``model``,
    ``input_tokens``, ``body.<field>`` for a request that fails validation)."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status.value}}


class Handler(BaseHTTPRequestHandler):
    """Routes vLLM's endpoints; every answer goes through `answer` (delay, length, keep-alive)."""

    protocol_version = "HTTP/1.1"
    server_version = "stub-vllm"
    # As vLLM's server (uvicorn, asyncio: TCP_NODELAY): an answer's headers and body go out
    # at once, never 40 ms apart behind the client's delayed ACK on a reused connection.
    disable_nagle_algorithm = True
    stub: Stub

    def setup(self) -> None:
        super().setup()
        if self.stub.behaviour.round_trip_s:
            self.rfile.close()
            self.rfile = io.BufferedReader(ArrivalReader(self.connection))

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/health":
            self.health()
        elif path == "/metrics":
            # What vLLM 0.32's prometheus_client sends (the text format, version 1.0.0).
            self.answer(HTTPStatus.OK, self.stub.metrics().encode(),
                        "text/plain; version=1.0.0; charset=utf-8")
        elif path == "/v1/models":
            if self.check_auth():
                self.answer_json(HTTPStatus.OK, self.stub.models())
        elif path == "/stub/devices":
            self.answer_json(HTTPStatus.OK, self.stub.devices())
        elif path in ("/v1/chat/completions", "/v1/completions"):
            self.answer_json(HTTPStatus.METHOD_NOT_ALLOWED, {"detail": "Method Not Allowed"})
        else:
            self.answer_json(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urlsplit(self.path).path
        if path == "/v1/chat/completions":
            if self.check_auth():
                self.chat(body)
        elif path == "/v1/completions":
            if self.check_auth():
                self.text(body)
        elif path in ("/health", "/metrics", "/v1/models"):
            self.answer_json(HTTPStatus.METHOD_NOT_ALLOWED, {"detail": "Method Not Allowed"})
        else:
            self.answer_json(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})

    def health(self) -> None:
        """An empty answer without a content type, as vLLM's."""
        if self.stub.behaviour.fail == "health_500":
            self.answer(HTTPStatus.INTERNAL_SERVER_ERROR, b"", None)
        else:
            self.answer(HTTPStatus.OK, b"", None)

    def check_auth(self) -> bool:
        if self.stub.authorized(self.headers.get("Authorization")):
            return True
        self.answer_json(HTTPStatus.UNAUTHORIZED, {"error": "Unauthorized"})
        return False

    def chat(self, body: bytes) -> None:
        request = self.valid_request(body, "messages", list, "expected a JSON object with messages")
        if request is None:
            return
        if request.get("stream"):
            self.stream(request, chat_chunks(self.stub, request))
            return
        answer = self.stub.completion(request)
        with self.stub.scheduler.serving(answer["usage"]["prompt_tokens"],
                                         answer["usage"]["completion_tokens"]):
            time.sleep(self.stub.behaviour.generation_delay_s)
        # Out of the scheduler first, as vLLM counts a request finished before its answer goes
        # out: a client that reads /metrics right after its answer sees it counted.
        self.answer_json(HTTPStatus.OK, answer)

    def text(self, body: bytes) -> None:
        """`/v1/completions`: a text prompt (a string or a list of them), answered as chat is."""
        request = self.valid_request(body, "prompt", (str, list),
                                     "expected a JSON object with a prompt")
        if request is None:
            return
        if request.get("stream"):
            self.stream(request, text_chunks(self.stub, request))
            return
        answer = text_completion(self.stub, request)
        with self.stub.scheduler.serving(answer["usage"]["prompt_tokens"],
                                         answer["usage"]["completion_tokens"]):
            time.sleep(self.stub.behaviour.generation_delay_s)
        self.answer_json(HTTPStatus.OK, answer)

    def valid_request(self, body: bytes, field: str, kind: type | tuple[type, ...],
                      problem: str) -> dict | None:
        """The request when vLLM would take it; else its refusal is sent and None returned."""
        try:
            request = json.loads(body or b"null")
        except ValueError:
            request = None
        if not isinstance(request, dict) or not isinstance(request.get(field), kind):
            # vLLM's request validation answers with the type "Bad Request".
            self.answer_json(HTTPStatus.BAD_REQUEST,
                             error_body(HTTPStatus.BAD_REQUEST, problem, "Bad Request",
                                        f"body.{field}"))
            return None
        model = request.get("model")
        if model is not None and model not in self.stub.served_names:
            self.answer_json(
                HTTPStatus.NOT_FOUND,
                error_body(
                    HTTPStatus.NOT_FOUND, f"The model `{model}` does not exist. Valid aliases: "
                    f"{', '.join(self.stub.served_names)}.", "NotFoundError", "model"
                ),
            )
            return None
        if prompt_tokens(request) > self.stub.max_model_len:
            self.answer_json(HTTPStatus.BAD_REQUEST, too_long(self.stub, request))
            return None
        return request

    def stream(self, request: dict, chunks: Iterator[dict]) -> None:
        """Server-sent events as vLLM sends them (chunked, one `data:` line per chunk, paced by
        token_delay_s, `data: [DONE]` last), holding the request's place in the scheduler until
        the last token, so /metrics sees a stream as running while it is in flight. A client
        that hangs up ends the stream, as vLLM aborts the request."""
        words, _ = self.stub.answer_words(request)
        behaviour = self.stub.behaviour
        with self.stub.scheduler.serving(prompt_tokens(request), len(words)):
            self.before_answer()
            time.sleep(behaviour.generation_delay_s)
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for index, chunk in enumerate(chunks):
                    if index and behaviour.token_delay_s:
                        time.sleep(behaviour.token_delay_s)
                    self.send_event(f"data: {json.dumps(chunk)}\n\n".encode())
                self.send_event(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                say("client hung up during a stream")

    def send_event(self, event: bytes) -> None:
        """One event as one chunk of the chunked body, so the client reads it at once."""
        self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")

    def answer_json(self, status: HTTPStatus, payload: object) -> None:
        self.answer(status, json.dumps(payload).encode(), "application/json")

    def answer(self, status: HTTPStatus, body: bytes,
               content_type: str | None = "text/plain") -> None:
        self.before_answer()
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def before_answer(self) -> None:
        """What the behaviour file puts before an answer: the server's own time
        (answer_delay_s), and the path's round trip since the request's bytes arrived."""
        behaviour = self.stub.behaviour
        if behaviour.answer_delay_s:
            time.sleep(behaviour.answer_delay_s)
        if behaviour.round_trip_s:
            until_back(self.rfile.raw.arrived + behaviour.round_trip_s)

    def log_message(self, format: str, *args: object) -> None:
        # The request line and status only: headers (and so the bearer) are never logged.
        say(f"{self.address_string()} {format % args}")


class ArrivalReader(socket.SocketIO):
    """A connection's reading side that notes when its last bytes arrived: a request read
    from them arrived then (requests pipelined in one flight arrive together)."""

    arrived = 0.0

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock, "rb")

    def readinto(self, buffer) -> int | None:
        count = super().readinto(buffer)
        if count:
            self.arrived = time.monotonic()
        return count


def until_back(moment: float) -> None:
    """Sleep until ``moment`` (time.monotonic), if it is still ahead."""
    left = moment - time.monotonic()
    if left > 0:
        time.sleep(left)


class StubServer(ThreadingHTTPServer):
    daemon_threads = True
    # The stdlib default backlog (5) drops connections when many probes arrive at once.
    request_queue_size = 128
    # With --ssl-keyfile and --ssl-certfile: the context each new connection is wrapped in,
    # and what keeps a reload of it apart from a connection taking its certificate (vLLM's
    # event loop does one thing at a time).
    tls: ssl.SSLContext | None = None
    tls_lock = threading.Lock()

    def finish_request(self, request, client_address) -> None:
        """The TLS handshake runs in the connection's own thread, as vLLM's (uvicorn's) does
        per connection, so one slow client never holds up the others."""
        if self.tls is not None:
            try:
                self.hello_round_trip(request)
                with self.tls_lock:  # the connection copies the context's key and certificate
                    request = self.tls.wrap_socket(request, server_side=True,
                                                   do_handshake_on_connect=False)
                request.do_handshake()
            except (ssl.SSLError, OSError) as exc:
                say(f"{client_address[0]} TLS handshake failed: {exc}")
                return
            say(f"{client_address[0]} TLS handshake "
                f"({'resumed' if request.session_reused else 'full'})")
        super().finish_request(request, client_address)

    def hello_round_trip(self, request: socket.socket) -> None:
        """With round_trip_s, the box's first handshake flight leaves that long after the
        client's ClientHello arrived (TLS 1.3: one round trip before the client may send)."""
        round_trip = self.RequestHandlerClass.stub.behaviour.round_trip_s
        if round_trip and request.recv(1, socket.MSG_PEEK):
            time.sleep(round_trip)


def tls_context(keyfile: str, certfile: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile, keyfile)
    return context


def refresh_tls(server: StubServer, keyfile: str, certfile: str, every_s: float = 1.0) -> None:
    """--enable-ssl-refresh: as vLLM does, load the key and certificate again into the
    context in use when either file changes; connections open keep their session, new ones
    get the new certificate."""
    def stamp() -> tuple[float, ...]:
        try:
            return tuple(os.stat(path).st_mtime_ns for path in (keyfile, certfile))
        except OSError:
            return ()

    seen = stamp()
    while True:
        time.sleep(every_s)
        now = stamp()
        if now and now != seen:
            seen = now  # as vLLM's file watch: the next change, not this one, loads again
            try:
                with server.tls_lock:
                    server.tls.load_cert_chain(certfile, keyfile)
            except (ssl.SSLError, OSError) as exc:
                say(f"certificate not reloaded: {exc}")
                continue
            say("certificate reloaded")


def make_server(stub: Stub, host: str) -> StubServer:
    handler = type("BoundHandler", (Handler,), {"stub": stub})
    server_class = StubServer
    if ":" in host:
        server_class = type("StubServerV6", (StubServer,), {"address_family": socket.AF_INET6})
    return server_class((host, stub.port), handler)


def serve(argv: list[str]) -> int:
    args, ignored = parse_args(argv)
    behaviour_file = os.environ.get("STUB_VLLM_BEHAVIOUR", DEFAULT_BEHAVIOUR_FILE)
    behaviour = load_behaviour(behaviour_file, args.port)
    if args.api_key is not None:
        say("--api-key on the command line is ignored: pass the key in VLLM_API_KEY")
    known = known_options()
    unknown = [] if known is None else unrecognized(ignored, known)
    if unknown:
        # vLLM's argparse error, word for word, and its exit status.
        print(f"vllm: error: unrecognized arguments: {' '.join(unknown)}", file=sys.stderr)
        return 2
    if known is None:
        say("no list of vLLM's options found: every option is taken")
    if ignored:
        say(f"ignoring arguments the stub has no use for: {' '.join(ignored)}")
    if behaviour.fail == "exit":
        say("failing at start, as the behaviour file says (fail=exit)")
        return 1
    refused = refused_argument(argv, behaviour.refuse_args)
    if refused is not None:
        say(f"error: argument {refused} refused (refuse_args in the behaviour file)")
        return 2
    if bool(args.ssl_keyfile) != bool(args.ssl_certfile):
        say("error: --ssl-keyfile and --ssl-certfile go together")
        return 2
    problem = context_problem(args)
    if problem is not None:
        say(f"error: {problem}")
        return 1
    stub = Stub(args, behaviour)
    say(f"loading {stub.model} (takes {behaviour.load_delay_s} s)")
    time.sleep(behaviour.load_delay_s)
    try:
        server = make_server(stub, args.host)
    except OSError as exc:
        say(f"cannot listen on {args.host}:{args.port}: {exc}")
        return 1
    if args.ssl_certfile:
        try:
            server.tls = tls_context(args.ssl_keyfile, args.ssl_certfile)
        except (ssl.SSLError, OSError) as exc:
            say(f"error: cannot load the TLS key and certificate: {exc}")
            return 1
        if args.enable_ssl_refresh:
            threading.Thread(target=refresh_tls, daemon=True,
                             args=(server, args.ssl_keyfile, args.ssl_certfile)).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    scheme = "https" if server.tls else "http"
    say(f"serving {', '.join(stub.served_names)} on {scheme}://{args.host}:{args.port} for box "
        f"{stub.box}")
    try:
        server.serve_forever()
    finally:
        server.server_close()
        say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
