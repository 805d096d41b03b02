"""Running a WSGI app under gunicorn from Python, with the server's one gunicorn config.

``llmao-server`` and the benchmark's bare app both go through
:func:`gunicorn_options`, so a comparison between them compares the apps and
nothing else.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Callable
from typing import Any

from gunicorn.app.base import BaseApplication

from .worker import deadline_ssl_context

WORKER_CLASS = "llmao_server.worker.LlmaoWorker"
READ_TIMEOUT_S = 10
# Open connections one worker holds at most (each costs a greenlet and a file
# descriptor); beyond that the kernel's backlog queues new ones.
CONNECTIONS_PER_WORKER = 4096
GRACEFUL_TIMEOUT_S = 10


def gunicorn_options(bind: str, workers: int, certfile: str | None = None,
                     keyfile: str | None = None,
                     read_timeout_s: int = READ_TIMEOUT_S) -> dict[str, Any]:
    """The settings every llmao gunicorn runs with.

    ``read_timeout_s`` bounds a TLS handshake, a request's headers (and the idle
    wait between kept-alive requests), and a request's body and answer: see
    :mod:`llmao_server.worker`, which reads it as gunicorn's ``keepalive``.
    """
    options: dict[str, Any] = {
        "bind": [bind],
        "workers": workers,
        "worker_class": WORKER_CLASS,
        "worker_connections": CONNECTIONS_PER_WORKER,
        "keepalive": read_timeout_s,
        # Load (and validate) the fleet once, in the arbiter; workers share it by fork.
        "preload_app": True,
        # gunicorn's control socket defaults to one path per user, shared by every
        # gunicorn on the machine; llmao-server has no use for it.
        "control_socket_disable": True,
        "accesslog": None,
        "errorlog": "-",
        "graceful_timeout": GRACEFUL_TIMEOUT_S,
        "proc_name": "llmao-server",
    }
    if certfile:
        options.update(certfile=certfile, keyfile=keyfile, ssl_context=deadline_ssl_context)
    return options


def settled(app: Callable[..., Any]) -> Callable[..., Any]:
    """``app``, with everything loaded so far moved out of the garbage collector's sight.

    The arbiter loads the app (the whole fleet: some objects per box) before it
    forks the workers. Left as they are, those objects are traversed by every
    full collection a worker makes while it answers, and a 10,000-box fleet
    made a fetch's median latency 1.9 times that at 10 boxes (P2); frozen, they
    are never traversed, and the pages the workers share by fork stay shared.
    At exit they are handed back to the collector, so that the interpreter's
    last collection frees them while every module still stands (left frozen,
    they were freed during module teardown, and a logging handler's callback
    then failed with a traceback in the log).
    """
    gc.collect()
    gc.freeze()
    atexit.unregister(gc.unfreeze)  # once, however often a reload settles a new app
    atexit.register(gc.unfreeze)
    return app


class GunicornServer(BaseApplication):
    """A gunicorn arbiter for the app ``load`` returns, configured only by ``options``.

    On SIGHUP gunicorn reloads its settings and replaces every worker by a fresh
    fork of the arbiter; with ``preload_app`` they would fork the old app. So a
    reload asks ``reload`` for a new app first: it returns one, or None to go on
    serving the app already loaded (a bad new config never stops the service).
    """

    def __init__(self, load: Callable[[], Callable[..., Any]], options: dict[str, Any],
                 reload: Callable[[], Callable[..., Any] | None] | None = None):
        self._load = load
        self._options = options
        self._reload = reload
        super().__init__()

    def reload(self) -> None:
        super().reload()
        fresh = self._reload() if self._reload is not None else None
        if fresh is not None:
            self.callable = fresh
            gc.unfreeze()  # so that the old app's objects can be collected
            settled(fresh)

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Callable[..., Any]:
        return settled(self._load())
