"""Where the server's lines go: stderr by default, each with the pid of the worker.

The pid tells the workers of one server apart, which is how an operator (and
the integration test) sees that every worker shares one state. ``--log-format
json`` writes the same records, gunicorn's own included, as one JSON object a
line, for a log collector (journald, Loki, …) to parse without a pattern.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import stat
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
# How long a worker gathers access lines before writing them (RequestLog.later), and how
# many bytes of whole lines at most one write holds: PIPE_BUF, what a pipe (journald, a log
# shipper) keeps whole between the workers writing to it. A regular file keeps every write
# whole whatever its size (the kernel holds the file's offset through each write), so into
# a file lines gather up to GATHERED_FILE_BYTES: a write a gathering, not one every 20 lines.
GATHER_S = 0.05
GATHERED_BYTES = select.PIPE_BUF
GATHERED_FILE_BYTES = 1 << 16
# A worker writes what it gathered once this many lines wait, if GATHER_S has not passed
# (a gathered text line is made only when written, so its bytes are not known before).
GATHERED_LINES = 512
# A line's milliseconds, "000" to "999", formatted once.
MILLIS = tuple(f"{millis:03d}" for millis in range(1000))


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
    RequestLog.gathered_bytes = gathered_bytes(STDERR_FD)


def gathered_bytes(descriptor: int) -> int:
    """How many bytes of lines one write to ``descriptor`` may hold and keep them whole."""
    try:
        regular = stat.S_ISREG(os.fstat(descriptor).st_mode)
    except OSError:
        regular = False
    return GATHERED_FILE_BYTES if regular else GATHERED_BYTES


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

    A gunicorn worker of ``llmao-server`` answers many requests at once, and a
    ``write`` to a log file cost it more than making the line (the kernel
    updates the file's times on each): it sets :attr:`later`, and lines are
    then gathered for up to :data:`GATHER_S` and written together, whole lines
    of at most :attr:`gathered_bytes` a ``write`` (:func:`gathered_bytes`: what
    stderr keeps whole between writers), and what is gathered is written at exit.
    A text line is gathered as the parts of its message (``render``'s arguments)
    and its time, and made only then: lines made together, in one loop, cost a
    worker 4 µs a fetch less than each made as its request ended, among the
    parser's and the event loop's work (P1, measured in one run against each other).
    """

    direct = False
    json = False
    # How to run a call after a delay (the worker's :func:`llmao_server.worker.after`),
    # where lines are gathered; and how many bytes of them one write holds.
    later: Callable[[float, Callable[[], None]], Any] | None = None
    gathered_bytes = GATHERED_BYTES

    def __init__(self, logger: logging.Logger, render: Callable[..., str] = str):
        self.logger = logger
        self.render = render  # a text line's message, from what :meth:`text` was given
        self._second = -1
        self._stamp = ""  # the time to the second, then what follows the milliseconds
        self._tag = ""
        # Lines waiting: made (bytes), or a text line's time and message parts.
        self._gathered: list[bytes | tuple[float, tuple[Any, ...]]] = []
        os.register_at_fork(after_in_child=self._forget_stamp)  # the tag names the pid
        atexit.register(self.flush)

    def plain_text(self) -> bool:
        """Whether a line goes straight to stderr as text: :meth:`text` then needs no
        fields, and the caller need not make them."""
        return self.direct and not self.json and self.logger.isEnabledFor(logging.INFO)

    def text(self, *parts: Any) -> None:
        """One text line, its message ``render(*parts)``, as :data:`LOG_FORMAT` has it."""
        self._emit((time.time(), parts))

    def _stamped(self, now: float, message: str) -> bytes:
        """The text line of ``message`` written at ``now``."""
        second = int(now)
        if second != self._second:
            self._second = second
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S,", time.localtime(second))
            self._tag = f" [{pid()}] INFO {self.logger.name}: "
        line = f"{self._stamp}{MILLIS[int((now - second) * 1000)]}{self._tag}{message}\n"
        return line.encode("utf-8", "backslashreplace")

    def _forget_stamp(self) -> None:
        self._second = -1

    def entry(self, fields: dict[str, Any], message: str) -> None:
        """One line: the JSON object of ``fields``, or ``message`` in a text log."""
        if not (self.direct and self.logger.isEnabledFor(logging.INFO)):
            self.logger.info("%s", message, extra={"fields": fields})
        elif not self.json:
            self._emit(self._stamped(time.time(), message))
        else:
            stamp = datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="milliseconds")
            self._emit(json.dumps({"time": stamp, "level": "INFO", "logger": self.logger.name,
                                   "pid": pid(), **fields}, ensure_ascii=False)
                       .encode("utf-8", "backslashreplace") + b"\n")

    def _emit(self, line: bytes | tuple[float, tuple[Any, ...]]) -> None:
        """Write a line at once, or, under a worker, gather it."""
        later = RequestLog.later  # read on the class: a plain function, never bound to self
        if later is None:
            write_all(self._made(line))
            return
        if not self._gathered:
            later(GATHER_S, self.flush)
        self._gathered.append(line)
        if len(self._gathered) >= GATHERED_LINES:
            self.flush()

    def _made(self, line: bytes | tuple[float, tuple[Any, ...]]) -> bytes:
        """A line's bytes: as it came, or made now from its time and message parts."""
        if isinstance(line, bytes):
            return line
        now, parts = line
        return self._stamped(now, self.render(*parts))

    def flush(self) -> None:
        """Write the lines gathered so far: whole lines, at most :attr:`gathered_bytes` a
        write (a line longer than that alone)."""
        lines = [self._made(line) for line in self._gathered]
        self._gathered.clear()
        batch: list[bytes] = []
        size = 0
        for line in lines:
            if batch and size + len(line) > RequestLog.gathered_bytes:
                write_all(b"".join(batch))
                batch, size = [], 0
            batch.append(line)
            size += len(line)
        if batch:
            write_all(b"".join(batch))


def write_all(data: bytes) -> None:
    """``data`` to stderr, unbuffered."""
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
