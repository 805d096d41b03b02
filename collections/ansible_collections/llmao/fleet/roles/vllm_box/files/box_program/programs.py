"""The Supervisor programs: one per vLLM server, and the follow program.

Their text is deterministic, quoted for Supervisor's own parsers, with the bearer in
the environment and never on the command line; a program file changes only when
what it runs changes, which is what makes ``supervisorctl update`` restart it.
"""

from __future__ import annotations

import re
import shlex
import sys
from decimal import Decimal
from pathlib import Path

from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import (
    FOLLOW_PROGRAM,
    UNSAFE_CHAR_RE,
)

from .assignment import Server
from .box_files import CERT_FILE, KEY_FILE, MARKER
from .errors import Refused
from .placement import CUDA_DEVICE_ORDER
from .settings import DEFAULT_VLLM_HOST, Settings

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
