"""The server's container image, built here without any registry: `llmao-server:<version>`.

The box image's way (rig/box_image.py): its debootstrap base (a minimal Debian bookworm with
its Python 3.11), and one layer added with create / cp / commit, so no builder and no registry
is needed. The layer holds:

- the built wheel's contents (llmao_server and the core it imports) and the packages it
  depends on, copied from this environment (the same files pip installed here, for the same
  Python minor version, so no index is needed either), under /opt/llmao/site-packages;
- `/usr/local/bin/llmao-server`, and `/usr/local/bin/llmao-healthcheck` (GET /healthz);
- a user `llmao` (uid and gid 10001) that runs the server, owning `/var/lib/llmao` (the state).

It runs `llmao-server --bind 0.0.0.0:8443` over HTTPS with JSON logs, the fleet's files and
the TLS pair mounted at `/etc/llmao/` (docs/running-the-server.md, "Container image"):

    python -m rig.server_image        # prints the tag
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from rig import REPO_ROOT, rig_lock
from rig.box_image import BASE_TAG, build_base_image, image_exists
from rig.dockerd import docker, engine_answers

REPO = "llmao-server"
DISTRIBUTION = "llmao-fleet"
UID = GID = 10001
SITE = "opt/llmao/site-packages"
PORT = 8443
CONFIG_DIR = "/etc/llmao"
STATE_DIR = "var/lib/llmao"
COMMAND = ["llmao-server", "--bind", f"0.0.0.0:{PORT}",
           "--certfile", f"{CONFIG_DIR}/tls/fullchain.pem",
           "--keyfile", f"{CONFIG_DIR}/tls/privkey.pem", "--log-format", "json"]
ENVIRONMENT = {"LLMAO_CONFIG": f"{CONFIG_DIR}/config.yaml",
               "LLMAO_MODELS": f"{CONFIG_DIR}/models.yaml",
               "LLMAO_STATE": f"/{STATE_DIR}/llmao-state.sqlite3",
               "PYTHONPATH": f"/{SITE}", "PYTHONDONTWRITEBYTECODE": "1"}
LAYER_LABEL = "llmao.server.layer"
HEALTH = ["--interval=10s", "--timeout=5s", "--start-period=30s", "--retries=3"]
SERVER_SCRIPT = b"""#!/usr/bin/python3
import sys
from llmao_server.cli import main
sys.exit(main())
"""
# Liveness, not identity: the certificate is the operator's, for names the container does not
# know, so this probe of its own loopback does not verify it.
HEALTH_SCRIPT = f"""#!/usr/bin/python3
import ssl, sys, urllib.request
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
try:
    with urllib.request.urlopen("https://127.0.0.1:{PORT}/healthz", timeout=4,
                                context=context) as answer:
        sys.exit(0 if answer.status == 200 else 1)
except OSError:
    sys.exit(1)
""".encode()


class ServerImageError(RuntimeError):
    """The server image could not be built."""


def dependency_closure(name: str, extras: frozenset[str] = frozenset()) -> list[str]:
    """The installed distributions ``name`` needs, itself excluded, by its metadata's
    requirements (markers evaluated for this Python and the extras asked for)."""
    seen: set[str] = set()
    order: list[str] = []
    pending = [(name, extras)]
    while pending:
        current, wanted = pending.pop()
        for line in metadata.requires(current) or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is not None and not any(
                    marker.evaluate({"extra": extra}) for extra in (wanted or {""})):
                continue
            key = re.sub(r"[-_.]+", "-", requirement.name).lower()
            if key not in seen:
                seen.add(key)
                order.append(requirement.name)
                pending.append((requirement.name, frozenset(requirement.extras)))
    return order


def installed_files(distribution: str) -> Iterator[tuple[str, Path]]:
    """(path below site-packages, file) of every file pip installed for ``distribution``
    there; scripts (outside site-packages) and caches are left out."""
    dist = metadata.distribution(distribution)
    for entry in dist.files or []:
        if entry.parts[0] == ".." or "__pycache__" in entry.parts:
            continue
        path = Path(dist.locate_file(entry))
        if path.is_file():
            yield entry.as_posix(), path


def build_wheel(folder: Path) -> Path:
    """The project's wheel, as a user builds it (without build isolation: no index)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                    "--no-index", "--quiet", "--wheel-dir", str(folder), str(REPO_ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = folder.glob("llmao_fleet-*.whl")
    return wheel


def _add(tar: tarfile.TarFile, path: str, data: bytes | None, mode: int, owner: int = 0) -> None:
    info = tarfile.TarInfo(path)
    info.mode, info.uid, info.gid = mode, owner, owner
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def base_file(container: str, path: str) -> bytes:
    """A file of the base image, read through a created container."""
    with tarfile.open(fileobj=io.BytesIO(docker("cp", f"{container}:{path}", "-").stdout)) as tar:
        member = tar.next()
        extracted = tar.extractfile(member) if member else None
        if extracted is None:
            raise ServerImageError(f"{path} is not a file in {BASE_TAG}")
        return extracted.read()


