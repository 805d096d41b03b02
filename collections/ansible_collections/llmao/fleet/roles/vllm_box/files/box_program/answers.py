"""What llmao's refusals say to the operator of a box: one line, and what to do.

llmao answers errors as ``{"error": {"code", "message"}}``; a binding refusal's code
gets its own advice here (docs/box-identity.md), anything else its message, cleaned
for a log line.
"""

from __future__ import annotations

import json
import re

from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import UNSAFE_CHAR_RE

from .errors import Refused


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
