"""Why the box program stops, as exceptions whose class is the exit code.

Every refusal is raised as one of these and printed as one line by ``main``: a box's
log shows the reason, never a traceback, and the caller (a provision script, the
push role, Supervisor) tells the kinds apart by the code alone.
"""

from __future__ import annotations


class InstallError(Exception):
    """A reason to stop; its exit code tells the caller which kind."""

    exit_code = 2


class DoesNotFit(InstallError):
    exit_code = 1


class Refused(InstallError):
    exit_code = 2


class Unreachable(InstallError):
    exit_code = 3


class HandoverFailed(InstallError):
    exit_code = 4
