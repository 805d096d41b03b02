# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How strong a secret of ``config.yaml`` must be: one rule, for every token and key.

A token somebody presents to llmao (``admin.token``, and any later token such as a
metrics token) is refused at load unless it is at least :data:`MIN_SECRET_LENGTH`
printable ASCII characters, without spaces, and differs from every other secret
of the file: a box's fleet key must never open the admin API. ``fleet.key`` and
``fleet.vllm_api_salt`` are judged by the same rule but only warned about: they
are baked into boxes or behind every bearer, so changing them means
re-provisioning, and refusing to load would strand a running fleet. A
``fleet.key`` no box can present at all (:func:`unpresentable`) is refused: it
strands the fleet already.
"""

from __future__ import annotations

MIN_SECRET_LENGTH = 32
# How the docs and every message say to make a strong secret.
MAKE_ONE = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
FIRST_PRINTABLE, LAST_PRINTABLE = "!", "~"
# The tokens llmao's own example files publish: whoever reads the project knows them, so a
# server must never take one as a credential (the example inventories still load for a look
# with ansible-inventory, which presents no token).
PUBLISHED_TOKENS = frozenset({
    "example-admin-token-change-me-before-real-use",
    "local-admin-token-replace-me-before-real-use",
})


def secret_weakness(value: str) -> str | None:
    """Why ``value`` is not a strong secret, in words that never quote it; None when strong."""
    if not all(FIRST_PRINTABLE <= ch <= LAST_PRINTABLE for ch in value):
        return "holds characters other than printable ASCII (spaces and non-ASCII included)"
    if len(value) < MIN_SECRET_LENGTH:
        return f"is shorter than {MIN_SECRET_LENGTH} characters"
    return None


def unpresentable(value: str) -> str | None:
    """Why no box can ever present ``value`` as ``Authorization: Bearer <value>``, or None.

    A header is sent as ASCII (HTTP clients refuse other characters or encode them
    as no server reads them back), control characters end or break it, and the
    server trims the credential (:mod:`bearer_header`), so a key that begins or
    ends with a space would never match.
    """
    if not all(" " <= ch <= LAST_PRINTABLE for ch in value):
        return ("holds characters other than printable ASCII (non-ASCII or control "
                "characters), which no box can send in its Authorization header")
    if value != value.strip():
        return "begins or ends with a space, which the server trims from what a box presents"
    return None


def published(value: str | None) -> str | None:
    """Why a token llmao-server would accept is no secret at all, or None."""
    if value in PUBLISHED_TOKENS:
        return ("is the example value llmao's example files publish: anyone can present it. "
                f"Make a token of your own with: {MAKE_ONE}")
    return None
