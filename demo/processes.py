"""The demo's processes: started detached, recorded at once, stopped by their recorded PID.

`make demo` returns while its services keep running, so each one runs in a session of its own
(Ctrl-C in the terminal then reaches only the demo's start-up, which stops them in order) and
is written to `.demo/pids.json` the moment it exists: a start-up killed half-way still leaves a
record that `make demo-stop` can act on. A PID is only ever signalled while /proc still shows
the same process (same start time), so a PID reused after a reboot is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

STOP_TIMEOUT_S = 30.0
KILL_TIMEOUT_S = 10.0


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or None
    when there is no such live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


@dataclass(frozen=True)
class Recorded:
    """One process the demo started: what it is, its PID (also its process group) and when it
    started, so a later `demo stop` can tell it from a stranger that reused the PID."""

    role: str
    pid: int
    started: int

    def alive(self) -> bool:
        return start_time(self.pid) == self.started


@dataclass
class Record:
    """`.demo/pids.json`: every process and container the demo started, and how far it got."""

    path: Path
    phase: str = "starting"
    mode: str = ""
    processes: list[Recorded] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)
    endpoints: list[tuple[str, int]] = field(default_factory=list)
    dockerd_pid: int | None = None
    # Boxes boot in threads of their own, each recording what it starts.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def load(cls, path: Path) -> Record | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return cls(path, data.get("phase", "starting"), data.get("mode", ""),
                   [Recorded(**entry) for entry in data.get("processes", [])],
                   list(data.get("containers", [])),
                   [(host, int(port)) for host, port in data.get("endpoints", [])],
                   data.get("dockerd_pid"))

    def save(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        data = {"phase": self.phase, "mode": self.mode,
                "processes": [asdict(entry) for entry in self.processes],
                "containers": self.containers,
                "endpoints": [list(endpoint) for endpoint in self.endpoints],
                "dockerd_pid": self.dockerd_pid}
        temp = self.path.with_suffix(".tmp")
        temp.write_text(json.dumps(data, indent=2) + "\n")
        temp.replace(self.path)

    def add_process(self, role: str, pid: int) -> Recorded:
        entry = Recorded(role, pid, start_time(pid) or 0)
        with self._lock:
            self.processes.append(entry)
            self._write()
        return entry

    def add_container(self, container: str) -> None:
        with self._lock:
            self.containers.append(container)
            self._write()

    def add_endpoint(self, host: str, port: int) -> None:
        with self._lock:
            self.endpoints.append((host, port))
            self._write()


def spawn(record: Record, role: str, argv: Sequence[str], log_path: Path, *,
          env: Mapping[str, str], cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start argv in a new session, output to log_path, and record it before returning."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    record.add_process(role, process.pid)
    return process


def stop_process(entry: Recorded) -> bool:
    """SIGTERM to the process group the demo made for it, SIGKILL if it lingers; False when it
    was no longer running (or the PID now belongs to someone else)."""
    if not entry.alive():
        return False
    _signal_group(entry.pid, signal.SIGTERM)
    if not _wait_gone(entry, STOP_TIMEOUT_S):
        _signal_group(entry.pid, signal.SIGKILL)
        _wait_gone(entry, KILL_TIMEOUT_S)
    return True


def _signal_group(pid: int, signum: int) -> None:
    """The group when the demo made one for it (group id = PID), else the process alone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _wait_gone(entry: Recorded, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while entry.alive():
        _reap(entry.pid)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our own child (else it stays a zombie)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
