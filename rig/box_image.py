"""Build (once) the container image the test boxes run, without any registry.

Two layers, each built only when missing:

- the base, `llmao-box-base:bookworm`: a minimal Debian made by debootstrap from the mirror apt
  already uses on this machine, then `docker import`ed (a minute or two, once per engine);
- the box layer, `llmao-box:<hash>`: the vLLM and nvidia-smi doubles on the paths the real tools
  have, with supervisord as PID 1. The tag is a hash of the layer's content and of the base, so
  editing a stub rebuilds only this layer (about a second). It is also tagged `llmao-box:latest`
  for configs that cannot call Python (molecule scenarios).

    python -m rig.box_image        # build what is missing, print the tag
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
import time
from dataclasses import dataclass
from pathlib import Path

from rig import cache_dir, rig_lock
from rig.dockerd import docker

SUITE = "bookworm"
BASE_TAG = f"llmao-box-base:{SUITE}"
BOX_REPO = "llmao-box"
BASE_PACKAGES = ("python3", "supervisor", "iproute2", "ca-certificates", "procps")
STUB_DIR = Path(__file__).resolve().parent
BOX_CMD = ["supervisord", "-n", "-c", "/etc/supervisor/supervisord.conf"]


class ImageError(RuntimeError):
    """The box image could not be built."""


@dataclass(frozen=True)
class LayerEntry:
    """One path the box layer adds: a file (data is bytes) or a directory (data is None)."""

    path: str
    mode: int
    data: bytes | None = None


def layer_entries() -> list[LayerEntry]:
    """What the box layer adds on top of the base, in order."""
    return [
        LayerEntry("usr/local/bin/vllm", 0o755, (STUB_DIR / "stub_vllm.py").read_bytes()),
        LayerEntry("usr/bin/nvidia-smi", 0o755, (STUB_DIR / "stub_nvidia_smi.py").read_bytes()),
        # Behaviour files (vllm.json, gpu.json) are put here per box before it starts.
        LayerEntry("etc/llmao-stub", 0o755),
        LayerEntry("etc/llmao-stub/vllm-serve-flags.txt", 0o644,
                   (STUB_DIR / "vllm_serve_flags.txt").read_bytes()),
    ]


def layer_tar(entries: list[LayerEntry]) -> bytes:
    """A tar stream of the entries, owned by root, with fixed times so its bytes are stable."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for entry in entries:
            info = tarfile.TarInfo(entry.path)
            info.mode = entry.mode
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if entry.data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(entry.data)
                archive.addfile(info, io.BytesIO(entry.data))
    return buffer.getvalue()


def apt_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt uses here for SUITE: the only place boxes may be built from."""
    for sources in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in _deb822_stanzas(sources.read_text()):
            if _stanza_serves_suite(stanza):
                return stanza["uris"].split()[0]
    one_line_files = [
        apt_dir / "sources.list",
        *sorted((apt_dir / "sources.list.d").glob("*.list")),
    ]
    for path in one_line_files:
        if path.exists():
            for line in path.read_text().splitlines():
                uri = _one_line_uri(line)
                if uri:
                    return uri
    raise ImageError(f"no apt source for Debian {SUITE} found under {apt_dir}")


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines() + [""]:
        if not line.strip():
            if current:
                stanzas.append(current)
            current = {}
        elif not line.startswith("#") and ":" in line and not line[0].isspace():
            key, value = line.split(":", 1)
            current[key.strip().lower()] = value.strip()
    return stanzas


def _stanza_serves_suite(stanza: dict[str, str]) -> bool:
    return (
        "deb" in stanza.get("types", "").split()
        and SUITE in stanza.get("suites", "").split()
        and stanza.get("enabled", "yes").lower() != "no"
        and bool(stanza.get("uris"))
    )


def _one_line_uri(line: str) -> str | None:
    """The URI of a `deb [options] URI SUITE COMPONENTS` line for SUITE, else None."""
    line = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0])
    fields = line.split()
    if len(fields) >= 3 and fields[0] == "deb" and fields[2] == SUITE:
        return fields[1]
    return None


def image_exists(tag: str) -> bool:
    return docker("image", "inspect", tag, check=False).returncode == 0


def ensure_box_image() -> str:
    """Return the tag of the box image, building only the layers that are missing."""
    with rig_lock("box-image"):
        if not image_exists(BASE_TAG):
            build_base_image()
        tag = box_tag()
        if not image_exists(tag):
            build_box_layer(tag)
            _untag_older_layers(tag)
        docker("tag", tag, f"{BOX_REPO}:latest")
        return tag


def box_tag() -> str:
    """`llmao-box:<hash>`, the hash covering the base image id, the layer and PID 1's command."""
    base_id = docker("image", "inspect", "--format", "{{.Id}}", BASE_TAG).stdout.strip()
    digest = hashlib.sha256(base_id)
    digest.update(json.dumps(BOX_CMD).encode())
    digest.update(layer_tar(layer_entries()))
    return f"{BOX_REPO}:{digest.hexdigest()[:12]}"


