"""A throwaway PostgreSQL cluster on 127.0.0.1 for the state store's tests.

Debian's server binaries (``/usr/lib/postgresql/<version>/bin``) make a cluster
in a fresh temporary folder (``initdb``), listening on a free loopback port
with no Unix socket and password authentication; ``pg_ctl`` starts it and it
is stopped by the postmaster's PID. Durability is switched off: a test cluster
never outlives its run. PostgreSQL refuses to run as root, so as root the
binaries run as the ``postgres`` user Debian's package creates.

One cluster serves a whole pytest session: :func:`session_cluster` starts it
on first use and registers its stop with pytest, so tests in any folder share
it without a common conftest. Each caller takes its own database. Used on
its own, :func:`start_cluster` returns a cluster its caller stops.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rig.boxes import free_port

if TYPE_CHECKING:
    import pytest

SUPERUSER = "llmao"
RUN_AS = "postgres"
STOP_TIMEOUT_S = 30.0
SETTINGS = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = ''
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
"""


class PostgresMissing(RuntimeError):
    """Debian's PostgreSQL server is not installed (apt package ``postgresql``)."""


def server_binaries() -> Path:
    """The newest installed ``/usr/lib/postgresql/*/bin`` holding ``initdb`` and ``pg_ctl``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda path: int(Path(path).parent.parent.name))
    if not found:
        raise PostgresMissing("PostgreSQL's server is not installed: apt-get install postgresql")
    return Path(found[-1]).parent


def as_cluster_owner(command: list[str]) -> list[str]:
    """The command as the ``postgres`` user when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", RUN_AS, "--", *command]


@dataclass
class PostgresCluster:
    """A running cluster: its folder, port and superuser password."""

    folder: Path
    port: int
    password: str = field(repr=False)
    _names: itertools.count = field(default_factory=lambda: itertools.count(1), repr=False)

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def new_database(self, prefix: str = "llmao") -> str:
        """Create an empty database and return its URL."""
        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        self.psql(f"CREATE DATABASE {name}")
        return self.url(name)

    def psql(self, statement: str) -> None:
        """Run one statement as the superuser (the password travels in the environment)."""
        environment = {**os.environ, "PGPASSWORD": self.password}
        subprocess.run([str(server_binaries() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
                        "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER,
                        "-d", "postgres", "-c", statement],
                       env=environment, check=True, capture_output=True)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """Fast shutdown of the postmaster by its PID, then remove the folder."""
        pid = self.postmaster_pid()
        if pid is not None:
            _stop_pid(pid)
        shutil.rmtree(self.folder, ignore_errors=True)


def _stop_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def start_cluster() -> PostgresCluster:
    """initdb a new cluster in a temporary folder and start it; the caller stops it."""
    binaries = server_binaries()
    folder = Path(tempfile.mkdtemp(prefix="llmao-pg-"))
    password = secrets.token_urlsafe(18)
    cluster = PostgresCluster(folder, free_port(), password)
    try:
        if os.geteuid() == 0:
            owner = pwd.getpwnam(RUN_AS)
            os.chown(folder, owner.pw_uid, owner.pw_gid)
        password_file = folder / "pwfile"
        password_file.write_text(password + "\n")
        if os.geteuid() == 0:
            os.chown(password_file, owner.pw_uid, owner.pw_gid)
        password_file.chmod(0o600)
        _run_owner([str(binaries / "initdb"), "-D", str(cluster.data), "-U", SUPERUSER,
                    "--auth=scram-sha-256", f"--pwfile={password_file}", "--encoding=UTF8",
                    "--locale=C.UTF-8", "--no-sync"])
        password_file.unlink()
        with open(cluster.data / "postgresql.conf", "a") as conf:
            conf.write(SETTINGS.format(port=cluster.port))
        _run_owner([str(binaries / "pg_ctl"), "-D", str(cluster.data), "-l",
                    str(folder / "server.log"), "-w", "-t", "60", "start"])
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _run_owner(command: list[str]) -> None:
    done = subprocess.run(as_cluster_owner(command), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(command[0]).name} failed ({done.returncode}):\n"
                           f"{done.stdout}{done.stderr}")


def session_cluster(config: pytest.Config) -> PostgresCluster:
    """The pytest session's cluster, started the first time it is asked for.

    Without PostgreSQL installed the asking test skips, except in CI (``CI=true``),
    which installs it: there a missing server fails.
    """
    global _session
    if _session is None:
        try:
            _session = start_cluster()
        except PostgresMissing as exc:
            import pytest

            if os.environ.get("CI") == "true":
                pytest.fail(f"CI must provide PostgreSQL: {exc}")
            pytest.skip(str(exc))
        config.add_cleanup(_stop_session)
    return _session


def _stop_session() -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None


_session: PostgresCluster | None = None
