"""This process's id, known without asking the kernel each time.

Every box request needs it twice (its log line names the worker, and its fetch
time goes to the recorder of this very process), and a system call is a
measurable part of a fetch's cost. The id changes only at a fork, and the
child then sets it anew.
"""

from __future__ import annotations

import os

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def pid() -> int:
    """The id of the process calling, as ``os.getpid()`` would answer."""
    return _pid
