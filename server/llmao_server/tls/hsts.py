"""HSTS: every answer over HTTPS tells the client to use nothing else for a year.

A WSGI layer around the Flask app (admin API, dashboard, health, metrics); the
box API, which stands in front of it, adds the same header by the same rule
(:func:`over_https`), so every answer carries it. Plain HTTP (loopback only) is
left alone: a browser ignores the header there anyway, and it would pin a
development host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any
from wsgiref.types import WSGIApplication

HSTS_HEADER = ("Strict-Transport-Security", "max-age=31536000")


def over_https(environ: Mapping[str, Any]) -> bool:
    """Whether a request came over HTTPS: its answer then carries :data:`HSTS_HEADER`."""
    return environ.get("wsgi.url_scheme") == "https"


class StrictTransport:
    """Adds :data:`HSTS_HEADER` to every answer the wrapped app gives over HTTPS."""

    def __init__(self, app: WSGIApplication):
        self.app = app

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not over_https(environ):
            return self.app(environ, start_response)

        def start_with_hsts(status: str, headers: list[tuple[str, str]],
                            exc_info: Any = None) -> Any:
            return start_response(status, [*headers, HSTS_HEADER], exc_info)

        return self.app(environ, start_with_hsts)
