"""Where the server's lines go: stderr by default, each with the pid of the worker.

The pid tells the workers of one server apart, which is how an operator (and
the integration test) sees that every worker shares one state. ``--log-format
json`` writes the same records, gunicorn's own included, as one JSON object a
line, for a log collector (journald, Loki, …) to parse without a pattern.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .process_id import pid

LOG_FORMAT = "%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s"
SERVER_LOGGER = "llmao_server"
STDERR_FD = 2
LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``pid``,
    ``message``, and ``exception`` when the record carries one; a record with ``fields``
    (:class:`RequestLog`) has those instead of its message."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
        }
        fields = getattr(record, "fields", None)
        if fields is None:
            line["message"] = record.getMessage()
        else:
            line.update(fields)
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
    RequestLog.direct = True
    RequestLog.json = log_format == "json"


class RequestLog:
    """The access log's one INFO line per request, written at the least cost.

    A fetch answers in tens of microseconds, and a line through the logging
    machinery (a record, a formatter, strftime, a handler lock, a flush) cost
    more than the answer: under a boot storm it set the pace. Once
    :func:`log_to_stderr` has set up ``llmao-server``'s own logging, a line
    here is formatted like :data:`LOG_FORMAT`, or as :class:`JsonFormatter`'s
    object with the line's fields (the time string made once a second, the pid
    known without a system call), and handed to stderr in one ``write``: lines
    are short (callers' values are cut), so each stays whole between workers.
    Anywhere else (a test, ``flask run``) it goes through ``logger`` as usual,
    the fields in the record's ``fields``.
    """

    direct = False
    json = False

    def __init__(self, logger: logging.Logger):
        self.logger = logger
        self._second = -1
        self._stamp = ""

    def entry(self, fields: dict[str, Any], text: Callable[[dict[str, Any]], str]) -> None:
        """One line of ``fields``: their JSON object, or ``text(fields)`` in a text log."""
        if not (self.direct and self.logger.isEnabledFor(logging.INFO)):
            self.logger.info("%s", text(fields), extra={"fields": fields})
            return
        now = time.time()
        second = int(now)
        if self.json:
            stamp = datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds")
            line = json.dumps({"time": stamp, "level": "INFO", "logger": self.logger.name,
                               "pid": pid(), **fields}, ensure_ascii=False) + "\n"
        else:
            if second != self._second:
                self._second = second
                self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
            millis = int((now - second) * 1000)
            line = (f"{self._stamp},{millis:03d} [{pid()}] INFO {self.logger.name}: "
                    f"{text(fields)}\n")
        data = line.encode("utf-8", "backslashreplace")
        while data:
            data = data[os.write(STDERR_FD, data):]


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
