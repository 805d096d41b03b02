"""Where the server's lines go: stderr by default, each with the pid of the worker.

The pid tells the workers of one server apart, which is how an operator (and
the integration test) sees that every worker shares one state.
"""

from __future__ import annotations

import logging
import sys

LOG_FORMAT = "%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s"
SERVER_LOGGER = "llmao_server"


def log_to_stderr() -> None:
    """The process-wide setup of ``llmao-server``: every INFO line to stderr.

    Every box request is logged, so a record must be cheap: the format uses
    neither the caller's file and line nor thread or multiprocessing names, and
    the logging module is told not to gather them (its documented optimisations).
    """
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)


def ensure_server_logging() -> None:
    """Make the server's INFO lines visible wherever the app runs (``flask run``, a test).

    Left alone when the embedding program already set a level or a handler.
    """
    logger = logging.getLogger(SERVER_LOGGER)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not logger.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logger.addHandler(handler)
