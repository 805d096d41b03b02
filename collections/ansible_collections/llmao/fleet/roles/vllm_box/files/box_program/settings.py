"""What the environment decides: checked once, before any work (``Settings``).

A box template carries llmao's URL, the fleet key and the box's name; a stock vLLM
image, the data folder and Supervisor's. Everything read here is checked here, so a
wrong value is one line and exit 2 before a byte is sent or written. The box token
kept between runs (docs/box-identity.md) is read and kept here too.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import (
    BOOTSTRAP_ENV,
    INSTANCE_ENV,
    MAX_INSTANCE,
    is_box_token,
)
from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import (
    BOX_NAME_RE,
    UNSAFE_CHAR_RE,
)

from .box_files import TLS_DIR, atomic_write
from .errors import Refused
from .json_input import MAX_NUMBER_CHARS

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
