# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-server vLLM bearer.

The bearer is derived, never stored: llmao and LiteLLM must both know it from
the box name and listen port alone, and the salt that makes it unguessable never
leaves llmao. Every face (config endpoint, Ansible module, CLI) calls
:func:`derive_vllm_api_key`; nothing else computes one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from .hostnames import normalize_host
from .json_values import is_integer

BEARER_PREFIX = "sk-vllm-"
DERIVATION_CONTEXT = "llmao.vllm.api_key"
PLACEHOLDER_PREFIX = "CHANGE_ME"


class BearerError(ValueError):
    """A bearer cannot be derived from these inputs; the message holds no secret."""


def is_placeholder(secret: str | None) -> bool:
    """True for a secret that is unset, empty or still the template's ``CHANGE_ME…``."""
    return not secret or secret.startswith(PLACEHOLDER_PREFIX)


def server_bearer(settings, box: str, listen_port: int) -> str:
    """The bearer a server requires: the shared legacy one for a legacy pair, else derived.

    ``settings`` is the loaded ``config.yaml`` (:class:`config_file.Settings`).
    """
    if settings.fleet.is_legacy(box, listen_port):
        if is_placeholder(settings.fleet.selfhost_api_key):
            raise BearerError("fleet.selfhost_api_key missing or CHANGE_ME for a legacy server")
        return settings.fleet.selfhost_api_key
    return derive_vllm_api_key(settings.fleet.vllm_api_salt, box, listen_port)


def derive_vllm_api_key(salt: str | None, host: str, listen_port: int) -> str:
    """``sk-vllm-`` + unpadded urlsafe base64 of HMAC-SHA256(salt, context, host, port)."""
    if salt is None:
        raise BearerError("salt not defined")
    if is_placeholder(salt):
        raise BearerError("salt missing or CHANGE_ME")
    if not isinstance(host, str) or not normalize_host(host):
        raise BearerError("host is empty")
    if not is_integer(listen_port) or listen_port <= 0:
        raise BearerError("listen_port must be a positive int")
    message = f"{DERIVATION_CONTEXT}\n{normalize_host(host)}\n{listen_port}"
    digest = hmac.new(salt.encode("utf-8"), message.encode("utf-8"), hashlib.sha256).digest()
    return BEARER_PREFIX + base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")
