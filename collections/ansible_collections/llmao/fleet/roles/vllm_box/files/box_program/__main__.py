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

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Mapping

from .apply import Mode, apply_assignment
from .assignment import validate_assignment
from .certificate import cert_request_answer
from .console import Console
from .errors import InstallError
from .follow import Follower
from .json_input import load_payload
from .llmao_api import fetch_assignment
from .settings import Settings, read_settings, read_token

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
