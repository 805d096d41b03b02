"""Where the server's lines go: stderr by default, each with the pid of the worker.

The pid tells the workers of one server apart, which is how an operator (and
the integration test) sees that every worker shares one state. ``--log-format
json`` writes the same records, gunicorn's own included, as one JSON object a
line, for a log collector (journald, Loki, …) to parse without a pattern.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

LOG_FORMAT = "%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s"
SERVER_LOGGER = "llmao_server"
LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``pid``,
    ``message``, and ``exception`` when the record carries one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else logging.Formatter(LOG_FORMAT)


def gunicorn_log_options(log_format: str) -> dict[str, Any]:
    """gunicorn settings that make its own lines (workers booting, exiting) match ours."""
    if log_format != "json":
        return {}
    handler = {"class": "logging.StreamHandler", "formatter": "json",
               "stream": "ext://sys.stderr"}
    return {"logconfig_dict": {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {"console": handler, "error_console": handler},
        "root": {"level": "INFO", "handlers": ["console"]},
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["error_console"],
                               "propagate": False, "qualname": "gunicorn.error"},
            "gunicorn.access": {"level": "INFO", "handlers": [], "propagate": False,
                                "qualname": "gunicorn.access"},
        },
    }}


def log_to_stderr(log_format: str = "text") -> None:
    """The process-wide setup of ``llmao-server``: every INFO line to stderr.

    Every box request is logged, so a record must be cheap: the format uses
    neither the caller's file and line nor thread or multiprocessing names, and
    the logging module is told not to gather them (its documented optimisations).
    """
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=logging.INFO, handlers=[handler])


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