def layer_tar(container: str, wheel: Path) -> bytes:
    """The layer: the wheel's contents, its dependencies, the two scripts, the user."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for folder in ("opt", "opt/llmao", SITE, "var/lib", STATE_DIR):
            _add(tar, folder, None, 0o750 if folder == STATE_DIR else 0o755,
                 UID if folder == STATE_DIR else 0)
        with zipfile.ZipFile(wheel) as archive:
            for item in archive.infolist():
                if not item.is_dir() and ".dist-info/" not in item.filename:
                    _add(tar, f"{SITE}/{item.filename}", archive.read(item), 0o644)
        for dependency in dependency_closure(DISTRIBUTION):
            for relative, path in installed_files(dependency):
                mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
                _add(tar, f"{SITE}/{relative}", path.read_bytes(), mode)
        _add(tar, "usr/local/bin/llmao-server", SERVER_SCRIPT, 0o755)
        _add(tar, "usr/local/bin/llmao-healthcheck", HEALTH_SCRIPT, 0o755)
        passwd = base_file(container, "/etc/passwd").decode()
        group = base_file(container, "/etc/group").decode()
        _add(tar, "etc/passwd", (passwd + f"llmao:x:{UID}:{GID}:llmao-server:/{STATE_DIR}:"
                                 "/usr/sbin/nologin\n").encode(), 0o644)
        _add(tar, "etc/group", (group + f"llmao:x:{GID}:\n").encode(), 0o644)
    return buffer.getvalue()


def image_tag(wheel: Path) -> str:
    """``llmao-server:<the wheel's version>``."""
    return f"{REPO}:{wheel.name.split('-')[1]}"


def image_label(tag: str) -> str | None:
    """The layer digest the image under ``tag`` was built from, or None without one."""
    done = docker("image", "inspect", "--format",
                  f'{{{{index .Config.Labels "{LAYER_LABEL}"}}}}', tag, check=False)
    return done.stdout.decode().strip() or None if done.returncode == 0 else None


def build_server_image() -> str:
    """Build the image (the base first, when the engine lacks it); return its tag. An image
    of the very same layer is kept as it is; a rebuilt one replaces the one under its tag."""
    with rig_lock("box-image"):
        if not image_exists(BASE_TAG):
            build_base_image()
    container = docker("create", BASE_TAG, "true").stdout.decode().strip()
    try:
        with tempfile.TemporaryDirectory() as folder:
            wheel = build_wheel(Path(folder))
            tag = image_tag(wheel)
            layer = layer_tar(container, wheel)
        digest = hashlib.sha256(layer).hexdigest()[:16]
        previous = image_label(tag)
        if previous == digest:
            return tag
        docker("cp", "-", f"{container}:/", input=layer, timeout=600)
        changes = [f"USER {UID}:{GID}", f"WORKDIR /{STATE_DIR}", f"EXPOSE {PORT}",
                   f"CMD {json.dumps(COMMAND)}", "ENTRYPOINT []",
                   f"HEALTHCHECK {' '.join(HEALTH)} CMD [\"llmao-healthcheck\"]",
                   f"VOLUME [\"/{STATE_DIR}\"]", f"LABEL {LAYER_LABEL}={digest}"]
        changes += [f"ENV {key}={value}" for key, value in ENVIRONMENT.items()]
        old = docker("image", "inspect", "--format", "{{.Id}}", tag, check=False)
        docker("commit", *[arg for change in changes for arg in ("--change", change)],
               container, tag, timeout=600)
        if old.returncode == 0:  # untagged now; kept only while a container still uses it
            docker("image", "rm", old.stdout.decode().strip(), check=False)
    finally:
        docker("rm", "-f", container, check=False)
    return tag


def missing_tools() -> str | None:
    """What this machine lacks to build the image, said before any work is done (a build
    without an engine once ran debootstrap for 47 s, then died with a traceback); None when
    nothing is missing."""
    if shutil.which("docker") is None:
        return ("no container engine: the image is built with one. Install it first "
                "(Debian: apt-get install docker.io), start it (dockerd, or "
                "`.venv/bin/python -m rig.dockerd start`), then run this again")
    if not engine_answers():
        return ("the container engine does not answer (`docker info` fails): start it "
                "(dockerd, or `.venv/bin/python -m rig.dockerd start`), then run this again")
    if not image_exists(BASE_TAG) and shutil.which("debootstrap") is None:
        return ("debootstrap is needed once, to make the image's Debian base "
                "(apt-get install debootstrap)")
    return None


def main() -> int:
    missing = missing_tools()
    if missing:
        print(f"rig.server_image: {missing}", file=sys.stderr)
        return 2
    print(build_server_image())
    return 0


if __name__ == "__main__":
    sys.exit(main())
