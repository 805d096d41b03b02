"""The credential a request presents, read one way by the box API, the admin API and /metrics.

``Authorization: Bearer <credential>``, the scheme in any case and the credential
trimmed. Anything else presents nothing; each API then says which credential it
wants, and compares what was presented in constant time.
"""

from __future__ import annotations


def presented_bearer(authorization: str) -> str | None:
    """The credential of a bearer ``Authorization`` header; None when there is none."""
    scheme, _, credential = authorization.partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        return None
    return credential