def build_base_image() -> None:
    """debootstrap a minimal Debian and import it as BASE_TAG (the slow step, done once)."""
    mirror = apt_mirror()
    root = cache_dir() / "base-rootfs"
    log = cache_dir() / "debootstrap.log"
    _remove_rootfs(root)
    print(
        f"rig: building {BASE_TAG} with debootstrap from {mirror} (a minute or two, log {log})",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    try:
        with open(log, "wb") as out:
            result = subprocess.run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(BASE_PACKAGES)}",
                    SUITE,
                    str(root),
                    mirror,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if result.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise ImageError(f"debootstrap failed ({result.returncode}); its log ends:\n{tail}")
        _trim_rootfs(root)
        _import_rootfs(root)
    finally:
        _remove_rootfs(root)
    print(f"rig: {BASE_TAG} built in {time.monotonic() - started:.0f} s", file=sys.stderr)


def _trim_rootfs(root: Path) -> None:
    """Drop apt's downloaded packages and lists (about 90 MB): boxes have no route to a mirror."""
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*"):
        for path in root.glob(pattern):
            if path.is_file():
                path.unlink()


def _import_rootfs(root: Path) -> None:
    with subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE
    ) as tar:
        imported = subprocess.run(
            ["docker", "import", "-", BASE_TAG], stdin=tar.stdout, capture_output=True, check=False
        )
    if tar.returncode != 0 or imported.returncode != 0:
        raise ImageError(f"docker import failed: {imported.stderr.decode(errors='replace')}")


def _remove_rootfs(root: Path) -> None:
    """Delete a debootstrap tree, first unmounting what an interrupted run may have left.

    A killed debootstrap can leave /proc, /sys or bind-mounted /dev nodes mounted inside the
    tree; deleting through them would reach the host's own files, so refuse if any stays.
    """
    if not root.exists():
        return
    for mount_point in sorted(_mounts_under(root), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount_point], check=False)
    left = _mounts_under(root)
    if left:
        raise ImageError(f"refusing to delete {root}: still mounted: {', '.join(left)}")
    shutil.rmtree(root)


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve())
    mounts = []
    for line in Path("/proc/mounts").read_text().splitlines():
        # /proc/mounts escapes spaces and other bytes as octal (\040).
        point = line.split()[1].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            mounts.append(point)
    return mounts


def build_box_layer(tag: str) -> None:
    """Add the box layer on the base with create / cp / commit (no builder, no registry)."""
    container = docker("create", BASE_TAG, "true").stdout.decode().strip()
    try:
        docker("cp", "-", f"{container}:/", input=layer_tar(layer_entries()))
        docker(
            "commit",
            "--change",
            f"CMD {json.dumps(BOX_CMD)}",
            "--change",
            f"LABEL llmao.rig.image={tag}",
            container,
            tag,
        )
    finally:
        docker("rm", "-f", container, check=False)


def _untag_older_layers(current: str) -> None:
    """Drop tags of box layers built from older stubs; a layer a container still uses stays."""
    listed = docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", BOX_REPO).stdout
    for tag in listed.decode().split():
        if tag not in (current, f"{BOX_REPO}:latest"):
            docker("image", "rm", tag, check=False)


if __name__ == "__main__":
    print(ensure_box_image())
