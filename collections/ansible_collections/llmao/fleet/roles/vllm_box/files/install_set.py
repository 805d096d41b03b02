#!/usr/bin/env python3
"""Turn a box's assignment from llmao into Supervisor programs that run vLLM.

The box program of llmao fleet. A box boots from a template that knows only the
fleet key and llmao's URL; this program asks llmao what the box should serve,
checks that it fits, divides the card between the servers, writes one
Supervisor program per server, hands over to supervisord and exits. Restarts
are Supervisor's job, not ours. The push path (role ``vllm_box``) copies an
assignment to the box and runs this same program with ``--payload``, so both
paths leave byte-identical programs.

Standard library only: it runs with the ``python3`` of a stock vLLM container.

Steps
  1. fetch   ``GET $LLMAO_URL/vllm/config`` with the fleet key and the box name,
             TLS verified with the default context (``SSL_CERT_FILE`` works);
             network errors and 5xx are retried with capped exponential backoff,
             4xx are not. ``--payload FILE`` (``-`` = stdin) applies a given
             assignment instead: no URL, no key, nothing reported. Every call
             presents the box token kept from llmao's first answer
             (``X-LLMAO-Box-Token``, docs/box-identity.md); a token llmao hands out
             is kept, 0600 (never on ``--dry-run``). A name bound to another box
             is refused in one line, nothing written. While it keeps no box token,
             the fetch presents ``LLMAO_BOOTSTRAP_TOKEN`` (an admin's one-time
             enrollment of the name) in ``X-LLMAO-Bootstrap-Token``; nothing else
             does, and no dry run or follow program ever does (it works once).
             A 429 with ``Retry-After`` (any call) is waited out, within
             ``LLMAO_RETRY_AFTER_MAX_S`` in all; one line says how long.
  2. place    read every card (``nvidia-smi --query-gpu=index,uuid,name,
             memory.total,memory.free``) and give each server ``gpus`` cards
             (default 1): servers spanning more cards first, then row order; servers
             share a card while its memory division holds; the same assignment on
             the same cards is placed the same way every run. Too few cards, or no
             placement that holds: exit 1, nothing written. One card: all on it.
     preflight  per card, the sum of ``vram_gb`` (per card) of the servers placed
             on it against its free memory, and the sum of ``disk_gb`` against the
             free space of DATA_DIRECTORY. Sizes are GiB. It runs only when the
             programs would change: an unchanged assignment is already running and
             holds what it once checked for. A box without ``nvidia-smi`` is
             refused (exit 1, nothing written): the programs run vLLM's CUDA build,
             which cannot start there. An ``nvidia-smi`` that fails, or nothing to
             check, is not a failure (nothing is placed then).
  3. divide  per card: servers that pin ``gpu_memory_utilization`` keep it; the
             others share ``0.9 - pinned``: each its weights (``vram_gb`` / card)
             plus a share of the rest, weighted by ``max_model_len`` when all have
             one. A server on several cards takes the smallest of its shares. On a
             box of several cards each program gets ``CUDA_VISIBLE_DEVICES`` (its
             cards by nvidia-smi's index, with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``),
             and ``--tensor-parallel-size <gpus>`` unless its args set the sizes.
  4. write   ``$SUPERVISOR_CONF_DIR/llmao-<name>.conf`` (0600, atomic), remove the
             ``llmao-*.conf`` of an earlier assignment, then ``supervisorctl reread``
             and ``update`` when anything changed: supervisord adds new programs,
             restarts rewritten ones and drops removed ones, and starts nothing
             else (a program stopped by hand stays stopped: restarts are
             Supervisor's). The push role hands over through this same step. Only
             files whose first line is the marker are ever touched. A fetched
             assignment that carries ``rollout`` also gets the follow program,
             ``llmao-follow.conf`` (below); ``--payload`` never does.
  5. record  ``$DATA_DIRECTORY/llmao/applied.json`` (no secret; ``rollout`` too when
             the assignment has it; the cards and the placement when nvidia-smi
             answered) and, when fetched, ``POST $LLMAO_URL/vllm/applied`` with the
             same cards and placement; a failed report is only a warning.

Box TLS (docs/box-tls.md)
  When llmao's config has ``box_tls``, the payload carries ``tls`` (``ca_sha256``,
  ``leaf_days``). Before writing the programs, the box makes its key with the
  ``openssl`` command (EC P-256, ``$DATA_DIRECTORY/llmao/tls/key.pem``, 0600; it never
  leaves the box), sends a certificate request to ``POST /vllm/cert`` and keeps the
  certificate and the CA beside it, after checking that the certificate fits the key, the
  CA is the one the payload names, and the certificate chains to it (``openssl verify``:
  a leaf that does not is refused, nothing installed). vLLM runs with ``--ssl-keyfile``,
  ``--ssl-certfile`` and ``--enable-ssl-refresh`` (it reloads the files when they change,
  so a renewal restarts nothing). A certificate is asked for when missing, from another
  CA, or with less than a third of its life left: at boot, and by the follow program at
  every check. No ``openssl``: refused, nothing written. A pushed box cannot ask (no URL,
  no key): ``--payload FILE --cert-request`` prints why a certificate is due and a request
  for the box's key (made here), the controller has llmao sign it, and ``--payload FILE
  --certificate ANSWER`` checks and keeps the answer as above, then applies.

Following (``--follow``, run by the follow program)
  When llmao's config sets ``rollout.follow_s``, the payload carries ``rollout``
  (``follow_s``, ``drain_s``) and the box keeps following it. The follow program is
  ``<python3> <this file> --follow`` under Supervisor (autorestart), with this run's
  environment (FLEET_KEY included, so the file is 0600) and its log in
  ``$DATA_DIRECTORY/llmao/follow.log``, one UTC-stamped line per step. Its text does
  not depend on the revision, so applying one never restarts it. The loop:
  every ``follow_s`` x uniform(0.8, 1.2) s a check, ``GET /vllm/config`` with
  ``If-None-Match: "<applied revision>"``; 304 is current. Another revision: the
  apply's own planning says which servers' programs change or go; none: applied at
  once; else ``POST /vllm/turn`` with them, asked again every ``follow_s`` while
  not granted, polled every min(follow_s, 2) s once granted, until llmao says
  ``apply`` (409: llmao intends another revision, start over). Then a real fetch
  (no If-None-Match) and, if it is still that revision, steps 2 to 5 exactly as at
  boot; a change to the follow program itself is handed over last, after the
  report (handing it over stops this very process). Errors are one line each and
  the next check backs off (the period doubled per error, up to 900 s); never a
  traceback.

Environment
  LLMAO_URL            llmao's base URL, https (http only to a loopback address)
  FLEET_KEY            the shared fleet key (never printed)
  LLMAO_HOST           the box's name in fleet.hosts, sent as X-LLMAO-Host;
                       unset: llmao goes by the address it sees
  DATA_DIRECTORY       logs, HF cache and the applied record (default /data)
  SUPERVISOR_CONF_DIR  where the programs go (default /etc/supervisor/conf.d)
  VLLM_BIN             the vLLM executable the programs run (default vllm)
  VLLM_HOST            the address vLLM binds (default 0.0.0.0); one box per
                       loopback address when several share a machine
  LLMAO_FETCH_ATTEMPTS     attempts per request (default 8)
  LLMAO_FETCH_BACKOFF_S    first retry delay, doubled each time up to 60 s (default 2)
  LLMAO_FETCH_TIMEOUT_S    deadline of one whole request: connect, headers, body (default 30)
  LLMAO_RETRY_AFTER_MAX_S  the most seconds one run waits in all for llmao's 429
                       Retry-After (default 900; 0: never wait, stop at once)
  LLMAO_BOOTSTRAP_TOKEN  the one-time token an admin minted for this box's name
                       (llmao-server enroll <name>); sent only on a fetch while no
                       box token is kept, never printed, never written, never
                       given to the follow program
  LLMAO_TOKEN_FILE     where the box token is kept (default: under /workspace on
                       RunPod, whose volume alone survives a restart; else
                       $DATA_DIRECTORY/llmao/box-token)
  CONTAINER_ID, RUNPOD_POD_ID   the provider's instance id (Vast, RunPod), sent as
                       X-LLMAO-Box-Instance: llmao keeps it with the binding
  SSL_CERT_FILE, SSL_CERT_DIR, PATH    only passed on to the follow program

Exit codes
  0  done, or nothing to change
  1  the assignment does not fit this box, or the box has no nvidia-smi;
     nothing written
  2  refused: llmao answered 403, 404 or another 4xx, the assignment is
     malformed or hostile (see docs/box-protocol.md), an existing file is
     not ours, or the environment is wrong (LLMAO_HOST or FLEET_KEY not
     printable ASCII, say); one line on stderr, never a traceback
  3  llmao unreachable after the retries (network errors, 5xx), or it asks
     (429 Retry-After) for a longer wait than LLMAO_RETRY_AFTER_MAX_S leaves
  4  programs written but the supervisorctl handover failed; the applied
     record is not written, so the next run hands over again
"""

# Built by scripts/build_box_program.py (make box-program) from roles/vllm_box/files/box_program/
# and the core's module_utils it imports: edit those, then build; never this file.

from __future__ import annotations

import argparse
import calendar
import contextlib
import dataclasses
import difflib
import functools
import hashlib
import ipaddress
import itertools
import json
import math
import os
import random
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from http.client import HTTPException
from pathlib import Path
from typing import Any, NoReturn

# ---- plugins/module_utils/box_protocol.py
# The box API's wire facts: the names llmao and a box must agree on, each said once.
#
# llmao-server answers these paths and reads these headers; the box program
# (``roles/vllm_box/files/install_set.py``) calls and sends them. The box program
# runs on a box with the standard library alone, so this module imports nothing
# else: its build (``scripts/build_box_program.py``) copies this very file into the
# one file a box fetches, and the server and the modules import it. A change here
# changes both sides at once (docs/box-protocol.md, docs/box-identity.md).


# The box API: the assignment, the applied report, a following box's turn, its certificate.
BOX_API_PREFIX = "/vllm/"
CONFIG_PATH = "/vllm/config"
APPLIED_PATH = "/vllm/applied"
TURN_PATH = "/vllm/turn"
CERT_PATH = "/vllm/cert"
BOX_API_PATHS = (CONFIG_PATH, APPLIED_PATH, TURN_PATH, CERT_PATH)

# The box's name as it claims it (else llmao goes by the address it sees).
HOST_HEADER = "X-LLMAO-Host"
# The box token llmao hands out in an answer and the box presents on every later call.
TOKEN_HEADER = "X-LLMAO-Box-Token"
# The provider's instance id the box reports, kept with its binding.
INSTANCE_HEADER = "X-LLMAO-Box-Instance"
# The one-time token of an admin's enrollment, presented once on the fetch that binds.
BOOTSTRAP_HEADER = "X-LLMAO-Bootstrap-Token"


def environ_key(header: str) -> str:
    """Where a WSGI server keeps a request header (PEP 3333: ``HTTP_``, then the name
    upper-cased with ``-`` as ``_``)."""
    return "HTTP_" + header.upper().replace("-", "_")


HOST_ENVIRON = environ_key(HOST_HEADER)
TOKEN_ENVIRON = environ_key(TOKEN_HEADER)
INSTANCE_ENVIRON = environ_key(INSTANCE_HEADER)
BOOTSTRAP_ENVIRON = environ_key(BOOTSTRAP_HEADER)

# A box or bootstrap token as llmao mints it: ``secrets.token_urlsafe(TOKEN_BYTES)``, 43
# URL-safe characters. A box presents nothing of another shape (a damaged token file), and
# refuses such a bootstrap token before spending a call on it.
TOKEN_BYTES = 32
BOX_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{32,128}\Z")


def is_box_token(value: object) -> bool:
    """Whether ``value`` has the shape of a box or bootstrap token llmao mints."""
    return isinstance(value, str) and BOX_TOKEN_RE.match(value) is not None


# The most days a box's certificate (leaf) may live: box_tls.leaf_days is checked against it
# when the config loads, and a box refuses a payload asking for more.
MAX_LEAF_DAYS = 90

# Where a box finds its provider's instance id (Vast, RunPod), the first that is set, and the
# longest id llmao keeps.
INSTANCE_ENV = ("CONTAINER_ID", "RUNPOD_POD_ID")
MAX_INSTANCE = 128
# The box's environment variable that carries an enrollment's bootstrap token.
BOOTSTRAP_ENV = "LLMAO_BOOTSTRAP_TOKEN"


# ---- plugins/module_utils/payload_rules.py
# What a box's assignment may hold: the rules the loaders check and the box program applies.
#
# Whatever loads must be accepted by the box, or a config that llmao serves would
# strand a box at boot. The box program (``roles/vllm_box/files/install_set.py``)
# runs with the standard library alone, so this module imports nothing else: the
# program's build (``scripts/build_box_program.py``) carries it into the one file a
# box fetches, and the box applies these very rules. A property test
# (``tests/reliability/test_config_box_agreement.py``) feeds every config that loads
# to the box.
#
# Every value here ends on a ``vllm serve`` command line or in a Supervisor
# program, so the rules refuse what would change its meaning there: control,
# format and line-separator characters (a Supervisor line split in two, a name
# that reads differently than it runs, a lone surrogate that cannot be written
# as UTF-8), a value vLLM would read as an option, and unbounded sizes.


# Box names are addresses or provider ids: printable ASCII, sent as the X-LLMAO-Host header.
BOX_NAME_RE = re.compile(r"[!-~]{1,253}\Z")
# A server's name names a Supervisor program and a log file.
SERVER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
# A bearer survives Supervisor's environment= parser intact: no space, quote or apostrophe.
API_KEY_RE = re.compile(r"[!#-&(-~]{1,512}\Z")
# C0 and C1 controls, zero-width and direction marks, line and paragraph separators, bidi
# embeddings and isolates, word joiners, the byte order mark, lone surrogates.
UNSAFE_CHAR_RE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ud800-\udfff]")
MAX_TEXT = 512
MAX_ARGS = 128
MAX_ARG = 4096
MAX_SERVERS = 3
API_KEY_FLAG = "--api-key"
# Upper bounds of the optional recipe numbers; each is also above 0.
# ``gpus`` is the number of cards one server spans (``vram_gb`` is then per card).
NUMBER_LIMITS = {"gpu_memory_utilization": 1, "max_model_len": 10**8, "vram_gb": 10**5,
                 "disk_gb": 10**6, "kv_bytes_per_token": 10**9, "gpus": 16}
INTEGER_NUMBERS = frozenset({"max_model_len", "kv_bytes_per_token", "gpus"})
# The ``vllm serve`` options that split one server over cards, by the size they set; the
# product of the sizes is the number of cards the server spans.
PARALLEL_FLAGS = {"--tensor-parallel-size": "tensor", "-tp": "tensor",
                  "--pipeline-parallel-size": "pipeline", "-pp": "pipeline"}
PARALLEL_SIZE_RE = re.compile(r"[0-9]{1,2}\Z")
# The payload's ``rollout`` object (sent only when boxes follow): its keys and their bounds.
ROLLOUT_LIMITS = {"follow_s": (1, 86400), "drain_s": (0, 3600)}
# A revision names an assignment. llmao makes them short (``intent.REVISION_LENGTH``); a box
# applies one of up to this many characters, and reports and asks turns with what it applied.
MAX_REVISION = 128
# The Supervisor program a following box runs to follow llmao; a server's program is
# ``llmao-<name>``, so while boxes follow, no server may be named so that they clash.
FOLLOW_PROGRAM = "llmao-follow"


def clashes_with_follow_program(server_name: str) -> bool:
    """Whether a server of this name would take the follow program's name on a box."""
    return FOLLOW_PROGRAM in (server_name, f"llmao-{server_name}")


