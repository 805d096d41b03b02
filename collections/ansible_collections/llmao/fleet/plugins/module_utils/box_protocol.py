# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The box API's wire facts: the names llmao and a box must agree on, each said once.

llmao-server answers these paths and reads these headers; the box program
(``roles/vllm_box/files/install_set.py``) calls and sends them. The box program
runs on a box with the standard library alone, so this module imports nothing
else: its build (``scripts/build_box_program.py``) copies this very file into the
one file a box fetches, and the server and the modules import it. A change here
changes both sides at once (docs/box-protocol.md, docs/box-identity.md).
"""

from __future__ import annotations

import re

# The box API: the assignment, the applied report, a following box's turn, its certificate.
BOX_API_PREFIX = "/vllm/"
CONFIG_PATH = "/vllm/config"
APPLIED_PATH = "/vllm/applied"
TURN_PATH = "/vllm/turn"
CERT_PATH = "/vllm/cert"
BOX_API_PATHS = (CONFIG_PATH, APPLIED_PATH, TURN_PATH, CERT_PATH)

# The box's name as it claims it (else llmao goes by the address it sees).
HOST_HEADER = "X-LLMAO-Host"
# The box token llmao hands out in an answer and the box presents on every later call.
TOKEN_HEADER = "X-LLMAO-Box-Token"
# The provider's instance id the box reports, kept with its binding.
INSTANCE_HEADER = "X-LLMAO-Box-Instance"
# The one-time token of an admin's enrollment, presented once on the fetch that binds.
BOOTSTRAP_HEADER = "X-LLMAO-Bootstrap-Token"


def environ_key(header: str) -> str:
    """Where a WSGI server keeps a request header (PEP 3333: ``HTTP_``, then the name
    upper-cased with ``-`` as ``_``)."""
    return "HTTP_" + header.upper().replace("-", "_")


HOST_ENVIRON = environ_key(HOST_HEADER)
TOKEN_ENVIRON = environ_key(TOKEN_HEADER)
INSTANCE_ENVIRON = environ_key(INSTANCE_HEADER)
BOOTSTRAP_ENVIRON = environ_key(BOOTSTRAP_HEADER)

# A box or bootstrap token as llmao mints it: ``secrets.token_urlsafe(TOKEN_BYTES)``, 43
# URL-safe characters. A box presents nothing of another shape (a damaged token file), and
# refuses such a bootstrap token before spending a call on it.
TOKEN_BYTES = 32
BOX_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{32,128}\Z")


def is_box_token(value: object) -> bool:
    """Whether ``value`` has the shape of a box or bootstrap token llmao mints."""
    return isinstance(value, str) and BOX_TOKEN_RE.match(value) is not None


# The most days a box's certificate (leaf) may live: box_tls.leaf_days is checked against it
# when the config loads, and a box refuses a payload asking for more.
MAX_LEAF_DAYS = 90

# Where a box finds its provider's instance id (Vast, RunPod), the first that is set, and the
# longest id llmao keeps.
INSTANCE_ENV = ("CONTAINER_ID", "RUNPOD_POD_ID")
MAX_INSTANCE = 128
# The box's environment variable that carries an enrollment's bootstrap token.
BOOTSTRAP_ENV = "LLMAO_BOOTSTRAP_TOKEN"
