"""The gunicorn worker llmao-server runs: gevent, with a time limit on every read.

Every box on every provider reaches the server directly, so a connection that
says nothing, or trickles a byte now and then, must cost a greenlet and a file
descriptor, never a worker thread (under gthread, ten idle connections without
a key stopped the server). gevent's worker gives that; this subclass adds what
it lacks, all bounded by one limit, gunicorn's ``keepalive`` setting
(``llmao-server --read-timeout``):

- the TLS handshake, in total (:class:`DeadlineContext`);
- a request's headers, and the wait for the next request on a kept-alive
  connection (gunicorn's async worker already bounds ``next(parser)`` by
  :meth:`timeout_ctx`);
- a request's whole handling: reading its body and writing its answer to a
  slow reader.

Each is a deadline for the whole step (a ``gevent.Timeout``), not a limit per
read, so trickling a byte at a time gains nothing.

A connection that runs out of time is closed without an answer.

Why gevent (measured here, two workers, on a shared two-core machine whose load
average ran from 9 to 56, so single figures swing widely): under gthread a
keyed fetch timed out with 10 idle connections open; under this worker a
fetch's p99 with 1,000 open was 0.45-2.24x (median about 1.4) the p99 with none
(bench P6, seven runs). Throughput against a bare WSGI app under the same
worker (P1) was 0.70-1.24 (median about 0.86, nine runs) once the per-fetch
log line was made cheap (:class:`llmao_server.logs.RequestLog`); gthread with
the same app gave 0.62 and 0.81, using a third more server CPU per fetch.

Both stores work under it: SQLite and psycopg calls (psycopg picks its blocking
wait, as it is imported before the worker patches) never yield, so two
requests' statements never mix in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
from gevent import get_hub
from gunicorn.workers.ggevent import GeventWorker

from .logs import RequestLog


def read_timeout(config: Any) -> float:
    """The one read limit, in seconds: gunicorn's ``keepalive`` as llmao-server sets it."""
    return float(config.keepalive)


class DeadlineContext:
    """An SSL context whose server-side handshakes must finish within a deadline.

    gevent's server completes the handshake inside ``wrap_socket``, before the
    worker sees the connection, so the deadline is set here. A handshake that
    fails or runs out of time ends that connection's greenlet quietly: a port
    scanner or a plain-HTTP client must not write a traceback each. Everything
    else is the wrapped context's.
    """

    def __init__(self, context: Any, seconds: float):
        self._context = context
        self._seconds = seconds

    def wrap_socket(self, sock: Any, **kwargs: Any) -> Any:
        kwargs["do_handshake_on_connect"] = False  # so that a failed one can be closed here
        wrapped = self._context.wrap_socket(sock, **kwargs)
        deadline = gevent.Timeout(self._seconds)
        deadline.start()
        try:
            wrapped.do_handshake()
        except (OSError, gevent.Timeout) as failed:  # ssl.SSLError is an OSError
            if isinstance(failed, gevent.Timeout) and failed is not deadline:
                raise
            wrapped.close()
            raise gevent.GreenletExit from None
        finally:
            deadline.close()
        return wrapped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def deadline_ssl_context(config: Any, default_factory: Any) -> DeadlineContext:
    """gunicorn's ``ssl_context`` hook: its default context, handshakes bounded in time."""
    return DeadlineContext(default_factory(), read_timeout(config))


def after(seconds: float, call: Callable[[], None]) -> None:
    """Run ``call`` in ``seconds`` from the event loop itself, as a timer's callback: a
    greenlet spawned for it (``gevent.spawn_later``) cost a worker the copy of its stack,
    a memory mapping made and unmade, at every gathering of access lines."""
    get_hub().loop.timer(seconds).start(call)


class LlmaoWorker(GeventWorker):
    """gunicorn's gevent worker with every read of a client bounded by :func:`read_timeout`."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # Read once: gunicorn's settings are slow to look up, and this is asked twice a
        # request. A reload (SIGHUP) replaces the workers, so it never goes stale.
        self.read_timeout_s = read_timeout(self.cfg)

    def init_process(self) -> None:
        # Each access line is no longer a write of its own: see RequestLog.
        RequestLog.later = after
        super().init_process()

    def timeout_ctx(self) -> gevent.Timeout:
        # Bounds a request's headers and the idle wait between kept-alive requests;
        # on expiry the parser yields nothing and gunicorn closes the connection.
        return gevent.Timeout(self.read_timeout_s, False)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
        # A body trickled in a byte at a time, or an answer read as slowly, gets the
        # same limit in total; then the connection is closed quietly (StopIteration is
        # how gunicorn's loop ends a connection), without a traceback per attacker.
        deadline = gevent.Timeout(self.read_timeout_s)
        deadline.start()
        try:
            return super().handle_request(listener_name, req, sock, addr)
        except gevent.Timeout as expired:
            if expired is not deadline:
                raise
            raise StopIteration from None
        finally:
            deadline.close()
            # Let every other connection have its turn: a client that pipelines requests
            # as fast as it can would otherwise be answered back to back, without a wait
            # on the socket, while every other client of this worker starved.
            gevent.sleep(0)