def text_problem(value: str) -> str | None:
    """Why a model id or served name cannot reach ``vllm serve`` as one argument, or None."""
    if not value or len(value) > MAX_TEXT:
        return f"must be 1 to {MAX_TEXT} characters"
    if UNSAFE_CHAR_RE.search(value):
        return "holds a control, format or line-separator character"
    if value != value.strip():
        return "must not start or end with whitespace"
    if value.startswith("-"):
        return "must not start with '-': vLLM would read it as an option"
    return None


def revision_problem(value: object) -> str | None:
    """Why ``value`` is not a revision a box applies (nor one it may report or ask a turn
    for), or None."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_REVISION \
            or UNSAFE_CHAR_RE.search(value):
        return f"must be a string of 1 to {MAX_REVISION} characters without control characters"
    return None


def names_api_key_flag(arg: str) -> bool:
    """Whether vLLM's parser could read ``arg`` (or a value it carries) as ``--api-key``.

    vLLM's ``FlexibleArgumentParser`` turns ``_`` into ``-`` in an option's name
    (up to the first ``.``, which starts a JSON sub-key) and leaves argparse's
    prefix matching on, so ``--api_k=x`` and ``--api-key.x 1`` set the key too.
    ``--model=X`` moves ``X`` to the front, where it is parsed again: values are
    checked as well.
    """
    while arg.startswith("--"):
        option, has_value, value = arg.partition("=")
        option = option.split(".", 1)[0].replace("_", "-")
        if len(option) > 2 and API_KEY_FLAG.startswith(option):
            return True
        if not has_value:
            return False
        arg = value
    return False


def args_problem(args: list[str] | tuple[str, ...]) -> str | None:
    """Why these extra ``vllm serve`` arguments cannot be run as given, or None."""
    if len(args) > MAX_ARGS:
        return f"at most {MAX_ARGS} arguments"
    for arg in args:
        if len(arg) > MAX_ARG:
            return f"an argument is longer than {MAX_ARG} characters"
        if UNSAFE_CHAR_RE.search(arg):
            return f"{arg[:40]!r} holds a control, format or line-separator character"
        if names_api_key_flag(arg):
            return (f"{arg.split('=', 1)[0][:40]!r} would put a bearer on the command line; "
                    "the program passes it as VLLM_API_KEY")
    return None


def parallel_sizes(args: list[str] | tuple[str, ...]) -> tuple[dict[str, int], str | None]:
    """The tensor and pipeline parallel sizes ``args`` set, and why they cannot be read.

    vLLM turns ``_`` into ``-`` in an option's name and lets argparse take an
    abbreviation, so ``--tensor_parallel_size`` counts, and a shortened name is
    refused (write it in full): the box must know exactly what vLLM will read. A
    size is an integer from 1 to 16, given once, as ``--flag N`` or ``--flag=N``.
    """
    sizes: dict[str, int] = {}
    pending = list(args)
    while pending:
        arg = pending.pop(0)
        option, has_value, value = arg.partition("=")
        option = option.replace("_", "-") if option.startswith("--") else option
        kind = PARALLEL_FLAGS.get(option)
        if kind is None:
            if option.startswith("--") and len(option) > 2 and any(
                    flag.startswith(option) for flag in PARALLEL_FLAGS):
                return sizes, (f"{option[:40]!r} abbreviates a parallel size option: "
                               "write it in full")
            continue
        if not has_value:
            value = pending.pop(0) if pending else ""
        if kind in sizes:
            return sizes, f"the {kind} parallel size is set twice"
        if not (PARALLEL_SIZE_RE.match(value) and 1 <= int(value) <= NUMBER_LIMITS["gpus"]):
            return sizes, f"{option} needs an integer from 1 to 16, not {value[:40]!r}"
        sizes[kind] = int(value)
    return sizes, None


def parallel_problem(args: list[str] | tuple[str, ...], gpus: int) -> str | None:
    """Why ``args`` and ``gpus`` disagree on the cards one server spans, or None.

    Without a parallel size in ``args`` the box adds ``--tensor-parallel-size``
    itself (when ``gpus`` is above 1); with one, tensor x pipeline must be ``gpus``.
    """
    sizes, problem = parallel_sizes(args)
    if problem or not sizes:
        return problem
    product = sizes.get("tensor", 1) * sizes.get("pipeline", 1)
    if product != gpus:
        return (f"tensor x pipeline parallel size is {sizes.get('tensor', 1)} x "
                f"{sizes.get('pipeline', 1)} = {product} cards, but gpus is {gpus}: "
                f"set gpus: {product}, or change the sizes")
    return None


# ---- roles/vllm_box/files/box_program/errors.py
# Why the box program stops, as exceptions whose class is the exit code.
#
# Every refusal is raised as one of these and printed as one line by ``main``: a box's
# log shows the reason, never a traceback, and the caller (a provision script, the
# push role, Supervisor) tells the kinds apart by the code alone.


class InstallError(Exception):
    """A reason to stop; its exit code tells the caller which kind."""

    exit_code = 2


class DoesNotFit(InstallError):
    exit_code = 1


class Refused(InstallError):
    exit_code = 2


class Unreachable(InstallError):
    exit_code = 3


class HandoverFailed(InstallError):
    exit_code = 4


# ---- roles/vllm_box/files/box_program/answers.py
# What llmao's refusals say to the operator of a box: one line, and what to do.
#
# llmao answers errors as ``{"error": {"code", "message"}}``; a binding refusal's code
# gets its own advice here (docs/box-identity.md), anything else its message, cleaned
# for a log line.


def refusal(status: int, body: bytes, host: str | None) -> Refused:
    """What a 3xx/4xx from llmao means for the operator, in one message."""
    code = error_code(body) if status == 403 else None
    if code in BINDING_REFUSALS:
        return Refused(f"llmao refused {repr(host) if host else 'this address'} (403 {code}): "
                       + BINDING_REFUSALS[code].format(name=host or "<name>")
                       + "; nothing was written (docs/box-identity.md)")
    if status == 403:
        return Refused("llmao refused the fleet key (403): the template's FLEET_KEY does not "
                       "match llmao's fleet.key")
    if status == 404:
        name = repr(host) if host else "the address llmao sees (LLMAO_HOST is unset)"
        return Refused(f"llmao does not know this box (404): {name} is not in fleet.hosts; "
                       "ask an admin to add it, or to approve it on the dashboard")
    if 300 <= status < 400:
        return Refused(f"llmao answered a redirect ({status}); set LLMAO_URL to the final "
                       "address: the fleet key is not sent on to another one")
    return Refused(f"llmao refused the request ({status}): {server_message(body)}")


# llmao's codes for a call the name's binding refuses (docs/box-protocol.md), and what each
# tells the operator to do.
BOUND_ELSEWHERE = ("the name is bound to another box, the first that fetched it or the one "
                   "enrolled for it. If this box replaced that one, ask an admin to release "
                   "the binding (the dashboard's Release button) or to enroll the name for "
                   "this box, and run again; if not, someone holds the fleet key")
BINDING_REFUSALS = {
    "box_token_required": BOUND_ELSEWHERE,
    "box_token_mismatch": BOUND_ELSEWHERE,
    "box_not_enrolled": "the fleet binds names only through enrollment: ask an admin for a "
                        "bootstrap token (llmao-server enroll {name} --ttl 1h) and set "
                        "LLMAO_BOOTSTRAP_TOKEN (a dry run never presents it: it works once)",
    "bootstrap_token_invalid": "LLMAO_BOOTSTRAP_TOKEN is not this name's: expired, used "
                               "already (a retried first fetch whose answer was lost uses "
                               "it too) or wrong; ask an admin for a new one (llmao-server "
                               "enroll {name} --ttl 1h)",
    "box_pending_elsewhere": "another box, from another address, claimed this name a moment "
                             "ago and its binding is pending; if that box is not yours, ask "
                             "an admin to enroll the name for this box (LLMAO_BOOTSTRAP_TOKEN)",
    "box_reserved": "the name was released for another provider instance, not this one; ask "
                    "an admin to release it for this box or to enroll the name for it",
}


def error_code(body: bytes) -> str | None:
    """The ``error.code`` of llmao's JSON error, when it is a short word."""
    try:
        code = json.loads(body.decode("utf-8", "replace"))["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) and re.fullmatch(r"[a-z_]{1,64}", code) else None


def server_message(body: bytes) -> str:
    """The ``error.message`` of llmao's JSON error, else a short excerpt of the body."""
    text = body.decode("utf-8", "replace")
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text
    return clean_text(str(message)) or "(empty answer)"


def clean_text(text: str) -> str:
    """Text from llmao made fit for one log line: controls blanked, 200 characters at most."""
    return UNSAFE_CHAR_RE.sub(" ", text).strip()[:200]


# ---- roles/vllm_box/files/box_program/box_files.py
# Where the box program writes on the box, and how: atomically, with the final mode.
#
# The names of the files it owns (Supervisor programs marked on their first line, the
# box TLS folder) are kept together, so that what a run may touch is read in one place.


MARKER = "; managed by llmao install_set.py: changes are overwritten"
PROGRAM_GLOB = "llmao-*.conf"

FOLLOW_FILE = f"{FOLLOW_PROGRAM}.conf"

# Box TLS (docs/box-tls.md): the key, certificate and CA under $DATA_DIRECTORY/llmao/tls, and
# what the box knows of its certificate (cert.json). A certificate is renewed once less than a
# third of its life is left; vLLM reloads it in place (--enable-ssl-refresh).
TLS_DIR = "tls"
KEY_FILE, CERT_FILE, CA_FILE, CERT_META = "key.pem", "cert.pem", "ca.pem", "cert.json"


def program_path(conf_dir: Path, name: str) -> Path:
    return conf_dir / f"llmao-{name}.conf"


def atomic_write(path: Path, text: str, mode: int) -> None:
    """Write through a temp file in the same folder, created with the final mode, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


# ---- roles/vllm_box/files/box_program/assignment.py
# The assignment as the box program takes it: JSON checked whole, then frozen dataclasses.
#
# Whatever llmao's config loads, the box must accept, or a config llmao serves would
# strand a box at boot: so the rules themselves are the core's ``payload_rules``
# (built into this program), and this module only walks the JSON, says where a fault
# is, and refuses the assignment whole. A refusal is exit 2 and nothing is written.


OPTIONAL_NUMBERS = tuple(NUMBER_LIMITS)

CA_SHA256_RE = re.compile(r"[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class Server:
    """One vLLM process of the assignment, checked."""

    name: str
    model: str
    served_model_name: str
    port: int
    api_key: str = field(repr=False)
    args: tuple[str, ...] = ()
    gpu_memory_utilization: Decimal | None = None
    max_model_len: int | None = None
    vram_gb: Decimal | None = None
    disk_gb: Decimal | None = None
    # The cards this server spans; ``args`` may set the parallel sizes (then their product
    # is ``gpus``), else the program passes --tensor-parallel-size when it is above 1.
    gpus: int = 1
    sets_parallel: bool = False


@dataclass(frozen=True)
class Assignment:
    host: str
    revision: str | None
    servers: tuple[Server, ...]
    # Present when llmao's config sets rollout.follow_s: the box follows.
    rollout: Rollout | None = None
    # Present when llmao's config has box_tls: vLLM serves HTTPS with a certificate of llmao's.
    tls: BoxTls | None = None


@dataclass(frozen=True)
class Rollout:
    """The payload's ``rollout``: how often the box checks, and llmao's drain time."""

    follow_s: float
    drain_s: float


@dataclass(frozen=True)
class BoxTls:
    """The payload's ``tls``: the fleet CA's fingerprint and how many days a leaf lives."""

    ca_sha256: str
    leaf_days: int


def validate_assignment(doc: Any) -> Assignment:
    """Check the JSON shape of an assignment; refuse it whole with the path of the fault."""
    if not isinstance(doc, dict):
        raise Refused("assignment: must be a JSON object with host and servers")
    host = box_name_field(doc, "host", "assignment")
    revision = doc.get("revision")
    if revision is not None and revision_problem(revision):
        raise Refused(f"assignment.revision: {revision_problem(revision)}")
    entries = doc.get("servers")
    if not isinstance(entries, list):
        raise Refused("assignment.servers: must be a list")
    if len(entries) > MAX_SERVERS:
        raise Refused(f"assignment.servers: a box runs at most {MAX_SERVERS} servers, "
                      f"this assignment has {len(entries)}")
    servers = tuple(validate_server(entry, f"servers[{i}]") for i, entry in enumerate(entries))
    for key in ("name", "port"):
        seen: set[Any] = set()
        for i, server in enumerate(servers):
            value = getattr(server, key)
            if value in seen:
                raise Refused(f"servers[{i}].{key}: {value!r} appears twice")
            seen.add(value)
    rollout = validate_rollout(doc["rollout"], "assignment.rollout") if "rollout" in doc \
        else None
    if rollout is not None:
        for i, server in enumerate(servers):
            if clashes_with_follow_program(server.name):
                raise Refused(f"servers[{i}].name: {server.name!r} is the follow program's "
                              f"name ({FOLLOW_FILE}) while boxes follow; rename the server")
    tls = validate_tls(doc["tls"], "assignment.tls") if "tls" in doc else None
    return Assignment(host=host, revision=revision, servers=servers, rollout=rollout, tls=tls)


def validate_tls(value: Any, where: str) -> BoxTls:
    """Exactly ``ca_sha256`` (64 lowercase hex digits) and ``leaf_days`` (1 to 90)."""
    if not isinstance(value, dict) or set(value) != {"ca_sha256", "leaf_days"}:
        raise Refused(f"{where}: must be an object with exactly ca_sha256 and leaf_days")
    digest, days = value["ca_sha256"], value["leaf_days"]
    if not (isinstance(digest, str) and CA_SHA256_RE.match(digest)):
        raise Refused(f"{where}.ca_sha256: must be 64 lowercase hexadecimal digits")
    if isinstance(days, bool) or not isinstance(days, (int, Decimal)) \
            or days != int(days) or not 1 <= days <= MAX_LEAF_DAYS:
        raise Refused(f"{where}.leaf_days: must be an integer from 1 to {MAX_LEAF_DAYS}")
    return BoxTls(digest, int(days))


def validate_rollout(value: Any, where: str) -> Rollout:
    """Exactly ``follow_s`` and ``drain_s``, each a finite number within its bounds.

    The follow program sleeps these, so anything else would make it spin or hang.
    """
    if not isinstance(value, dict) or set(value) != set(ROLLOUT_LIMITS):
        raise Refused(f"{where}: must be an object with exactly "
                      f"{' and '.join(ROLLOUT_LIMITS)}")
    numbers = {}
    for key, (low, high) in ROLLOUT_LIMITS.items():
        number = value[key]
        if isinstance(number, bool) or not isinstance(number, (int, float, Decimal)) \
                or not math.isfinite(number) or not low <= number <= high:
            raise Refused(f"{where}.{key}: must be a finite number from {low} to {high}")
        numbers[key] = float(number)
    return Rollout(**numbers)


def validate_server(entry: Any, where: str) -> Server:
    if not isinstance(entry, dict):
        raise Refused(f"{where}: must be an object")
    name = entry.get("name")
    if not (isinstance(name, str) and SERVER_NAME_RE.match(name)):
        raise Refused(f"{where}.name: {shown(name)} must be letters, digits, . _ - (at most 64, "
                      "not starting with . _ -): it names a Supervisor program and a log file")
    box_name_field(entry, "host", where)
    port = entry.get("port")
    if not (isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536):
        raise Refused(f"{where}.port: must be an integer from 1 to 65535")
    api_key = entry.get("api_key")
    if not (isinstance(api_key, str) and API_KEY_RE.match(api_key)):
        raise Refused(f"{where}.api_key: must be 1 to 512 printable ASCII characters without "
                      "spaces or quotes")
    numbers = {key: number_field(entry, key, where) for key in OPTIONAL_NUMBERS}
    max_model_len = numbers["max_model_len"]
    args = normalize_args(entry.get("args", []), f"{where}.args")
    gpus = 1 if numbers["gpus"] is None else int(numbers["gpus"])
    problem = parallel_problem(args, gpus)
    if problem:
        raise Refused(f"{where}.args: {problem}")
    return Server(
        name=name,
        model=command_line_field(entry, "model", where),
        served_model_name=command_line_field(entry, "served_model_name", where),
        port=port,
        api_key=api_key,
        args=args,
        gpu_memory_utilization=numbers["gpu_memory_utilization"],
        max_model_len=None if max_model_len is None else int(max_model_len),
        vram_gb=numbers["vram_gb"],
        disk_gb=numbers["disk_gb"],
        gpus=gpus,
        sets_parallel=bool(parallel_sizes(args)[0]),
    )


def shown(value: Any) -> str:
    """A refused value as a message quotes it: short, control characters escaped."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def box_name_field(entry: dict, key: str, where: str) -> str:
    value = entry.get(key)
    if not (isinstance(value, str) and BOX_NAME_RE.match(value)):
        raise Refused(f"{where}.{key}: must be a box name, 1 to 253 printable ASCII characters "
                      "without spaces")
    return value


def command_line_field(entry: dict, key: str, where: str) -> str:
    """A value that becomes one ``vllm serve`` argument in a Supervisor program."""
    value = entry.get(key)
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise Refused(f"{where}.{key}: must be a string of 1 to {MAX_TEXT} characters")
    problem = text_problem(value)
    if problem:
        raise Refused(f"{where}.{key}: {problem}")
    return value


def number_field(entry: dict, key: str, where: str) -> Decimal | None:
    """An optional recipe number above 0 and within its bound, as an exact Decimal.

    ``max_model_len`` and ``kv_bytes_per_token`` must be JSON integers.
    """
    value = entry.get(key)
    if value is None:
        return None
    limit = NUMBER_LIMITS[key]
    if key in INTEGER_NUMBERS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Refused(f"{where}.{key}: must be an integer from 1 to {limit}")
    elif isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise Refused(f"{where}.{key}: must be a finite number above 0 and at most {limit}")
    number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    if not number.is_finite():
        raise Refused(f"{where}.{key}: must be a finite number above 0 and at most {limit}")
    if not 0 < number <= limit:
        raise Refused(f"{where}.{key}: must be above 0 and at most {limit}")
    return number


def normalize_args(value: Any, where: str) -> tuple[str, ...]:
    """Extra ``vllm serve`` arguments: a list of strings, or one string split like a shell."""
    if isinstance(value, str):
        if len(value) > MAX_ARGS * MAX_ARG:
            raise Refused(f"{where}: longer than {MAX_ARGS * MAX_ARG} characters")
        try:
            args = shlex.split(value)
        except ValueError as exc:
            raise Refused(f"{where}: cannot split {shown(value)}: {exc}") from None
    elif isinstance(value, list) and all(isinstance(arg, str) for arg in value):
        args = list(value)
    else:
        raise Refused(f"{where}: must be a list of strings or one string")
    problem = args_problem(args)
    if problem:
        raise Refused(f"{where}: {problem}")
    return tuple(args)


# ---- roles/vllm_box/files/box_program/cards.py
# The box's cards as nvidia-smi names them, and the preflight against their memory.
#
# The preflight runs before anything is written: a server that cannot fit the cards or
# the disk is exit 1, nothing written, rather than a vLLM that fails at start.


# What the preflight asks nvidia-smi, one line per card.
CARD_QUERY = "index,uuid,name,memory.total,memory.free"
MAX_CARDS = 64
CARD_NUMBER_RE = re.compile(r"[0-9]{1,9}\Z")
CARD_UUID_RE = re.compile(r"[A-Za-z0-9-]{1,96}\Z")


@dataclass(frozen=True)
class Card:
    """One GPU as nvidia-smi numbers and names it; its memory in GiB."""

    index: int
    uuid: str
    name: str
    total_gb: Decimal
    free_gb: Decimal
    total_mib: int = 0

    @property
    def label(self) -> str:
        return f"GPU {self.index}"

    def report(self, with_uuid: bool = False) -> dict[str, Any]:
        """The card as the report carries it; the applied record adds the UUID, which names
        the physical card should the indices ever be renumbered."""
        entry = {"index": self.index, "name": self.name, "memory_total_mib": self.total_mib}
        return {**entry, "uuid": self.uuid} if with_uuid else entry


NO_NVIDIA_SMI = "no nvidia-smi: GPU memory unknown"
# What a box without the NVIDIA driver's tool is told, and what one without a GPU would need.
NO_GPU_BOX = ("no nvidia-smi on this box: its vLLM servers would run vLLM's CUDA build, which "
              "needs an NVIDIA GPU and its driver; nothing written. (A CPU-only box would need "
              "vLLM's CPU build as VLLM_BIN and each recipe's KV cache sized with "
              "--kv-cache-memory-bytes in its args, since on the CPU --gpu-memory-utilization "
              "is a share of the host's RAM: llmao does not run such boxes.)")


def query_cards(timeout_s: float = 30.0) -> tuple[tuple[Card, ...] | None, str]:
    """Ask nvidia-smi about every card; (None, why) when the hardware is unknown."""
    command = ["nvidia-smi", f"--query-gpu={CARD_QUERY}", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except FileNotFoundError:
        return None, NO_NVIDIA_SMI
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi did not run ({exc}): GPU memory unknown"
    if done.returncode != 0:
        return None, f"nvidia-smi failed (exit {done.returncode}): GPU memory unknown"
    return parse_cards(done.stdout)


def parse_cards(output: str) -> tuple[tuple[Card, ...] | None, str]:
    """Every line a card (``index, uuid, name, total MiB, free MiB``), sorted by index.

    One line that cannot be read, a repeated index or too many lines make the
    whole answer unknown: placing servers on a guess would be worse than not.
    """
    lines = [line for line in output.splitlines() if line.strip()]
    cards = [parse_card(line) for line in lines[:MAX_CARDS + 1]]
    if not lines or len(lines) > MAX_CARDS or None in cards \
            or len({card.index for card in cards}) != len(cards):
        return None, f"nvidia-smi said {clean_text(output)[:80]!r}: GPU memory unknown"
    ordered = tuple(sorted(cards, key=lambda card: card.index))
    return ordered, "\n".join(f"{card.label} ({card.name}): {gib(card.total_gb)} GiB total, "
                              f"{gib(card.free_gb)} GiB free" for card in ordered)


def parse_card(line: str) -> Card | None:
    """One line of the query; the name may hold commas, the other fields cannot."""
    head = line.split(",", 2)
    tail = head[-1].rsplit(",", 2)
    if len(head) != 3 or len(tail) != 3:
        return None
    index, uuid, (name, total, free) = head[0].strip(), head[1].strip(), \
        (part.strip() for part in tail)
    if not (CARD_NUMBER_RE.match(index) and CARD_UUID_RE.match(uuid)
            and CARD_NUMBER_RE.match(total) and CARD_NUMBER_RE.match(free)):
        return None
    return Card(index=int(index), uuid=uuid, name=clean_text(name)[:64] or "unnamed",
                total_gb=Decimal(int(total)) / 1024, free_gb=Decimal(int(free)) / 1024,
                total_mib=int(total))


def disk_free_gb(path: Path) -> Decimal | None:
    """Free space for the data directory, measured at its nearest existing ancestor."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        stat = os.statvfs(probe)
    except OSError:
        return None
    return Decimal(stat.f_bavail * stat.f_frsize) / 2**30


def gib(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.1')):f}"


def shortfall(servers: Iterable[Server], attr: str, free: Decimal, where: str) -> str | None:
    """Say what does not fit on one resource, naming every server that asks for it."""
    asks = [(server.name, getattr(server, attr)) for server in servers]
    needed = sum((size for name, size in asks), Decimal(0))
    if needed <= free:
        return None
    parts = " + ".join(f"{name} {size:f} GiB" for name, size in asks)
    return f"{where}: {parts} = {needed:f} GiB of {attr} needed, {gib(free)} GiB free"


def applied_models(record: Mapping[str, Any]) -> set[str]:
    servers = record.get("servers")
    return {entry.get("model") for entry in servers if isinstance(entry, dict)} \
        if isinstance(servers, list) else set()


def preflight(servers: tuple[Server, ...], cards: tuple[Card, ...] | None,
              placement: Mapping[str, tuple[int, ...]], disk_free: Decimal | None,
              data_dir: Path, applied: Mapping[str, Any] | None) -> list[str]:
    """Check vram_gb on every card and disk_gb on the disk; notes for the log, DoesNotFit if short.

    ``vram_gb`` is per card: each card must hold the servers placed on it. Free
    memory means something only on a box that runs none of our servers: once an
    assignment is applied, its vLLM processes hold the cards (until supervisorctl
    update restarts them) and the division alone checks the weights against each
    card's total. Their weights are on disk too, so disk_gb then counts only the
    models the applied record does not list.
    """
    unknown = "free memory unknown"
    disk_servers = servers
    if applied is not None:
        unknown = ("the applied servers hold its memory, the division checks the weights "
                   "against the card total instead")
        present = applied_models(applied)
        disk_servers = tuple(s for s in servers if s.model not in present)
    if cards is None or not placement:
        checks = [("vram_gb", servers, None, "GPU 0", "free memory unknown")]
    else:
        checks = [("vram_gb", tuple(s for s in servers if card.index in placement[s.name]),
                   card.free_gb if applied is None else None, card.label, unknown)
                  for card in cards]
    checks.append(("disk_gb", disk_servers, disk_free, f"disk {data_dir}", "free space unknown"))
    notes: list[str] = []
    problems: list[str] = []
    for attr, subset, free, where, why in checks:
        asking = [server for server in subset if getattr(server, attr) is not None]
        if not asking:
            notes.append(f"{where}: no {attr} to check")
        elif free is None:
            notes.append(f"{where}: {why}; {attr} not checked")
        else:
            problem = shortfall(asking, attr, free, where)
            if problem:
                problems.append(problem)
            else:
                notes.append(f"{where}: {attr} fits ({gib(free)} GiB free)")
    if problems:
        raise DoesNotFit("the assignment does not fit this box; nothing written:\n  "
                         + "\n  ".join(problems))
    return notes


# ---- roles/vllm_box/files/box_program/json_input.py
# JSON from llmao or a file, read within bounds.
#
# An assignment comes from the network or from the push path's file; either way its
# size, its numbers and its nesting are bounded before they are converted, so a
# hostile answer costs the box a refusal, never its memory or its CPU.


MAX_ANSWER_BYTES = 4 * 2**20

# A JSON number is refused before conversion when its text is longer or its exponent larger:
# int("9" * 10**6) and Fraction(Decimal("1e-999999999")) would hang the box.
MAX_NUMBER_CHARS = 64
MAX_EXPONENT = 400


def decode_json(raw: bytes, source: str) -> Any:
    """JSON with decimals kept exact, so pinned values render as they were written.

    Numbers are checked as text before they are converted, ``NaN`` and
    ``Infinity`` are refused, and so is nesting deeper than Python recurses.
    """
    try:
        return json.loads(raw.decode("utf-8"), parse_int=bounded_int,
                          parse_float=bounded_decimal, parse_constant=not_a_number)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(f"{source} is not valid JSON: {exc}") from None
    except RecursionError:
        raise Refused(f"{source} is nested too deeply to be an assignment") from None


def number_text(text: str) -> str:
    if len(text) > MAX_NUMBER_CHARS:
        raise Refused(f"a number of {len(text)} characters is not a value an assignment holds "
                      f"(at most {MAX_NUMBER_CHARS})")
    return text


def bounded_int(text: str) -> int:
    return int(number_text(text))


def bounded_decimal(text: str) -> Decimal:
    number = Decimal(number_text(text))
    if abs(number.adjusted()) > MAX_EXPONENT:
        raise Refused(f"the number {text} is out of any range an assignment uses")
    return number


def not_a_number(text: str) -> Decimal:
    raise Refused(f"{text} is not a number an assignment holds")


def load_payload(path: str, what: str = "payload") -> Any:
    """Read an assignment given with --payload (``-`` reads standard input), size bounded;
    or, ``what`` said, another JSON file given to the push path (--certificate)."""
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_ANSWER_BYTES + 1)
        else:
            with open(path, "rb") as payload:
                raw = payload.read(MAX_ANSWER_BYTES + 1)
    except OSError as exc:
        raise Refused(f"cannot read the {what} {path}: {exc.strerror}") from None
    if len(raw) > MAX_ANSWER_BYTES:
        raise Refused(f"the {what} {path} is over {MAX_ANSWER_BYTES} bytes")
    return decode_json(raw, f"{what} {path}")


# ---- roles/vllm_box/files/box_program/transport.py
# One HTTP request to llmao, whole within its deadline, with no redirect followed.
#
# urllib alone bounds each socket operation, not the request, and would follow a
# redirect with the fleet key: this module closes both gaps for every call the box
# program makes (:mod:`.llmao_api` adds the protocol on top).


RETRY_AFTER_HEADER = "Retry-After"


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect would carry the Authorization header to another address: refuse it."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class Deadline:
    """When one request must have ended, however slowly llmao (or whoever answers) sends it.

    urllib's timeout bounds each socket operation, not the request: an answer dripped one
    byte per timeout would hold the follow loop for ever. A timer shuts the request's
    connection down at the deadline, which ends whatever read waits on it; it acts on a
    duplicate of the socket, which TLS's wrapping leaves open and only :meth:`end` closes.
    """

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.fired = False
        self.timers: list[threading.Timer] = []
        self.sockets: list[socket.socket] = []

    def watch(self, sock: socket.socket) -> None:
        watched = sock.dup()
        self.sockets.append(watched)
        timer = threading.Timer(max(self.at - time.monotonic(), 0.0), self.fire, (watched,))
        timer.daemon = True
        timer.start()
        self.timers.append(timer)

    def fire(self, sock: socket.socket) -> None:
        self.fired = True
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def end(self) -> None:
        for timer in self.timers:
            timer.cancel()
        for sock in self.sockets:
            sock.close()


class WatchedOpen:
    """An opener's handler whose connections give their socket to the request's Deadline."""

    def do_open(self, http_class, req, **kwargs):
        deadline = getattr(req, "deadline", None)
        if deadline is None:
            return super().do_open(http_class, req, **kwargs)

        def connection(*args, **options):
            made = http_class(*args, **options)
            create = made._create_connection

            def watched(*address, **how):
                sock = create(*address, **how)
                deadline.watch(sock)
                return sock

            made._create_connection = watched
            return made

        return super().do_open(connection, req, **kwargs)


class WatchedHTTPHandler(WatchedOpen, urllib.request.HTTPHandler):
    pass


class WatchedHTTPSHandler(WatchedOpen, urllib.request.HTTPSHandler):
    pass


@functools.lru_cache(maxsize=4)
def build_opener(ca_file: str | None, ca_dir: str | None) -> urllib.request.OpenerDirector:
    """The opener for llmao, made once per trust store.

    A TLS context reads the whole CA store when it is made: about 45 ms of CPU, where a
    follow check answered 304 costs well under one. So it is made once and every check
    reuses it; the trust store the context reads (``SSL_CERT_FILE``, ``SSL_CERT_DIR``,
    the arguments) keys the cache, so a changed one gets a context of its own.
    """
    context = ssl.create_default_context()
    return urllib.request.build_opener(
        WatchedHTTPHandler(), WatchedHTTPSHandler(context=context), NoRedirects())


def http_request(method: str, url: str, headers: Mapping[str, str], body: bytes | None,
                 timeout: float, heard: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One request, whole (connect, headers, body) within ``timeout`` seconds.

    Any HTTP answer is returned as (status, body), its body cut at MAX_ANSWER_BYTES;
    network faults raise, and an answer not whole by the deadline raises TimeoutError.
    The answer's headers of llmao's protocol (a box token it hands out, a Retry-After) go
    into ``heard`` when given, whatever the status.
    """
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
    opener = build_opener(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    deadline = Deadline(timeout)
    request.deadline = deadline
    try:
        try:
            with opener.open(request, timeout=timeout) as answer:
                note_headers(answer.headers, heard)
                status, body = answer.status, answer.read(MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as answer:
            with answer:
                note_headers(answer.headers, heard)
                status, body = answer.code, answer.read(MAX_ANSWER_BYTES)
    except (OSError, HTTPException):
        if not deadline.fired:
            raise
    finally:
        deadline.end()
    if deadline.fired:
        # Cut at the deadline: what was read may look whole (headers cut short, a body
        # ended early) and is not.
        raise TimeoutError(f"no whole answer within {timeout:g} s")
    return status, body


def note_headers(headers: Any, heard: dict[str, str] | None) -> None:
    """Copy the answer headers the box program acts on into ``heard``."""
    if heard is None or headers is None:
        return
    for name in (TOKEN_HEADER, RETRY_AFTER_HEADER):
        value = headers.get(name)
        if value:
            heard[name] = value.strip()


# ---- roles/vllm_box/files/box_program/retries.py
# The one retry loop every call to llmao goes through, bounded two ways.
#
# Network faults, 5xx and a call's "not yet" statuses share one count of attempts with
# a capped backoff; llmao's 429 ``Retry-After`` is waited out within one budget per
# run. Nested loops once let one certificate request make attempts x attempts calls.


BACKOFF_CAP_S = 60.0

RETRY_AFTER_RE = re.compile(r"[0-9]{1,10}\Z")
MIN_RATE_WAIT_S = 1


def is_tls_verification_error(exc: BaseException) -> bool:
    reason = getattr(exc, "reason", exc)
    return isinstance(reason, ssl.SSLCertVerificationError)


def describe_network_error(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason if reason is not None else exc) or type(exc).__name__


def with_retries(send: Callable[[], tuple[int, bytes]], attempts: int, backoff_s: float,
                 what: str, say: Callable[[str], None],
                 sleep: Callable[[float], None] = time.sleep, *,
                 heard: dict[str, str] | None = None, rate_wait_s: float = 0.0,
                 again: Iterable[int] = ()) -> tuple[int, bytes]:
    """Call ``send`` until llmao answers for good: one loop, bounded two ways.

    Network errors, 5xx and the statuses in ``again`` (llmao's "not yet") are tried
    ``attempts`` times in all, backing off in between. A 429 whose ``Retry-After`` (read
    from ``heard``, which ``send`` fills) says how long is waited out and costs no attempt
    (llmao said when; asking sooner is only refused again), while this loop's waits stay
    within ``rate_wait_s`` in all: each is a second at least, so they are bounded too. A
    TLS verification failure is not retried: waiting does not fix a CA.
    """
    failures, waited, retried = 0, 0.0, frozenset(again)
    while True:
        if heard is not None:
            heard.clear()
        status, body, problem = attempt_once(send, what)
        wait = retry_after(heard) if status == 429 else None
        if wait is not None:
            rate_limited(wait, rate_wait_s - waited, rate_wait_s, what, body, say)
            waited += wait
            sleep(wait)
            continue
        if status is not None and status < 500 and status not in retried | {429}:
            return status, body
        failures += 1
        if failures >= attempts:
            raise gave_up(what, status, problem, attempts)
        delay = min(backoff_s * 2 ** (failures - 1), BACKOFF_CAP_S)
        again_in = "asking again" if status in retried else "retrying"
        say(f"{what}: {problem}; attempt {failures} of {attempts}, {again_in} in {delay:g} s")
        sleep(delay)


def attempt_once(send: Callable[[], tuple[int, bytes]],
                 what: str) -> tuple[int | None, bytes, str]:
    """One call: its status (None on a network fault), body, and what went wrong in words."""
    try:
        status, body = send()
    except (OSError, HTTPException) as exc:
        if is_tls_verification_error(exc):
            raise Refused(f"{what}: TLS verification failed ({describe_network_error(exc)}); "
                          "give the CA that signs llmao's certificate in SSL_CERT_FILE"
                          ) from None
        return None, b"", describe_network_error(exc)
    if status >= 500:
        return status, body, f"HTTP {status}"
    return status, body, f"HTTP {status}: {server_message(body)}"


def retry_after(heard: Mapping[str, str] | None) -> int | None:
    """The seconds a ``Retry-After`` asks for, or None when there is none or it is not whole
    seconds (an HTTP date, a fraction, a sign: llmao sends none of them)."""
    value = (heard or {}).get(RETRY_AFTER_HEADER, "")
    return max(int(value), MIN_RATE_WAIT_S) if RETRY_AFTER_RE.match(value) else None


def rate_limited(wait: int, left: float, budget: float, what: str, body: bytes,
                 say: Callable[[str], None]) -> None:
    """Say that the box waits ``wait`` s as llmao's 429 asks; Unreachable when that is more
    than what is ``left`` of LLMAO_RETRY_AFTER_MAX_S: no use waiting to be refused again."""
    code = error_code(body) or "rate limited"
    if wait > left:
        raise Unreachable(f"{what}: llmao asks this box to wait {wait} s (429 {code}), more "
                          f"than the {max(left, 0):g} s left of LLMAO_RETRY_AFTER_MAX_S="
                          f"{budget:g}; nothing more was sent: run again later")
    say(f"{what}: llmao asks this box to wait (429 {code}): waiting {wait} s as its "
        "Retry-After says")


def gave_up(what: str, status: int | None, problem: str, attempts: int) -> Unreachable:
    """Why the retries ended, in one message (exit 3)."""
    if status == 503:
        return Unreachable(f"{what}: llmao answered 503 on all {attempts} attempts: fleet.key is "
                           "probably not configured on the server (config.yaml fleet.key empty "
                           "or CHANGE_ME)")
    if status is None or status >= 500:
        return Unreachable(f"{what}: no answer after {attempts} attempts: {problem}")
    return Unreachable(f"{what}: still {problem} after {attempts} attempts")


# ---- roles/vllm_box/files/box_program/settings.py
# What the environment decides: checked once, before any work (``Settings``).
#
# A box template carries llmao's URL, the fleet key and the box's name; a stock vLLM
# image, the data folder and Supervisor's. Everything read here is checked here, so a
# wrong value is one line and exit 2 before a byte is sent or written. The box token
# kept between runs (docs/box-identity.md) is read and kept here too.


DEFAULT_VLLM_HOST = "0.0.0.0"

# The environment's retry knobs, bounded so a typo cannot make a box wait for days.
MAX_ATTEMPTS = 100
MAX_WAIT_S = 3600.0
# What one run waits in all for llmao's 429 ``Retry-After`` (LLMAO_RETRY_AFTER_MAX_S), and its
# bound. A Retry-After is whole seconds (RFC 9110's delay-seconds; llmao sends no date), read
# from at most 10 digits; each wait lasts at least a second, so a run's 429s are bounded too.
RATE_WAIT_S = 900.0
MAX_RATE_WAIT_S = 86400.0

# DATA_DIRECTORY lands in environment= and stdout_logfile=: keep it plain.
DATA_DIRECTORY_RE = re.compile(r"/[A-Za-z0-9._/@+-]*\Z")

# Where the box token is kept when LLMAO_TOKEN_FILE does not say: RunPod keeps only its
# volume across a pod's restarts, so there under /workspace; elsewhere (Vast keeps the
# container disk across stop and start) beside the applied record.
RUNPOD_VOLUME = Path("/workspace")
TOKEN_FILE_NAME = "box-token"

# The provider's instance id (from INSTANCE_ENV), reported with each call: llmao keeps it with
# the binding.
INSTANCE_RE = re.compile(rf"[!-~]{{1,{MAX_INSTANCE}}}\Z")
# What a fleet key may hold: it travels in an HTTP header.
FLEET_KEY_RE = re.compile(r"[!-~]([ -~]*[!-~])?\Z")

# The environment the follow program is given, when this run has it: what the box program
# reads, what TLS verification reads, and PATH (supervisorctl and nvidia-smi are found by it).
FOLLOW_ENV = ("LLMAO_URL", "FLEET_KEY", "LLMAO_HOST", "DATA_DIRECTORY", "SUPERVISOR_CONF_DIR",
              "VLLM_BIN", "VLLM_HOST", "LLMAO_FETCH_ATTEMPTS", "LLMAO_FETCH_BACKOFF_S",
              "LLMAO_FETCH_TIMEOUT_S", "LLMAO_RETRY_AFTER_MAX_S", "SSL_CERT_FILE",
              "SSL_CERT_DIR", "PATH", "LLMAO_TOKEN_FILE", *INSTANCE_ENV)
# Never among them: LLMAO_BOOTSTRAP_TOKEN works once, on the boot's fetch, and the follow
# program's file would keep a secret that is spent.


@dataclass(frozen=True)
class Settings:
    """Everything the environment decides, checked once before any work."""

    url: str | None
    fleet_key: str | None = field(repr=False)
    host: str | None
    data_dir: Path
    conf_dir: Path
    vllm_bin: str
    vllm_host: str = DEFAULT_VLLM_HOST
    attempts: int = 8
    backoff_s: float = 2.0
    timeout_s: float = 30.0
    # What the follow program is given of this run's environment (FOLLOW_ENV, when set).
    follow_env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # Where the box token is kept (docs/box-identity.md), and the provider's instance id.
    token_path: Path | None = None
    instance: str | None = None
    # A box token llmao hands out is stored (not on a dry run, which stores nothing).
    keeps_token: bool = True
    # LLMAO_BOOTSTRAP_TOKEN: presented on a fetch while no box token is kept.
    bootstrap_token: str | None = field(default=None, repr=False)
    # The most seconds this run waits in all for llmao's 429 Retry-After.
    rate_wait_s: float = RATE_WAIT_S

    @property
    def record_path(self) -> Path:
        return self.data_dir / "llmao" / "applied.json"

    @property
    def follow_log(self) -> Path:
        return self.data_dir / "llmao" / "follow.log"

    @property
    def tls_dir(self) -> Path:
        return self.data_dir / "llmao" / TLS_DIR


def read_settings(environ: Mapping[str, str], fetching: bool) -> Settings:
    """Read and check the environment; the URL and key are needed only to fetch."""
    url = environ.get("LLMAO_URL", "").strip() or None
    fleet_key = environ.get("FLEET_KEY") or None
    if fetching:
        if url is None:
            raise Refused("LLMAO_URL is not set: it is llmao's base URL, "
                          "e.g. https://llmao.example:8443")
        check_base_url(url)
        if fleet_key is None:
            raise Refused("FLEET_KEY is not set: the box template must carry llmao's fleet.key")
        if not FLEET_KEY_RE.match(fleet_key):
            raise Refused("FLEET_KEY must be printable ASCII without leading or trailing "
                          "spaces: it is sent as an HTTP header (is the template's value "
                          "pasted whole?)")
    host = environ.get("LLMAO_HOST", "").strip() or None
    if host is not None and not BOX_NAME_RE.match(host):
        raise Refused("LLMAO_HOST must be the box's name in fleet.hosts: 1 to 253 printable "
                      "ASCII characters without spaces (it is sent as the X-LLMAO-Host header)")
    data_dir = environ.get("DATA_DIRECTORY", "").strip() or "/data"
    if not DATA_DIRECTORY_RE.match(data_dir):
        raise Refused(f"DATA_DIRECTORY {data_dir!r} must be an absolute path of letters, "
                      "digits and . _ / @ + -")
    conf_dir = environ.get("SUPERVISOR_CONF_DIR", "").strip() or "/etc/supervisor/conf.d"
    if not os.path.isabs(conf_dir):
        raise Refused(f"SUPERVISOR_CONF_DIR {conf_dir!r} must be an absolute path")
    vllm_bin = environ.get("VLLM_BIN", "").strip() or "vllm"
    if UNSAFE_CHAR_RE.search(vllm_bin):
        raise Refused("VLLM_BIN holds control, format or line-separator characters")
    vllm_host = environ.get("VLLM_HOST", "").strip() or DEFAULT_VLLM_HOST
    try:
        ipaddress.ip_address(vllm_host)
    except ValueError:
        raise Refused(f"VLLM_HOST {vllm_host!r} must be an IP address (the one vLLM "
                      "binds)") from None
    token_file = environ.get("LLMAO_TOKEN_FILE", "").strip()
    if token_file and not os.path.isabs(token_file):
        raise Refused(f"LLMAO_TOKEN_FILE {token_file!r} must be an absolute path")
    instance = next((environ[name].strip() for name in INSTANCE_ENV
                     if INSTANCE_RE.match(environ.get(name, "").strip())), None)
    return Settings(
        token_path=Path(token_file) if token_file else default_token_path(
            environ, Path(data_dir.rstrip("/") or "/")),
        instance=instance,
        url=url.rstrip("/") if url else None,
        fleet_key=fleet_key,
        host=host,
        data_dir=Path(data_dir.rstrip("/") or "/"),
        conf_dir=Path(conf_dir),
        vllm_bin=vllm_bin,
        vllm_host=vllm_host,
        attempts=env_number(environ, "LLMAO_FETCH_ATTEMPTS", 8, int, 1, MAX_ATTEMPTS),
        backoff_s=env_number(environ, "LLMAO_FETCH_BACKOFF_S", 2.0, float, 0, MAX_WAIT_S),
        timeout_s=env_number(environ, "LLMAO_FETCH_TIMEOUT_S", 30.0, float, 0.001, MAX_WAIT_S),
        rate_wait_s=env_number(environ, "LLMAO_RETRY_AFTER_MAX_S", RATE_WAIT_S, float, 0,
                               MAX_RATE_WAIT_S),
        bootstrap_token=bootstrap_token(environ) if fetching else None,
        follow_env=tuple((name, environ[name]) for name in FOLLOW_ENV if environ.get(name)),
    )


def bootstrap_token(environ: Mapping[str, str]) -> str | None:
    """LLMAO_BOOTSTRAP_TOKEN when set: shaped as llmao mints it (a box token's shape), else
    refused here, before any call, rather than spent on a refusal."""
    token = environ.get(BOOTSTRAP_ENV, "").strip() or None
    if token is not None and not is_box_token(token):
        raise Refused(f"{BOOTSTRAP_ENV} is not a bootstrap token: llmao mints 32 to 128 "
                      "URL-safe characters (letters, digits, - and _); is the template's value "
                      "pasted whole? (llmao-server enroll <name> prints it)")
    return token


def default_token_path(environ: Mapping[str, str], data_dir: Path) -> Path:
    """Where the box token survives the provider's restarts (docs/box-identity.md)."""
    if environ.get("RUNPOD_POD_ID") and RUNPOD_VOLUME.is_dir():
        return RUNPOD_VOLUME / ".llmao" / TOKEN_FILE_NAME
    return data_dir / "llmao" / TOKEN_FILE_NAME


def read_token(settings: Settings) -> str | None:
    """The kept box token, or None (none kept yet, or not one llmao could have made)."""
    if settings.token_path is None:
        return None
    try:
        token = settings.token_path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return token if is_box_token(token) else None


def keep_token(settings: Settings, token: str | None) -> None:
    """Store a box token llmao handed out (0600, atomically), unless told not to."""
    if (token is None or not settings.keeps_token or settings.token_path is None
            or not is_box_token(token) or token == read_token(settings)):
        return
    atomic_write(settings.token_path, token + "\n", 0o600)


def env_number(environ: Mapping[str, str], name: str, default: Any, kind: type,
               minimum: float, maximum: float) -> Any:
    """A numeric tuning knob from the environment, with its default when unset."""
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw[:MAX_NUMBER_CHARS + 1])
    except ValueError:
        raise Refused(f"{name}={raw[:40]!r} is not a {kind.__name__}") from None
    if not minimum <= value <= maximum or (kind is float and not math.isfinite(value)):
        raise Refused(f"{name}={raw[:40]!r} must be from {minimum} to {maximum}")
    return value


def check_base_url(url: str) -> None:
    """https anywhere; plain http only to loopback, so the key never crosses a network bare."""
    if not url.isascii() or UNSAFE_CHAR_RE.search(url):
        raise Refused("LLMAO_URL must be printable ASCII (write an international domain name "
                      "in its xn-- form)")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise Refused(f"LLMAO_URL {url!r} must be an https:// URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise Refused("LLMAO_URL must be a plain base URL (no user, query or fragment)")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise Refused("LLMAO_URL must use https: plain http is allowed only to a loopback "
                      "address, the fleet key would travel in clear text")


def is_loopback(hostname: str) -> bool:
    try:
        return hostname == "localhost" or ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


# ---- roles/vllm_box/files/box_program/llmao_api.py
# The box's calls of llmao's box API: the fetch, the turn, with the box's identity.
#
# Every call carries the fleet key, the box's name, its box token and its instance id
# (docs/box-identity.md); the fetch also presents a bootstrap token once, while no box
# token is kept, and keeps the box token llmao hands out.


USER_AGENT = "llmao-install-set/1"


def auth_headers(settings: Settings) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {settings.fleet_key}",
               "Accept": "application/json", "User-Agent": USER_AGENT}
    if settings.host is not None:
        headers[HOST_HEADER] = settings.host
    token = read_token(settings)
    if token is not None:
        headers[TOKEN_HEADER] = token
    if settings.instance is not None:
        headers[INSTANCE_HEADER] = settings.instance
    return headers


def call_llmao(settings: Settings, method: str, path: str, say: Callable[[str], None],
               body: bytes | None = None, attempts: int | None = None,
               extra: Mapping[str, str] | None = None,
               again: Iterable[int] = ()) -> tuple[int, bytes, dict[str, str]]:
    """One call of the box protocol, with the fleet key, the name and the box token, retried
    as :func:`with_retries` says: its status, body and the protocol headers heard."""
    url = f"{settings.url}{path}"
    headers = {**auth_headers(settings), **(extra or {})}
    if body is not None:
        headers["Content-Type"] = "application/json"
    heard: dict[str, str] = {}
    status, answer = with_retries(
        lambda: http_request(method, url, headers, body, settings.timeout_s, heard),
        attempts or settings.attempts, settings.backoff_s, f"{method} {url}", say,
        heard=heard, rate_wait_s=settings.rate_wait_s, again=again)
    return status, answer, heard


def fetch_assignment(settings: Settings, say: Callable[[str], None],
                     applied_revision: str | None = None, attempts: int | None = None) -> Any:
    """GET the box's assignment from llmao and return the decoded JSON.

    Naming the ``applied_revision`` makes it a follow check (``If-None-Match``): None
    when llmao answers 304, that revision is still the intended one. While the box keeps no
    box token, the bootstrap token (when given) goes with it: llmao binds the name to this
    box and hands out the box token, kept before anything else happens.
    """
    extra = {} if applied_revision is None else {"If-None-Match": f'"{applied_revision}"'}
    enrolling = settings.bootstrap_token is not None and read_token(settings) is None
    if enrolling:
        extra[BOOTSTRAP_HEADER] = settings.bootstrap_token
    status, body, heard = call_llmao(settings, "GET", CONFIG_PATH, say, attempts=attempts,
                                     extra=extra)
    if status in (200, 304):
        keep_token(settings, heard.get(TOKEN_HEADER))
        if enrolling and heard.get(TOKEN_HEADER):
            say(f"enrolled: llmao bound {settings.host or 'this address'} to this box with "
                f"the bootstrap token; the box token is kept in {settings.token_path}")
    if status == 304 and applied_revision is not None:
        return None
    if status != 200:
        raise refusal(status, body, settings.host)
    return decode_json(body, f"llmao's answer from {settings.url}{CONFIG_PATH}")


@dataclass(frozen=True)
class TurnAnswer:
    """llmao's answer to ``POST /vllm/turn``: whether the box may change, and when to apply."""

    granted: bool
    phase: str | None
    apply: bool
    why: str


def ask_turn(settings: Settings, say: Callable[[str], None], revision: str,
             servers: list[str]) -> TurnAnswer | None:
    """Ask llmao once for the turn to move these servers to ``revision``.

    None when llmao answers 409: it no longer intends that revision.
    """
    url = f"{settings.url}{TURN_PATH}"
    body = json.dumps({"revision": revision, "servers": servers}).encode("utf-8")
    status, answer = call_llmao(settings, "POST", TURN_PATH, say, body, attempts=1)[:2]
    if status == 409:
        return None
    if status != 200:
        raise refusal(status, answer, settings.host)
    doc = decode_json(answer, f"llmao's answer from {url}")
    if not (isinstance(doc, dict) and isinstance(doc.get("granted"), bool)
            and isinstance(doc.get("apply"), bool)):
        raise Refused(f"llmao's answer from {url} is not a turn: granted and apply must be "
                      "true or false")
    phase, why = doc.get("phase"), doc.get("why")
    return TurnAnswer(granted=doc["granted"], apply=doc["apply"],
                      phase=clean_text(phase) if isinstance(phase, str) else None,
                      why=clean_text(why) if isinstance(why, str) else "")


# ---- roles/vllm_box/files/box_program/certificate.py
# Box TLS (docs/box-tls.md): the box's key, its certificate from llmao, and renewal.
#
# The key is made on the box and never leaves it. A certificate is kept only when it
# fits the key and chains to the CA the assignment pins; a renewal rewrites the file in
# place so vLLM's --enable-ssl-refresh reloads it without a restart.


RENEW_LEFT = Fraction(1, 3)

MAX_PEM = 16 * 1024
OPENSSL_TIMEOUT_S = 60.0


def certificate_due(settings: Settings, tls: BoxTls, now: float) -> str | None:
    """Why the box needs a new certificate now, or None while the one it has is good."""
    folder = settings.tls_dir
    if not all((folder / name).is_file() for name in (KEY_FILE, CERT_FILE)):
        return "no certificate yet"
    try:
        meta = json.loads((folder / CERT_META).read_text(encoding="utf-8"))
        issued_at, not_after = float(meta["issued_at"]), float(meta["not_after"])
        ca_sha256 = meta["ca_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return "what the box knew of its certificate is lost"
    if ca_sha256 != tls.ca_sha256:
        return "the fleet CA changed"
    if now >= not_after - (not_after - issued_at) * float(RENEW_LEFT):
        return "less than a third of its life is left"
    return None


def run_openssl(args: list[str], what: str) -> subprocess.CompletedProcess[bytes]:
    """Run the openssl command, within OPENSSL_TIMEOUT_S. Missing or stuck: refused."""
    binary = shutil.which("openssl")
    if binary is None:
        raise Refused("box TLS needs the openssl command and this box has none: install it "
                      "(Debian and Ubuntu: apt-get install openssl)")
    try:
        return subprocess.run([binary, *args], capture_output=True, check=False,
                              timeout=OPENSSL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Refused(f"openssl {what}: {exc}") from None


def openssl(args: list[str], what: str) -> bytes:
    """Run the openssl command; its standard output. Missing or failing: refused."""
    done = run_openssl(args, what)
    if done.returncode != 0:
        raise Refused(f"openssl {what} failed: "
                      f"{clean_text(done.stderr.decode('utf-8', 'replace'))}")
    return done.stdout


def box_key(settings: Settings) -> Path:
    """The box's private key, made here once (EC P-256, 0600); it never leaves the box."""
    key = settings.tls_dir / KEY_FILE
    if not key.is_file():
        settings.tls_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        pem = openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
                      "genpkey")
        atomic_write(key, pem.decode("ascii"), 0o600)
    return key


def rfc3339_seconds(text: Any) -> float | None:
    """``2026-12-09T02:00:00Z`` as seconds since the epoch, None when it is not that."""
    try:
        return float(calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def certificate_request(settings: Settings) -> str:
    """A certificate request (PEM) for the box's key, made here; the key stays on the box."""
    key = box_key(settings)
    return openssl(["req", "-new", "-key", str(key), "-subj", "/O=llmao box"],
                   "req").decode("ascii")


def request_certificate(settings: Settings, tls: BoxTls, say: Callable[[str], None]) -> str:
    """Ask llmao to sign a request for the box's key; keep what it answers. Returns the
    certificate's not_after.

    A 409 is llmao's "not yet": a box named by its provider's id has no address llmao knows
    of until a reconcile pass reads the listing, worth waiting for as for a server that is
    not up yet. It is retried in the same one loop, and bound, as a network error.
    """
    if settings.url is None or settings.fleet_key is None:
        raise Refused("box TLS needs a certificate from llmao: set LLMAO_URL and FLEET_KEY")
    body = json.dumps({"csr": certificate_request(settings)}).encode("utf-8")
    status, answer = call_llmao(settings, "POST", CERT_PATH, say, body, again=(409,))[:2]
    if status != 200:
        raise refusal(status, answer, settings.host)
    source = f"llmao's answer from {settings.url}{CERT_PATH}"
    return keep_certificate(settings, tls, decode_json(answer, source), source)


def keep_certificate(settings: Settings, tls: BoxTls, doc: Any, source: str) -> str:
    """Keep llmao's answer to a certificate request (``certificate``, ``ca``, ``not_after``)
    for the box's key; its not_after. The CA is checked against the assignment's pin, the
    certificate against the key and against that CA (it must chain to it) before anything
    is installed: vLLM reloads whatever lands there, and a leaf that does not chain would
    make every dialer refuse the box. The box's own request and the push path's
    (``--certificate``) both land here."""
    key = settings.tls_dir / KEY_FILE
    if not key.is_file():
        raise Refused(f"{source}: this box has no key for it (make the request here first: "
                      "--cert-request); nothing kept")
    certificate, ca, not_after = read_certificate_answer(doc, source, tls)
    staged = {name: settings.tls_dir / f".{name}.new" for name in (CERT_FILE, CA_FILE)}
    try:
        atomic_write(staged[CERT_FILE], certificate, 0o644)
        atomic_write(staged[CA_FILE], ca, 0o644)
        check_leaf(staged[CERT_FILE], staged[CA_FILE], key)
    except BaseException:
        for path in staged.values():
            path.unlink(missing_ok=True)
        raise
    os.replace(staged[CA_FILE], settings.tls_dir / CA_FILE)
    replace_in_place(staged[CERT_FILE], settings.tls_dir / CERT_FILE)
    atomic_write(settings.tls_dir / CERT_META,
                 json.dumps({"issued_at": time.time(), "not_after": rfc3339_seconds(not_after),
                             "ca_sha256": tls.ca_sha256}) + "\n", 0o644)
    return not_after


def read_certificate_answer(doc: Any, source: str, tls: BoxTls) -> tuple[str, str, str]:
    """The answer's certificate, its CA and not_after, the CA being the one the assignment
    pins: rewritten from the very bytes its digest names, so that certificate alone is
    trusted when the leaf is verified, whatever else the answer's PEM text carried."""
    fields = [doc.get(name) if isinstance(doc, dict) else None
              for name in ("certificate", "ca", "not_after")]
    if not all(isinstance(f, str) and len(f) <= MAX_PEM for f in fields) \
            or rfc3339_seconds(fields[2]) is None:
        raise Refused(f"{source} is not a certificate: certificate, ca (PEM) "
                      "and not_after (RFC 3339) are needed")
    try:
        der = ssl.PEM_cert_to_DER_cert(fields[1].strip())
    except ValueError:
        der = b""
    if hashlib.sha256(der).hexdigest() != tls.ca_sha256:
        raise Refused("llmao answered with a CA other than the one its assignment names; "
                      "nothing kept")
    return fields[0], ssl.DER_cert_to_PEM_cert(der), fields[2]


def check_leaf(certificate: Path, ca: Path, key: Path) -> None:
    """Refuse a certificate that is not for this box's key, or that the pinned CA did not
    sign (a server whose CA key was replaced signs leaves nothing verifies).

    ``openssl verify -trusted`` takes that one file as the only trust anchor (no system
    store), ``-purpose sslserver`` wants a server's leaf, and ``-no_check_time`` leaves the
    dates out: a box whose clock is off is not a reason to refuse, and not_after is kept
    apart for the renewal.
    """
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(certificate, key)
    except ssl.SSLError as exc:
        raise Refused(f"llmao's certificate does not fit this box's key ({exc.reason or exc}); "
                      "nothing kept") from None
    done = run_openssl(["verify", "-trusted", str(ca), "-purpose", "sslserver",
                        "-no_check_time", str(certificate)], "verify")
    if done.returncode != 0:
        said = (done.stdout + done.stderr).decode("utf-8", "replace")
        reason = re.search(r"error \d+ at \d+ depth lookup: ([^\n]+)", said)
        raise Refused("llmao's certificate does not chain to the fleet CA its assignment pins "
                      f"(openssl verify: {clean_text(reason.group(1) if reason else said)}); "
                      "nothing kept: was llmao's CA key replaced?")


def replace_in_place(staged: Path, path: Path) -> None:
    """Put the checked certificate at ``path``. A first one is renamed into place; a renewal
    rewrites the file itself: vLLM's --enable-ssl-refresh watches that file (watchfiles,
    which follows the file and not its folder) and reloads it on every write, and a file
    renamed over it would end the watch after the first renewal."""
    if not path.is_file():
        os.replace(staged, path)
        return
    text = staged.read_text(encoding="ascii")
    with open(path, "r+", encoding="ascii") as out:
        out.write(text)
        out.truncate()
        out.flush()
        os.fsync(out.fileno())
    staged.unlink()


def require_certificate_source(settings: Settings, tls: BoxTls | None,
                               given: Any = None) -> None:
    """Refuse, before anything is written, an assignment that needs a certificate the box
    cannot ask for: a pushed one (--payload) runs without LLMAO_URL and FLEET_KEY, so the
    push path brings it (``given``, --certificate)."""
    if given is not None and tls is None:
        raise Refused("--certificate was given but the assignment does not turn box TLS on")
    if tls is None or given is not None or (settings.url is not None
                                            and settings.fleet_key is not None):
        return
    why = certificate_due(settings, tls, time.time())
    if why is not None:
        raise Refused(f"the assignment turns on box TLS and the box needs a certificate ({why}), "
                      "which it asks llmao for with LLMAO_URL and FLEET_KEY; on the push path "
                      "the role brings it: make the request with --cert-request and give "
                      "llmao's answer with --certificate (docs/box-tls.md)")


def ensure_certificate(settings: Settings, tls: BoxTls | None,
                       say: Callable[[str], None], given: Any = None) -> None:
    """A good certificate on the box before vLLM starts or while it runs: asked for when
    missing, from another CA, or with less than a third of its life left. ``given`` is the
    push path's: llmao's answer the controller had signed for this box's request, kept as
    it is (the role asked for it because it was due)."""
    if tls is None:
        return
    if given is not None:
        say(f"certificate: kept, valid until "
            f"{keep_certificate(settings, tls, given, 'the --certificate answer')}")
        return
    why = certificate_due(settings, tls, time.time())
    if why is None:
        return
    say(f"certificate: {why}: asking llmao for one")
    not_after = request_certificate(settings, tls, say)
    say(f"certificate: kept, valid until {not_after}")


def cert_request_answer(settings: Settings, tls: BoxTls | None, dry_run: bool,
                        now: float) -> dict[str, Any]:
    """``--cert-request``: why the box needs a certificate (None: it does not) and, when it
    does, a request for its key (made here, 0600, never printed); a dry run makes nothing."""
    why = None if tls is None else certificate_due(settings, tls, now)
    csr = certificate_request(settings) if why is not None and not dry_run else None
    return {"tls": tls is not None, "due": why, "csr": csr}


# ---- roles/vllm_box/files/box_program/memory.py
# How one card's memory is divided between the servers on it (--gpu-memory-utilization).
#
# Exact fractions throughout, so the same assignment on the same card renders the same
# programs on every box and every run: a re-run changes nothing and restarts nothing.


MEMORY_CAP = Decimal("0.9")


def divide_memory(servers: tuple[Server, ...], card_total_gb: Decimal | None
                  ) -> dict[str, Decimal]:
    """Each server's --gpu-memory-utilization, never over-committing the card.

    Pinned servers keep their value. The others share ``0.9 - pinned``: each
    first gets its weights (``vram_gb / card``), then a share of what is left,
    weighted by ``max_model_len`` when every one of them has it, else equal.
    Values are rounded down to 0.001, so their sum stays within the budget.
    Exact fractions throughout: the same inputs give the same bytes everywhere.
    """
    result = {s.name: s.gpu_memory_utilization for s in servers
              if s.gpu_memory_utilization is not None}
    pinned = sum(result.values(), Decimal(0))
    if pinned > 1:
        raise DoesNotFit(f"pinned gpu_memory_utilization values add up to {pinned:f}, more "
                         "than the whole card")
    shared = [s for s in servers if s.gpu_memory_utilization is None]
    if not shared:
        return result
    names = ", ".join(s.name for s in shared)
    budget = Fraction(MEMORY_CAP - pinned)
    if budget <= 0:
        raise DoesNotFit(f"pinned servers take {pinned:f} of the card, leaving nothing of the "
                         f"{MEMORY_CAP} budget for {names}")
    weights = {s.name: weight_fraction(s, card_total_gb) for s in shared}
    rest = budget - sum(weights.values())
    if rest < 0:
        sizes = " + ".join(f"{s.name} {s.vram_gb:f} GiB" for s in shared if weights[s.name])
        raise DoesNotFit(f"the weights do not fit: {sizes} is {float(budget - rest):.3f} of "
                         f"the card ({gib(card_total_gb or Decimal(0))} GiB), the budget for "
                         f"{names} is {float(budget):.3f} (0.9 minus pinned {pinned:f})")
    if all(s.max_model_len for s in shared):
        total_len = sum(s.max_model_len or 0 for s in shared)
        shares = {s.name: Fraction(s.max_model_len or 0, total_len) for s in shared}
    else:
        shares = {s.name: Fraction(1, len(shared)) for s in shared}
    for server in shared:
        thousandths = math.floor((weights[server.name] + rest * shares[server.name]) * 1000)
        if thousandths <= 0:
            raise DoesNotFit(f"{server.name} would get no GPU memory: the weights of the "
                             "others fill the budget")
        result[server.name] = Decimal(thousandths) / 1000
    return result


def divide_cards(servers: tuple[Server, ...], cards: tuple[Card, ...] | None,
                 placement: Mapping[str, tuple[int, ...]]) -> dict[str, Decimal]:
    """Each server's --gpu-memory-utilization on a box of placed servers.

    Every card is divided between the servers placed on it, as one card is. vLLM
    takes one fraction for all the cards of a server, so a server that spans
    several gets the smallest of its shares: no card is ever over-committed.
    Unknown cards: the division of today, against an unknown total.
    """
    if cards is None or not placement:
        return divide_memory(servers, None)
    result: dict[str, Decimal] = {}
    for card in cards:
        on = tuple(s for s in servers if card.index in placement[s.name])
        for name, value in (divide_memory(on, card.total_gb) if on else {}).items():
            result[name] = min(value, result.get(name, value))
    return result


def weight_fraction(server: Server, card_total_gb: Decimal | None) -> Fraction:
    """The share of the card the weights take; 0 when either size is unknown."""
    if not server.vram_gb or not card_total_gb:
        return Fraction(0)
    return Fraction(server.vram_gb) / Fraction(card_total_gb)


# ---- roles/vllm_box/files/box_program/placement.py
# Which cards each server runs on, on a box of several cards.
#
# The search is deterministic (only card totals count), so a box places an assignment
# the same way on every run; it refuses exactly when no placement holds, and says
# where the preferred one stopped.


# Given with CUDA_VISIBLE_DEVICES: CUDA numbers cards as nvidia-smi does.
CUDA_DEVICE_ORDER = "PCI_BUS_ID"


def place_servers(servers: tuple[Server, ...], cards: tuple[Card, ...] | None
                  ) -> dict[str, tuple[int, ...]]:
    """Each server's cards (indices, ascending), or {} when the cards are unknown.

    Servers that span more cards are placed first, then in row order; each takes
    ``gpus`` distinct cards on which the memory division still holds with the
    servers already there, preferring cards that hold fewer servers, then lower
    indices. When that first choice leads nowhere the other choices are tried
    too, so a box is refused exactly when no placement holds. On one card there
    is nothing to choose: the division itself judges it, as it always has. Only
    card totals count (not free memory, which our own running servers change), so
    the same assignment on the same cards is placed the same way on every run.
    """
    if cards is None:
        return {}
    for server in servers:
        if server.gpus > len(cards):
            raise DoesNotFit(f"{server.name} needs {server.gpus} cards (gpus), this box has "
                             f"{len(cards)}: {card_list(cards)}; nothing written")
    if len(cards) == 1:
        return {server.name: (cards[0].index,) for server in servers}
    order = tuple(sorted(servers, key=lambda server: -server.gpus))
    empty: dict[int, tuple[Server, ...]] = {card.index: () for card in cards}
    found = search_placement(order, cards, empty, fit_profiles(order, cards))
    if found is None:
        raise DoesNotFit(no_placement(order, cards))
    return {server.name: found[server.name] for server in servers}


def fit_profiles(servers: tuple[Server, ...], cards: tuple[Card, ...]
                 ) -> dict[int, tuple[bool, ...]]:
    """Per card, which groups of these servers it can hold: its part in any placement.

    Two cards with the same profile and the same servers on them are interchangeable,
    whatever their sizes, so the search tries only the lowest indices of each kind: a
    few kinds at most (holding more is monotone in a card's size), not every card.
    """
    groups = [group for size in range(1, len(servers) + 1)
              for group in itertools.combinations(servers, size)]
    return {card.index: tuple(card_problem(group, card) is None for group in groups)
            for card in cards}


@dataclass(frozen=True)
class Placement:
    """The box's cards (None: unknown) and each server's cards on them."""

    cards: tuple[Card, ...] | None = None
    servers: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def devices(self, name: str) -> tuple[int, ...]:
        """CUDA_VISIBLE_DEVICES of a server: on a box of several cards only."""
        return self.servers.get(name, ()) if self.cards and len(self.cards) > 1 else ()

    def record(self, with_uuid: bool = False) -> dict[str, Any]:
        """The cards and the placement as the report (and, with UUIDs, the record) carry them."""
        if self.cards is None:
            return {}
        return {"cards": [card.report(with_uuid) for card in self.cards],
                "placement": {name: list(indices) for name, indices in self.servers.items()}}

    def notes(self) -> list[str]:
        """One line per server, on a box of several cards."""
        return [f"placement: {name} on {', '.join(f'GPU {i}' for i in indices)}"
                for name, indices in self.servers.items() if self.devices(name)]


# Nothing placed: the cards are unknown (the default of what records and reports a placement).
NO_PLACEMENT = Placement()


def card_list(cards: Iterable[Card]) -> str:
    return ", ".join(f"{card.label} {gib(card.total_gb)} GiB" for card in cards)


def card_problem(servers: tuple[Server, ...], card: Card) -> str | None:
    """Why these servers cannot share this card (the division's refusal), or None."""
    try:
        divide_memory(servers, card.total_gb)
    except DoesNotFit as refusal:
        return str(refusal)
    return None


def card_choices(server: Server, cards: tuple[Card, ...],
                 occupants: Mapping[int, tuple[Server, ...]],
                 profiles: Mapping[int, tuple[bool, ...]]) -> Iterable[tuple[int, ...]]:
    """Every set of ``server.gpus`` cards it fits on, the preferred first.

    Cards alike (same profile, same servers on them) are interchangeable: of each
    kind only the lowest indices are tried, which keeps the search small.
    """
    kinds: dict[tuple[tuple[bool, ...], tuple[Server, ...]], list[int]] = {}
    for card in cards:
        if card_problem(occupants[card.index] + (server,), card) is None:
            kinds.setdefault((profiles[card.index], occupants[card.index]),
                             []).append(card.index)
    groups = sorted(kinds.items(), key=lambda kind: (len(kind[0][1]), kind[1][0]))
    choices = [indexes for kind, indexes in groups]
    return (tuple(sorted(chosen)) for chosen in pick_cards(choices, server.gpus))


def pick_cards(groups: list[list[int]], need: int) -> Iterable[tuple[int, ...]]:
    """Ways to take ``need`` cards from the groups, as many from the first group as it has."""
    if need == 0:
        yield ()
        return
    if not groups:
        return
    first, rest = groups[0], groups[1:]
    for take in range(min(need, len(first)), -1, -1):
        for tail in pick_cards(rest, need - take):
            yield tuple(first[:take]) + tail


def search_placement(order: tuple[Server, ...], cards: tuple[Card, ...],
                     occupants: Mapping[int, tuple[Server, ...]],
                     profiles: Mapping[int, tuple[bool, ...]]
                     ) -> dict[str, tuple[int, ...]] | None:
    """The first placement of ``order`` that holds, depth first; None when none does."""
    if not order:
        return {}
    server, rest = order[0], order[1:]
    for chosen in card_choices(server, cards, occupants, profiles):
        placed = {index: servers + (server,) if index in chosen else servers
                  for index, servers in occupants.items()}
        below = search_placement(rest, cards, placed, profiles)
        if below is not None:
            return {server.name: chosen, **below}
    return None


def no_placement(order: tuple[Server, ...], cards: tuple[Card, ...]) -> str:
    """The refusal: where the preferred path stopped, naming the server, cards and numbers."""
    occupants: dict[int, tuple[Server, ...]] = {card.index: () for card in cards}
    profiles = fit_profiles(order, cards)
    lines = []
    for server in order:
        chosen = next(iter(card_choices(server, cards, occupants, profiles)), None)
        if chosen is None:
            size = f", vram_gb {server.vram_gb:f} GiB per card" if server.vram_gb else ""
            lines.append(f"{server.name} needs {server.gpus} card(s){size}; it cannot join:")
            for card in cards:
                problem = card_problem(occupants[card.index] + (server,), card)
                beside = ", ".join(s.name for s in occupants[card.index]) or "no other server"
                lines.append(f"  {card.label} ({gib(card.total_gb)} GiB, with {beside}): "
                             + (problem or "fits"))
            break
        lines.append(f"{server.name} would take {', '.join(f'GPU {i}' for i in chosen)}")
        occupants = {index: servers + (server,) if index in chosen else servers
                     for index, servers in occupants.items()}
    return ("no placement of the servers on this box's cards holds the memory division "
            "(every arrangement was tried); nothing written:\n  " + "\n  ".join(lines))


# ---- roles/vllm_box/files/box_program/programs.py
# The Supervisor programs: one per vLLM server, and the follow program.
#
# Their text is deterministic, quoted for Supervisor's own parsers, with the bearer in
# the environment and never on the command line; a program file changes only when
# what it runs changes, which is what makes ``supervisorctl update`` restart it.


PROGRAM_SECTION_RE = re.compile(r"^\[program:([^\]\n]+)\]$", re.MULTILINE)


def supervisor_quote(arg: str) -> str:
    """Quote one argument so Supervisor's parser gives it back unchanged.

    Supervisor splits ``command=`` like a POSIX shell, but its ini reader first
    cuts a ``;`` or ``#`` that follows whitespace as a comment; so those two
    characters are written outside the quotes, backslash-escaped.
    """
    if not arg:
        return "''"
    pieces = re.split(r"([;#])", arg)
    return "".join("\\" + piece if piece in (";", "#") else shlex.quote(piece)
                   for piece in pieces if piece)


def supervisor_value(text: str) -> str:
    """Supervisor %-expands its values: a literal % is written %%."""
    return text.replace("%", "%%")


def vllm_argv(server: Server, utilization: Decimal | None, vllm_bin: str,
              host: str = DEFAULT_VLLM_HOST, tls_dir: Path | None = None) -> list[str]:
    """vLLM's command line; with ``tls_dir``, HTTPS with the box's key and certificate,
    reloaded in place when the follow program renews them."""
    argv = [vllm_bin, "serve", server.model, "--host", host, "--port", str(server.port),
            "--served-model-name", server.served_model_name]
    if tls_dir is not None:
        argv += ["--ssl-keyfile", str(tls_dir / KEY_FILE), "--ssl-certfile",
                 str(tls_dir / CERT_FILE), "--enable-ssl-refresh"]
    if utilization is not None:
        argv += ["--gpu-memory-utilization", f"{utilization:f}"]
    if server.max_model_len is not None:
        argv += ["--max-model-len", str(server.max_model_len)]
    if server.gpus > 1 and not server.sets_parallel:
        argv += ["--tensor-parallel-size", str(server.gpus)]
    return argv + list(server.args)


def render_program(server: Server, utilization: Decimal | None, settings: Settings,
                   devices: tuple[int, ...] = (), tls: bool = False) -> str:
    """The Supervisor program for one server: deterministic text, bearer in the environment.

    ``devices``: the cards a box of several cards gave it, by nvidia-smi's index, with
    CUDA told to number cards as nvidia-smi does (by PCI bus; its own default puts the
    fastest first). Indices, not UUIDs: vLLM before 0.24 reads CUDA_VISIBLE_DEVICES as
    integers and fails at start on a UUID. A box of one card writes neither. ``tls``:
    vLLM serves HTTPS with the box's certificate, whose paths never change, so a renewal
    rewrites no program.
    """
    command = " ".join(supervisor_quote(arg)
                       for arg in vllm_argv(server, utilization, settings.vllm_bin,
                                            settings.vllm_host,
                                            settings.tls_dir if tls else None))
    data = settings.data_dir
    lines = [
        MARKER,
        f"[program:{server.name}]",
        f"command={supervisor_value(command)}",
        "environment=" + supervisor_value(
            f'VLLM_API_KEY="{server.api_key}",HF_HOME="{data / "hf"}"' + (
                f',CUDA_DEVICE_ORDER="{CUDA_DEVICE_ORDER}",'
                f'CUDA_VISIBLE_DEVICES="{",".join(str(i) for i in devices)}"'
                if devices else "")),
        "autostart=true",
        "autorestart=true",
        "startsecs=10",
        "startretries=5",
        "stopsignal=TERM",
        "stopwaitsecs=60",
        "stopasgroup=true",
        "killasgroup=true",
        f"stdout_logfile={supervisor_value(str(data / 'logs' / (server.name + '.log')))}",
        "stdout_logfile_maxbytes=50MB",
        "stdout_logfile_backups=5",
        "redirect_stderr=true",
    ]
    return "\n".join(lines) + "\n"


def follow_argv() -> list[str]:
    """This very file run with --follow by this interpreter (absolute paths both)."""
    return [sys.executable, str(Path(__file__).resolve()), "--follow"]


def supervisor_env_value(name: str, value: str) -> str:
    """One ``environment=`` value quoted so Supervisor reads it back unchanged, else Refused.

    Supervisor splits the line with a non-POSIX shlex (quotes, no escapes), then strips
    quote characters from both ends of each value; its ini reader cuts a ``;`` or ``#``
    that follows whitespace. A value must fit inside one kind of quote and avoid those.
    """
    quote = '"' if '"' not in value else "'"
    if quote in value or UNSAFE_CHAR_RE.search(value) or value[:1] in "'\"" \
            or value[-1:] in "'\"" or re.search(r"\s[;#]", value):
        raise Refused(f"{name} cannot be carried to the follow program by Supervisor's "
                      "environment=: it holds both quote kinds, starts or ends with a quote, a "
                      "control character, or ';' or '#' after a space")
    return supervisor_value(f"{quote}{value}{quote}")


def render_follow_program(settings: Settings) -> str:
    """The follow program: this file with --follow, in the environment this run was given.

    Nothing in it depends on the assignment, so applying a revision never restarts it. It
    carries FLEET_KEY, hence 0600 like the others; its stop signal reaches only itself, so a
    supervisorctl it started outlives it.
    """
    command = " ".join(supervisor_quote(arg) for arg in follow_argv())
    environment = ",".join(f"{name}={supervisor_env_value(name, value)}"
                           for name, value in settings.follow_env)
    lines = [
        MARKER,
        f"[program:{FOLLOW_PROGRAM}]",
        f"command={supervisor_value(command)}",
        f"environment={environment}",
        "autostart=true",
        "autorestart=true",
        "startsecs=5",
        "startretries=3",
        "stopsignal=TERM",
        "stopwaitsecs=10",
        f"stdout_logfile={supervisor_value(str(settings.follow_log))}",
        "stdout_logfile_maxbytes=10MB",
        "stdout_logfile_backups=3",
        "redirect_stderr=true",
    ]
    return "\n".join(lines) + "\n"


def program_name(text: str) -> str | None:
    """The name supervisord knows a program file by: its ``[program:NAME]`` section."""
    found = PROGRAM_SECTION_RE.search(text)
    return found.group(1) if found else None


# ---- roles/vllm_box/files/box_program/plan.py
# What an assignment changes on disk, worked out before anything is touched.
#
# The plan compares the wanted programs and the applied record with ours on disk (a
# foreign file in the way is refused), so a dry run shows exactly what a run writes and
# an unchanged assignment writes nothing.


@dataclass(frozen=True)
class FileChange:
    """One file to write (``after``) or remove (``after`` is None)."""

    path: Path
    before: str | None
    after: str | None
    mode: int = 0o600


@dataclass(frozen=True)
class ProgramStatus:
    """One Supervisor program and what happens to its file: added, updated, removed, unchanged."""

    name: str
    file: str


@dataclass
class Plan:
    programs: list[FileChange] = field(default_factory=list)
    record: FileChange | None = None
    unchanged: list[Path] = field(default_factory=list)
    applied_at: str = ""
    previous: dict[str, Any] | None = None
    statuses: list[ProgramStatus] = field(default_factory=list)

    @property
    def changes(self) -> list[FileChange]:
        return self.programs + ([self.record] if self.record else [])

    def changing_servers(self) -> list[str]:
        """The servers whose programs this plan adds, rewrites or removes (not the follower)."""
        return [status.name for status in self.statuses
                if status.file != "unchanged" and status.name != FOLLOW_PROGRAM]


def is_ours(text: str) -> bool:
    return text.split("\n", 1)[0] == MARKER


def read_ours(conf_dir: Path) -> dict[Path, str]:
    """The program files an earlier run wrote (marker on the first line), by path."""
    ours = {}
    if conf_dir.is_dir():
        for path in sorted(conf_dir.glob(PROGRAM_GLOB)):
            text = path.read_text(encoding="utf-8", errors="replace")
            if is_ours(text):
                ours[path] = text
    return ours


def plan_programs(conf_dir: Path, wanted: dict[Path, str]) -> tuple[list[FileChange], list[Path]]:
    """Compare the wanted programs with ours on disk; a foreign file in the way is refused."""
    ours = read_ours(conf_dir)
    for path in wanted:
        if path.exists() and path not in ours:
            raise Refused(f"{path} exists and was not written by install_set.py (no marker "
                          "line); move it away or rename the server")
    changes = [FileChange(path, ours.get(path), text)
               for path, text in wanted.items() if ours.get(path) != text]
    changes += [FileChange(path, text, None) for path, text in ours.items() if path not in wanted]
    unchanged = [path for path, text in wanted.items() if ours.get(path) == text]
    return changes, unchanged


def program_statuses(programs: Iterable[tuple[str, Path]],
                     changes: Iterable[FileChange]) -> list[ProgramStatus]:
    """Each wanted program (name, file), then each one of an earlier assignment it removes."""
    by_path = {change.path: change for change in changes}
    statuses = []
    for name, path in programs:
        change = by_path.get(path)
        kind = "unchanged" if change is None else "added" if change.before is None else "updated"
        statuses.append(ProgramStatus(name, kind))
    for change in by_path.values():
        gone = program_name(change.before or "") if change.after is None else None
        if gone is not None:
            statuses.append(ProgramStatus(gone, "removed"))
    return statuses


def build_record(assignment: Assignment, memory: Mapping[str, Decimal],
                 applied_at: str, placement: Placement = NO_PLACEMENT) -> dict[str, Any]:
    """What the box applied, without any secret: for operators, for drift checks, and for the
    follow program (the revision it names in its checks, ``rollout.follow_s`` its period)."""
    servers = []
    for server in assignment.servers:
        entry: dict[str, Any] = {"name": server.name, "model": server.model,
                                 "served_model_name": server.served_model_name,
                                 "port": server.port}
        if memory.get(server.name) is not None:
            entry["gpu_memory_utilization"] = float(memory[server.name])
        servers.append(entry)
    record = {"revision": assignment.revision, "host": assignment.host,
              "applied_at": applied_at, "servers": servers,
              **placement.record(with_uuid=True)}
    if assignment.rollout is not None:
        record["rollout"] = dataclasses.asdict(assignment.rollout)
    if assignment.tls is not None:
        record["tls"] = dataclasses.asdict(assignment.tls)
    return record


def record_text(record: Mapping[str, Any]) -> str:
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def read_record(path: Path) -> tuple[str | None, dict[str, Any] | None]:
    """The applied record on disk as (text, data); (None, None) when absent or unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError):
        return None, None
    return text, data if isinstance(data, dict) else None


def plan_record(path: Path, previous: tuple[str | None, dict[str, Any] | None],
                assignment: Assignment, memory: Mapping[str, Decimal], now: str,
                programs_changed: bool, placement: Placement = NO_PLACEMENT
                ) -> tuple[FileChange | None, str]:
    """The record to write, if any, and the applied_at it carries.

    Unchanged programs and the same content keep the first applied_at, so a
    re-run rewrites nothing.
    """
    before, existing = previous
    if existing is not None and not programs_changed:
        kept = build_record(assignment, memory, existing.get("applied_at", ""), placement)
        if kept == existing:
            return None, kept["applied_at"]
    after = record_text(build_record(assignment, memory, now, placement))
    return FileChange(path, before, after, mode=0o644), now


def make_plan(assignment: Assignment, memory: Mapping[str, Decimal], settings: Settings,
              now: str, follow: bool, placement: Placement = NO_PLACEMENT) -> Plan:
    """Every file this assignment needs written or removed, touching nothing yet.

    ``follow``: the follow program is wanted too (a fetched assignment with ``rollout``).
    """
    names = {s.name: program_path(settings.conf_dir, s.name) for s in assignment.servers}
    wanted = {names[s.name]: render_program(s, memory.get(s.name), settings,
                                            placement.devices(s.name),
                                            assignment.tls is not None)
              for s in assignment.servers}
    if follow:
        names[FOLLOW_PROGRAM] = settings.conf_dir / FOLLOW_FILE
        wanted[names[FOLLOW_PROGRAM]] = render_follow_program(settings)
    programs, unchanged = plan_programs(settings.conf_dir, wanted)
    previous = read_record(settings.record_path)
    record, applied_at = plan_record(settings.record_path, previous, assignment, memory, now,
                                     bool(programs), placement)
    if record is None:
        unchanged.append(settings.record_path)
    return Plan(programs=programs, record=record, unchanged=unchanged, applied_at=applied_at,
                previous=previous[1],
                statuses=program_statuses(names.items(), programs))


def apply_changes(changes: Iterable[FileChange]) -> None:
    for change in changes:
        if change.after is None:
            change.path.unlink(missing_ok=True)
        else:
            atomic_write(change.path, change.after, change.mode)


# ---- roles/vllm_box/files/box_program/supervisor.py
# The handover to supervisord: ``supervisorctl reread`` then ``update``.
#
# The one handover of both paths (pull and push): ``update`` adds, restarts and drops
# exactly the programs whose files changed, and starts nothing a person stopped.


# What ``supervisorctl update`` says it did to a program group, and our word for it.
UPDATE_LINE_RE = re.compile(r"^(\S+): (added|updated|removed) process group$", re.MULTILINE)


@dataclass
class Handover:
    """What supervisorctl said, and what ``update`` did to each program group it names."""

    said: list[str] = field(default_factory=list)
    actions: dict[str, str] = field(default_factory=dict)


def hand_over(timeout_s: float = 300.0) -> Handover:
    """``supervisorctl reread`` then ``update``, the one handover of both paths.

    ``update`` adds the programs supervisord lacks, restarts those whose file changed and
    drops those whose file is gone; it starts no program that is merely stopped.
    """
    handover = Handover()
    for verb in ("reread", "update"):
        try:
            done = subprocess.run(["supervisorctl", verb], capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HandoverFailed(f"programs written, but supervisorctl {verb} did not run: "
                                 f"{exc}") from None
        output = (done.stdout + done.stderr).strip()
        if done.returncode != 0:
            raise HandoverFailed(f"programs written, but supervisorctl {verb} failed (exit "
                                 f"{done.returncode}): {output}")
        handover.said.append(f"supervisorctl {verb}: {output or 'ok'}")
        if verb == "update":
            handover.actions = dict(UPDATE_LINE_RE.findall(done.stdout))
    return handover


# ---- roles/vllm_box/files/box_program/console.py
# Where the box program talks: prose or one JSON object, every line masked.
#
# No secret the run knows (fleet key, box token, bearers) reaches a terminal or a log;
# the follow program's lines are stamped with the UTC time.


MASK = "***"

ENV_BEARER_RE = re.compile(r'VLLM_API_KEY="[^"]*"')


def mask_text(text: str, secrets: Iterable[str]) -> str:
    """Hide every secret we know of, and any bearer in a program's environment line."""
    text = ENV_BEARER_RE.sub(f'VLLM_API_KEY="{MASK}"', text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    return text


def unified_diff(change: FileChange) -> str:
    before = (change.before or "").splitlines(keepends=True)
    after = (change.after or "").splitlines(keepends=True)
    return "".join(difflib.unified_diff(
        before, after,
        fromfile=str(change.path) if change.before is not None else "/dev/null",
        tofile=str(change.path) if change.after is not None else "/dev/null"))


class Console:
    """Where the program talks: prose on stdout, or stderr when --json owns stdout.

    Every line goes through the mask, so no secret reaches a terminal or a log. The
    follower writes one line per step, stamped with the UTC time (its log has no other
    clock): what supervisorctl said over several lines is joined with "; ".
    """

    def __init__(self, json_mode: bool, stamped: bool = False) -> None:
        self.json_mode = json_mode
        self.stamped = stamped
        self.secrets: set[str] = set()

    def mask(self, text: str) -> str:
        return mask_text(text, self.secrets)

    def line(self, text: str) -> str:
        if self.stamped:
            text = f"{utc_now()} " + "; ".join(part for part in text.splitlines() if part)
        return self.mask(text)

    def say(self, text: str) -> None:
        print(self.line(text), file=sys.stderr if self.json_mode else sys.stdout, flush=True)

    def warn(self, text: str) -> None:
        print(self.line(f"warning: {text}"), file=sys.stderr, flush=True)

    def fail(self, error: InstallError) -> None:
        message = self.mask(str(error))
        print(f"install_set: {message}", file=sys.stderr, flush=True)
        if self.json_mode:
            print(json.dumps({"failed": True, "rc": error.exit_code, "msg": message}))

    def changes(self, changes: Iterable[FileChange], dry_run: bool) -> None:
        """One line per file; a dry run in prose adds its diff (the JSON object carries it)."""
        for change in changes:
            removing = change.after is None
            if dry_run:
                self.say(f"would {'remove' if removing else 'write'} {change.path}")
                if not self.json_mode:
                    self.say(unified_diff(change).rstrip("\n"))
            else:
                self.say(f"{'removed' if removing else 'wrote'} {change.path}")

    def result(self, plan: Plan, revision: str | None, dry_run: bool, record: Path,
               handover: Handover | None = None) -> None:
        """The closing word: the JSON object for the push role, or a line when nothing changed.

        ``programs`` gives each program by the name supervisord knows it, what happened to its
        file, and what ``update`` did to it (null when it did nothing or did not run).
        """
        actions = handover.actions if handover else {}
        if self.json_mode:
            print(json.dumps({
                "changed": bool(plan.changes), "dry_run": dry_run,
                "written": [str(c.path) for c in plan.changes if c.after is not None],
                "removed": [str(c.path) for c in plan.changes if c.after is None],
                "unchanged": [str(path) for path in plan.unchanged],
                "revision": revision,
                "record": str(record),
                "handed_over": handover is not None,
                "programs": [{"name": status.name, "file": status.file,
                              "supervisord": actions.get(status.name)}
                             for status in plan.statuses],
                "diff": [{"path": str(c.path), "before": self.mask(c.before or ""),
                          "after": self.mask(c.after or "")} for c in plan.changes],
            }, indent=2))
        elif not plan.changes:
            self.say(f"unchanged: revision {revision} is applied, nothing to do")


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---- roles/vllm_box/files/box_program/apply.py
# Applying an assignment: plan, preflight, write, hand over, record, report.
#
# The one apply of boot, push and follow, so every path leaves byte-identical programs.


def prepare_directories(settings: Settings) -> None:
    """The folders the programs log to and cache weights in must exist before they start
    (supervisord refuses a program whose log folder is missing: the follower's too)."""
    for folder in (settings.conf_dir, settings.data_dir / "logs", settings.data_dir / "hf",
                   settings.follow_log.parent):
        folder.mkdir(parents=True, exist_ok=True)


def report_applied(settings: Settings, assignment: Assignment, applied_at: str,
                   say: Callable[[str], None], placement: Placement = NO_PLACEMENT
                   ) -> str | None:
    """POST the applied revision to llmao; returns a warning instead of raising."""
    body = json.dumps({
        "revision": assignment.revision,
        "applied_at": applied_at,
        "servers": [{"name": s.name, "port": s.port, "served_model_name": s.served_model_name}
                    for s in assignment.servers],
        **placement.record(),
    }).encode("utf-8")
    try:
        status, answer = call_llmao(settings, "POST", APPLIED_PATH, say, body,
                                    attempts=min(settings.attempts, 3))[:2]
    except InstallError as exc:
        return f"could not report the applied revision: {exc}"
    if not 200 <= status < 300:
        return f"llmao did not take the applied revision ({status}): {server_message(answer)}"
    return None


@dataclass(frozen=True)
class Mode:
    """How one apply runs: what it may touch and whom it tells."""

    fetched: bool  # from llmao: report the revision, and follow when the payload says so
    dry_run: bool = False
    handover: bool = True
    following: bool = False  # run by the follow program: its own program is handed over last
    certificate: Any = None  # the push path's: llmao's answer to the box's certificate request


def plan_assignment(assignment: Assignment, settings: Settings,
                    follow: bool) -> tuple[Placement, Plan, list[str]]:
    """Ask the cards, place the servers, divide the cards, plan every file: the apply's
    planning, and the follow loop's answer to which servers a revision changes. Notes for
    the log come back, unsaid."""
    cards, cards_note = query_cards()
    placement = Placement(cards, place_servers(assignment.servers, cards))
    notes = [cards_note, *placement.notes()]
    if cards is None and any(server.gpus > 1 for server in assignment.servers):
        notes.append("cards unknown: nothing placed; a server spanning several cards runs on "
                     "the first ones vLLM sees")
    memory = divide_cards(assignment.servers, cards, placement.servers)
    if memory:
        notes.append("gpu memory: " + ", ".join(f"{name} {value:f}"
                                                for name, value in memory.items()))
    return placement, make_plan(assignment, memory, settings, utc_now(), follow,
                                placement), notes


def apply_assignment(assignment: Assignment, settings: Settings, console: Console,
                     mode: Mode) -> None:
    """Preflight, divide, write, hand over, record, report: the one apply of boot and follow.

    The follow program is planned only for a fetched assignment that carries ``rollout``.
    """
    console.secrets.update(server.api_key for server in assignment.servers)
    console.say(f"assignment for {assignment.host}: revision {assignment.revision}, "
                f"{len(assignment.servers)} server(s)")
    if not mode.dry_run:
        require_certificate_source(settings, assignment.tls, mode.certificate)
    placement, plan = checked_plan(assignment, settings, console, mode)
    if mode.dry_run:
        show_dry_run(assignment, settings, console, mode, plan)
    else:
        carry_out(assignment, settings, console, mode, placement, plan)


def checked_plan(assignment: Assignment, settings: Settings, console: Console,
                 mode: Mode) -> tuple[Placement, Plan]:
    """The plan, its notes said; when a server's program changes, the preflight too (an
    unchanged assignment already runs and holds what it once checked for)."""
    placement, plan, notes = plan_assignment(assignment, settings,
                                             mode.fetched and assignment.rollout is not None)
    for note in notes:
        console.say(note)
    if plan.changing_servers():
        if assignment.servers and NO_NVIDIA_SMI in notes:
            raise DoesNotFit(NO_GPU_BOX)
        for note in preflight(assignment.servers, placement.cards, placement.servers,
                              disk_free_gb(settings.data_dir), settings.data_dir,
                              plan.previous):
            console.say(note)
    return placement, plan


def show_dry_run(assignment: Assignment, settings: Settings, console: Console, mode: Mode,
                 plan: Plan) -> None:
    """What a run would do, touching nothing: the certificate, each file with its diff, the
    handover."""
    if assignment.tls is not None:
        why = certificate_due(settings, assignment.tls, time.time())
        console.say(f"certificate: {why}: would ask llmao for one" if why
                    else "certificate: the box's is good")
        if why and shutil.which("openssl") is None:
            console.warn("box TLS needs the openssl command and this box has none")
    console.changes(plan.changes, dry_run=True)
    if plan.changes and mode.handover:
        console.say("would run supervisorctl reread and update")
    console.result(plan, assignment.revision, True, settings.record_path)


def carry_out(assignment: Assignment, settings: Settings, console: Console, mode: Mode,
              placement: Placement, plan: Plan) -> None:
    """Write the programs, hand over, write the record, report. When the follow program
    itself applies, a change to its own program is written and handed over last, after the
    report: handing it over stops the process doing it."""
    ensure_certificate(settings, assignment.tls, console.say, mode.certificate)
    own_path = settings.conf_dir / FOLLOW_FILE
    own = [c for c in plan.programs if mode.following and c.path == own_path]
    programs = [c for c in plan.programs if c not in own]
    prepare_directories(settings)
    apply_changes(programs)
    console.changes(programs, dry_run=False)
    handed = None
    if mode.handover and (programs or plan.record):
        handed = hand_over()
        for line in handed.said:
            console.say(line)
    if plan.record:
        apply_changes([plan.record])
        console.changes([plan.record], dry_run=False)
    if mode.fetched:
        warning = report_applied(settings, assignment, plan.applied_at, console.say, placement)
        if warning:
            console.warn(warning)
        else:
            console.say(f"reported revision {assignment.revision} to llmao")
    if own:
        apply_changes(own)
        console.changes(own, dry_run=False)
        if mode.handover:
            for line in hand_over().said:
                console.say(line)
    console.result(plan, assignment.revision, False, settings.record_path, handed)


# ---- roles/vllm_box/files/box_program/follow.py
# ``--follow``: the follow program's loop, which keeps a box on llmao's intended revision.
#
# It checks with ``If-None-Match``, takes a turn when servers would restart, then
# applies as a boot does. Errors are one line each and the loop goes on, backing off.


# What may stand between the quotes of an entity tag (If-None-Match names the revision).
ETAG_RE = re.compile(r"[!#-~]{1,128}\Z")

# Never among them: LLMAO_BOOTSTRAP_TOKEN works once, on the boot's fetch, and the follow
# program's file would keep a secret that is spent.
# Each wait of the follow loop is its period times a draw from this range, so boxes that
# booted together do not check together.
FOLLOW_JITTER = (0.8, 1.2)
# A granted turn is polled this often (or every follow_s, when that is shorter).
TURN_POLL_S = 2.0
# The check period when the applied record does not say (no record yet, or it was removed).
FOLLOW_FALLBACK_S = 60.0
# After errors the period doubles per error up to this (or follow_s, when that is longer).
FOLLOW_BACKOFF_CAP_S = 900.0


@dataclass(frozen=True)
class Applied:
    """What the follow loop knows of the box: the applied revision and how often to check."""

    revision: str | None
    follow_s: float
    tls: BoxTls | None = None


def read_applied(path: Path) -> Applied:
    """The applied record's revision and ``rollout.follow_s``, or the fallback period.

    A revision that cannot stand in an entity tag is not named in the check.
    """
    record = read_record(path)[1] or {}
    revision = record.get("revision")
    if not (isinstance(revision, str) and ETAG_RE.match(revision)):
        revision = None
    try:
        follow_s = validate_rollout(record.get("rollout"), "applied.rollout").follow_s
    except Refused:
        follow_s = FOLLOW_FALLBACK_S
    try:
        tls = validate_tls(record["tls"], "applied.tls") if "tls" in record else None
    except Refused:
        tls = None
    return Applied(revision, follow_s, tls)


def backoff_period(follow_s: float, errors: int) -> float:
    """The period after ``errors`` errors in a row: doubled per error, bounded."""
    return min(follow_s * 2 ** min(errors, 16), max(follow_s, FOLLOW_BACKOFF_CAP_S))


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


@dataclass
class Follower:
    """``--follow``: check, take a turn, fetch, apply, report; again, forever.

    Every wait goes through ``sleep`` and every jitter through ``uniform``, so a test
    drives the loop without waiting. Errors are one line each and the loop goes on,
    backing off; nothing here ends the process but a signal.
    """

    settings: Settings
    console: Console
    sleep: Callable[[float], None] = time.sleep
    uniform: Callable[[float, float], float] = random.uniform

    def __post_init__(self) -> None:
        # It never presents a bootstrap token (supervisord may hand it one from the image's
        # environment): the boot's fetch spent it, and kept the box token it bought.
        self.settings = dataclasses.replace(self.settings, bootstrap_token=None)

    def say(self, text: str) -> None:
        self.console.say(text)

    def jittered(self, period: float) -> float:
        return period * self.uniform(*FOLLOW_JITTER)

    def run(self) -> NoReturn:
        applied = read_applied(self.settings.record_path)
        self.say(f"following {self.settings.url}{CONFIG_PATH}: checking every "
                 f"{applied.follow_s:g} s, revision {applied.revision or 'none'} applied")
        wait, errors = self.jittered(applied.follow_s), 0
        while True:
            self.sleep(wait)
            try:
                self.round()
            except (InstallError, OSError) as error:
                errors += 1
                follow_s = read_applied(self.settings.record_path).follow_s
                wait = self.jittered(backoff_period(follow_s, errors))
                self.say(f"error: {one_line(error)}; next check in {wait:.0f} s")
            else:
                errors = 0
                wait = self.jittered(read_applied(self.settings.record_path).follow_s)

    def round(self) -> None:
        """One check; when llmao intends another revision: a turn, a real fetch, the apply.
        First, the applied assignment's certificate is renewed when it is due: vLLM reloads
        it in place, so a renewal takes no turn. A failed renewal is one line and the check
        goes on: the revision that fixes it must still reach the box."""
        applied = read_applied(self.settings.record_path)
        try:
            ensure_certificate(self.settings, applied.tls, self.say)
        except (InstallError, OSError) as error:
            self.say(f"error: certificate renewal failed: {one_line(error)}; checking for "
                     "a new revision anyway")
        intended = self.check(applied)
        if intended is None:
            return
        revision = intended.revision or ""
        changing = plan_assignment(intended, self.settings,
                                   intended.rollout is not None)[1].changing_servers()
        if not changing:
            self.say(f"plan: revision {revision} changes no server program: applying "
                     "without a turn")
        elif not self.take_turn(revision, changing, applied.follow_s):
            return
        fetched = validate_assignment(fetch_assignment(self.settings, self.say))
        if fetched.revision != revision:
            self.say(f"fetched revision {fetched.revision}, not {revision}: checking again")
            return
        self.say(f"applying revision {revision}")
        apply_assignment(fetched, self.settings, self.console,
                         Mode(fetched=True, following=True))
        self.say(f"applied revision {revision}")

    def check(self, applied: Applied) -> Assignment | None:
        """The follow check: the intended assignment when it is not the applied one."""
        doc = fetch_assignment(self.settings, self.say, applied.revision, attempts=1)
        intended = None if doc is None else validate_assignment(doc)
        if intended is None or intended.revision == applied.revision:
            self.say(f"checked: revision {applied.revision} is current")
            return None
        self.say(f"checked: revision {intended.revision} is intended, "
                 f"{applied.revision or 'none'} is applied")
        return intended

    def take_turn(self, revision: str, servers: list[str], follow_s: float) -> bool:
        """Ask for the turn until llmao says apply; False when it no longer intends revision.

        Waiting for a turn, the box asks every follow_s; holding one, it polls every
        min(follow_s, 2) s. A line is written when the answer changes, not per poll.
        """
        self.say(f"turn: asking for revision {revision} (servers {', '.join(servers)})")
        said = ""
        while True:
            answer = ask_turn(self.settings, self.say, revision, servers)
            if answer is None:
                self.say(f"turn: revision {revision} is no longer intended (409): checking "
                         "again")
                return False
            if answer.apply:
                self.say(f"turn: granted for revision {revision}, drained: apply")
                return True
            holding = answer.granted and answer.phase in ("draining", "drained")
            line = (f"turn: granted for revision {revision} ({answer.phase}): waiting for "
                    "the drain" if holding else
                    f"turn: waiting for revision {revision}: {answer.why or answer.phase}")
            if line != said:
                self.say(line)
                said = line
            self.sleep(min(follow_s, TURN_POLL_S) if holding else self.jittered(follow_s))


EXIT_DOC = """exit codes:
  0  done, or nothing to change
  1  the assignment does not fit this box (GPU memory or disk), or the box has
     no nvidia-smi (no GPU); nothing written
  2  refused: 403/404/other 4xx, malformed or hostile assignment, foreign file,
     bad environment (non-ASCII LLMAO_HOST or FLEET_KEY, say)
  3  llmao unreachable after the retries (network errors, 5xx), or a 429
     asking for a longer wait than LLMAO_RETRY_AFTER_MAX_S leaves
  4  programs written but supervisorctl reread/update failed"""

# The program's on/off options and what --help says of each.
SWITCHES = (
    ("--dry-run", "write nothing, run no supervisorctl, report nothing: print what would "
                  "change, with diffs (secrets masked). Without --payload the assignment is "
                  "still fetched"),
    ("--json", "print one JSON object (changed, written, removed, unchanged, revision, diff) "
               "instead of prose"),
    ("--no-handover", "do not run supervisorctl reread/update (the caller drives supervisord "
                      "itself)"),
    ("--follow", "keep following llmao, as the llmao-follow program does: check every "
                 "rollout.follow_s seconds, take a turn for a new revision, apply it as a boot "
                 "does, report it; runs until stopped"),
    ("--cert-request", "with --payload, under box TLS: print one JSON object, why the box needs "
                       "a certificate (due, null when it does not) and, when it does, a "
                       "certificate request (csr) for its key, made here (0600) and never "
                       "printed; with --dry-run nothing is made"),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="install_set.py",
        description="Fetch this box's assignment from llmao (or take --payload) and write\n"
                    "one Supervisor program per vLLM server.\n\n"
                    "environment: LLMAO_URL, FLEET_KEY, LLMAO_HOST, DATA_DIRECTORY,\n"
                    "SUPERVISOR_CONF_DIR, VLLM_BIN, VLLM_HOST; LLMAO_BOOTSTRAP_TOKEN (an\n"
                    "enrollment, presented once); LLMAO_FETCH_ATTEMPTS, LLMAO_FETCH_BACKOFF_S,\n"
                    "LLMAO_FETCH_TIMEOUT_S, LLMAO_RETRY_AFTER_MAX_S tune the retries.",
        epilog=EXIT_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--payload", metavar="FILE",
                        help="apply this assignment (JSON; - for stdin) instead of fetching it; "
                             "nothing is reported to llmao")
    for switch, said in SWITCHES:
        parser.add_argument(switch, action="store_true", help=said)
    parser.add_argument("--certificate", metavar="FILE",
                        help="with --payload, under box TLS: llmao's answer (JSON: "
                             "certificate, ca, not_after) to this box's --cert-request, "
                             "checked and kept before the apply")
    args = parser.parse_args(argv)
    if args.follow and (args.payload or args.dry_run or args.json or args.no_handover
                        or args.cert_request or args.certificate):
        parser.error("--follow runs alone: it fetches, applies, hands over and reports")
    if (args.cert_request or args.certificate) and not args.payload:
        parser.error("--cert-request and --certificate are the push path's: give --payload")
    if args.cert_request and args.certificate:
        parser.error("--cert-request makes the request, --certificate keeps its answer: "
                     "one at a time")
    return args


def run(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> None:
    fetching = args.payload is None
    settings = read_settings(environ, fetching)
    for secret in (settings.fleet_key, read_token(settings), settings.bootstrap_token):
        if secret:
            console.secrets.add(secret)
    settings = spend_nothing(settings, args, console)
    if args.follow:
        Follower(settings, console).run()
    doc = fetch_assignment(settings, console.say) if fetching else load_payload(args.payload)
    if args.cert_request:
        print(json.dumps(cert_request_answer(settings, validate_assignment(doc).tls,
                                             args.dry_run, time.time())))
        return
    given = load_payload(args.certificate, "certificate") if args.certificate else None
    apply_assignment(validate_assignment(doc), settings, console,
                     Mode(fetched=fetching, dry_run=args.dry_run,
                          handover=not args.no_handover, certificate=given))


def spend_nothing(settings: Settings, args: argparse.Namespace, console: Console) -> Settings:
    """A dry run keeps no box token and presents no bootstrap token: that works once, and
    the box token it buys would be lost."""
    if not args.dry_run:
        return settings
    if settings.bootstrap_token and read_token(settings) is None:
        console.say("dry run: LLMAO_BOOTSTRAP_TOKEN is not presented (it works once, and a dry "
                    "run keeps no box token)")
    return dataclasses.replace(settings, keeps_token=False, bootstrap_token=None)


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(json_mode=args.json, stamped=args.follow)
    try:
        run(args, os.environ if environ is None else environ, console)
    except InstallError as error:
        console.fail(error)
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
