"""The server's container image (rig/server_image.py), built here without any registry: it runs
as a non-root user, its health check turns healthy, and it serves a box its config over HTTPS
with the fleet's files and the TLS pair mounted as docs/running-the-server.md says."""

from __future__ import annotations

import json
import shutil
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rig.boxes import RIG_LABEL
from rig.dockerd import docker
from rig.server_image import PORT, UID, build_server_image
from rig.tls import make_server_tls
from tests.server.fleet_pair import KNOWN, box_headers, write_pair

pytestmark = [pytest.mark.docker, pytest.mark.slow]

HEALTHY_TIMEOUT_S = 90.0
ACCESS_LINE_WAIT_S = 10.0


@pytest.fixture(scope="module")
def server_image(container_engine: None) -> str:
    return build_server_image()


@pytest.fixture
def mounted(tmp_path: Path) -> tuple[Path, Path]:
    """/etc/llmao as the container sees it (readable by its user), and the CA to trust."""
    etc = tmp_path / "etc-llmao"
    config, models = write_pair(tmp_path / "fleet")
    etc.mkdir()
    shutil.copy(config, etc / "config.yaml")
    shutil.copy(models, etc / "models.yaml")
    tls = make_server_tls(tmp_path / "tls", ["127.0.0.1", "localhost"])
    (etc / "tls").mkdir()
    shutil.copy(tls.certfile, etc / "tls" / "fullchain.pem")
    shutil.copy(tls.keyfile, etc / "tls" / "privkey.pem")
    for path in [etc, *etc.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # the container's user is not root
    return etc, tls.ca_file


@pytest.fixture
def running(server_image: str, mounted: tuple[Path, Path]) -> Iterator[str]:
    etc, _ = mounted
    container = docker("run", "--detach", "--label", f"{RIG_LABEL}=1",
                       "--volume", f"{etc}:/etc/llmao:ro", "--publish", f"127.0.0.1::{PORT}",
                       server_image).stdout.decode().strip()
    try:
        yield container
    finally:
        docker("rm", "--force", "--volumes", container, check=False)


def health(container: str) -> str:
    done = docker("inspect", "--format", "{{.State.Health.Status}}", container, check=False)
    return done.stdout.decode().strip()


def test_the_image_serves_a_box_its_config_as_a_non_root_user(
        running: str, mounted: tuple[Path, Path]) -> None:
    deadline = time.monotonic() + HEALTHY_TIMEOUT_S
    while health(running) != "healthy":
        logs = docker("logs", running, check=False)
        assert time.monotonic() < deadline and health(running) != "unhealthy", (
            logs.stdout + logs.stderr).decode(errors="replace")[-3000:]
        time.sleep(1)
    user = json.loads(docker("inspect", "--format", "{{json .Config.User}}", running).stdout)
    assert user == f"{UID}:{UID}"
    assert docker("exec", running, "id", "-u").stdout.decode().strip() == str(UID)
    port = docker("port", running, f"{PORT}/tcp").stdout.decode().split()[0].rsplit(":", 1)[1]
    request = urllib.request.Request(f"https://127.0.0.1:{port}/vllm/config",
                                     headers=box_headers())
    context = ssl.create_default_context(cafile=str(mounted[1]))
    with urllib.request.urlopen(request, timeout=10, context=context) as answer:
        assignment = json.loads(answer.read())
    assert assignment["host"] == KNOWN
    assert [entry["port"] for entry in assignment["servers"]] == [8001, 8002]
    access = config_access_lines(running)
    assert access and access[0]["box"] == KNOWN and access[0]["status"] == 200


def config_access_lines(container: str) -> list[dict]:
    """The JSON access lines of ``GET /vllm/config`` in the container's log; a worker
    gathers its lines for up to 50 ms before writing them, so they are waited for."""
    deadline = time.monotonic() + ACCESS_LINE_WAIT_S
    while True:
        lines = docker("logs", container).stderr.decode().splitlines()
        records = [json.loads(line) for line in lines if line.startswith("{")]
        access = [record for record in records if record.get("path") == "/vllm/config"]
        if access or time.monotonic() > deadline:
            return access
        time.sleep(0.2)
