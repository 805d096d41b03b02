"""Find or start the container engine the docker tests use, and stop it if we started it.

These machines have no systemd, so dockerd is started by hand as root. An engine that already
answers (someone else's, or one started earlier with `python -m rig.dockerd start`) is used as is
and never stopped here: only the dockerd whose PID is in the rig's own pidfile is ours to stop.
`--iptables=false` keeps loopback-published ports working while boxes get no route out.

    python -m rig.dockerd start|stop|status
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rig import cache_dir, rig_lock

DOCKERD = Path("/usr/sbin/dockerd")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0

_started: subprocess.Popen[bytes] | None = None


class EngineError(RuntimeError):
    """The container engine could not be reached, started or stopped."""


class EngineMissing(EngineError):
    """dockerd is not installed: the one reason docker tests may be skipped outside CI."""


class DockerError(RuntimeError):
    """A docker command failed; the message carries its stderr."""


def docker(
    *args: str, input: bytes | None = None, check: bool = True, timeout: float = 120.0
) -> subprocess.CompletedProcess[bytes]:
    """Run the docker client and return its result; raise DockerError (with stderr) on failure."""
    # Without input, stdin is closed: an inherited terminal must never feed a container.
    stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
    result = subprocess.run(
        ["docker", *args], **stdin, capture_output=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip()
        raise DockerError(f"docker {args[0]} failed ({result.returncode}): {detail}")
    return result


def engine_answers() -> bool:
    """True when `docker info` reaches a running engine."""
    try:
        return docker("info", check=False, timeout=30).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


def pidfile() -> Path:
    return cache_dir() / "dockerd.pid"


def log_path() -> Path:
    return cache_dir() / "dockerd.log"


def ensure_engine() -> bool:
    """Make sure docker reaches an engine; return True only when this call started dockerd."""
    with rig_lock("dockerd"):
        if engine_answers():
            return False
        if not DOCKERD.exists():
            raise EngineMissing(
                f"{DOCKERD} is not installed (apt-get install docker.io) and no engine answers"
            )
        _start_dockerd()
        return True


def _start_dockerd() -> None:
    global _started
    with open(log_path(), "ab") as log:
        _started = subprocess.Popen(
            [
                str(DOCKERD),
                "--storage-driver=overlay2",
                "--iptables=false",
                f"--pidfile={pidfile()}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while not engine_answers():
        if _started.poll() is not None:
            raise EngineError(
                f"dockerd exited with status {_started.returncode}; its log:\n{_log_tail()}"
            )
        if time.monotonic() > deadline:
            stop_engine()
            raise EngineError(
                f"dockerd did not answer within {START_TIMEOUT_S:.0f} s; its log:\n{_log_tail()}"
            )
        time.sleep(0.3)


def _log_tail(lines: int = 15) -> str:
    try:
        return "\n".join(log_path().read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def our_pid() -> int | None:
    """The PID of the dockerd this rig started, if it is still that process."""
    try:
        pid = int(pidfile().read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    # A PID can be reused after a crash: only a dockerd under that PID is still ours.
    return pid if comm == "dockerd" else None


def stop_engine() -> bool:
    """Stop the dockerd this rig started (SIGTERM, wait, SIGKILL); False when there is none."""
    pid = our_pid()
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, STOP_TIMEOUT_S):
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 10.0)
    pidfile().unlink(missing_ok=True)
    return True


def _wait_gone(pid: int, timeout: float) -> bool:
    """Wait for pid to end: reap it when it is our child, else watch /proc."""
    if _started is not None and _started.pid == pid:
        try:
            _started.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _status() -> int:
    if not engine_answers():
        print("no container engine answers")
        return 1
    pid = our_pid()
    owner = f"started by the rig, pid {pid}" if pid else "not started by the rig"
    print(f"container engine answers ({owner})")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["start"]:
        started = ensure_engine()
        print("dockerd started by the rig" if started else "a container engine already answers")
        return 0
    if argv == ["stop"]:
        print("dockerd stopped" if stop_engine() else "no dockerd started by the rig is running")
        return 0
    if argv == ["status"]:
        return _status()
    print("usage: python -m rig.dockerd start|stop|status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except EngineError as exc:
        print(f"rig.dockerd: {exc}", file=sys.stderr)
        sys.exit(1)
