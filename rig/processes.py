"""Stopping a child process the rig started: by its PID, politely first.

Every service the tests, the demo and the benchmarks start as a child (stub
vLLM, LiteLLM, llmao-server) stops the same way, so a test never leaves one
running or a zombie behind.
"""

from __future__ import annotations

import subprocess


def stop_child(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to the child's PID, SIGKILL if it is still there after ``timeout`` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
