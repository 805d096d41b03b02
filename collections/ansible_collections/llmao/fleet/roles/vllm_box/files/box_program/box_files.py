"""Where the box program writes on the box, and how: atomically, with the final mode.

The names of the files it owns (Supervisor programs marked on their first line, the
box TLS folder) are kept together, so that what a run may touch is read in one place.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ansible_collections.llmao.fleet.plugins.module_utils.payload_rules import FOLLOW_PROGRAM

MARKER = "; managed by llmao install_set.py: changes are overwritten"
PROGRAM_GLOB = "llmao-*.conf"

FOLLOW_FILE = f"{FOLLOW_PROGRAM}.conf"

# Box TLS (docs/box-tls.md): the key, certificate and CA under $DATA_DIRECTORY/llmao/tls, and
# what the box knows of its certificate (cert.json). A certificate is renewed once less than a
# third of its life is left; vLLM reloads it in place (--enable-ssl-refresh).
TLS_DIR = "tls"
KEY_FILE, CERT_FILE, CA_FILE, CERT_META = "key.pem", "cert.pem", "ca.pem", "cert.json"


def program_path(conf_dir: Path, name: str) -> Path:
    return conf_dir / f"llmao-{name}.conf"


def atomic_write(path: Path, text: str, mode: int) -> None:
    """Write through a temp file in the same folder, created with the final mode, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
