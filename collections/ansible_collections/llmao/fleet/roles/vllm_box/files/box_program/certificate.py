"""Box TLS (docs/box-tls.md): the box's key, its certificate from llmao, and renewal.

The key is made on the box and never leaves it. A certificate is kept only when it
fits the key and chains to the CA the assignment pins; a renewal rewrites the file in
place so vLLM's --enable-ssl-refresh reloads it without a restart.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import CERT_PATH

from .answers import clean_text, refusal
from .assignment import BoxTls
from .box_files import CA_FILE, CERT_FILE, CERT_META, KEY_FILE, atomic_write
from .errors import Refused
from .json_input import decode_json
from .llmao_api import call_llmao
from .settings import Settings

RENEW_LEFT = Fraction(1, 3)

MAX_PEM = 16 * 1024
OPENSSL_TIMEOUT_S = 60.0


def certificate_due(settings: Settings, tls: BoxTls, now: float) -> str | None:
    """Why the box needs a new certificate now, or None while the one it has is good."""
    folder = settings.tls_dir
    if not all((folder / name).is_file() for name in (KEY_FILE, CERT_FILE)):
        return "no certificate yet"
    try:
        meta = json.loads((folder / CERT_META).read_text(encoding="utf-8"))
        issued_at, not_after = float(meta["issued_at"]), float(meta["not_after"])
        ca_sha256 = meta["ca_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return "what the box knew of its certificate is lost"
    if ca_sha256 != tls.ca_sha256:
        return "the fleet CA changed"
    if now >= not_after - (not_after - issued_at) * float(RENEW_LEFT):
        return "less than a third of its life is left"
    return None


def run_openssl(args: list[str], what: str) -> subprocess.CompletedProcess[bytes]:
    """Run the openssl command, within OPENSSL_TIMEOUT_S. Missing or stuck: refused."""
    binary = shutil.which("openssl")
    if binary is None:
        raise Refused("box TLS needs the openssl command and this box has none: install it "
                      "(Debian and Ubuntu: apt-get install openssl)")
    try:
        return subprocess.run([binary, *args], capture_output=True, check=False,
                              timeout=OPENSSL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Refused(f"openssl {what}: {exc}") from None


def openssl(args: list[str], what: str) -> bytes:
    """Run the openssl command; its standard output. Missing or failing: refused."""
    done = run_openssl(args, what)
    if done.returncode != 0:
        raise Refused(f"openssl {what} failed: "
                      f"{clean_text(done.stderr.decode('utf-8', 'replace'))}")
    return done.stdout


def box_key(settings: Settings) -> Path:
    """The box's private key, made here once (EC P-256, 0600); it never leaves the box."""
    key = settings.tls_dir / KEY_FILE
    if not key.is_file():
        settings.tls_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        pem = openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
                      "genpkey")
        atomic_write(key, pem.decode("ascii"), 0o600)
    return key


def rfc3339_seconds(text: Any) -> float | None:
    """``2026-12-09T02:00:00Z`` as seconds since the epoch, None when it is not that."""
    try:
        return float(calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def certificate_request(settings: Settings) -> str:
    """A certificate request (PEM) for the box's key, made here; the key stays on the box."""
    key = box_key(settings)
    return openssl(["req", "-new", "-key", str(key), "-subj", "/O=llmao box"],
                   "req").decode("ascii")


def request_certificate(settings: Settings, tls: BoxTls, say: Callable[[str], None]) -> str:
    """Ask llmao to sign a request for the box's key; keep what it answers. Returns the
    certificate's not_after.

    A 409 is llmao's "not yet": a box named by its provider's id has no address llmao knows
    of until a reconcile pass reads the listing, worth waiting for as for a server that is
    not up yet. It is retried in the same one loop, and bound, as a network error.
    """
    if settings.url is None or settings.fleet_key is None:
        raise Refused("box TLS needs a certificate from llmao: set LLMAO_URL and FLEET_KEY")
    body = json.dumps({"csr": certificate_request(settings)}).encode("utf-8")
    status, answer = call_llmao(settings, "POST", CERT_PATH, say, body, again=(409,))[:2]
    if status != 200:
        raise refusal(status, answer, settings.host)
    source = f"llmao's answer from {settings.url}{CERT_PATH}"
    return keep_certificate(settings, tls, decode_json(answer, source), source)


def keep_certificate(settings: Settings, tls: BoxTls, doc: Any, source: str) -> str:
    """Keep llmao's answer to a certificate request (``certificate``, ``ca``, ``not_after``)
    for the box's key; its not_after. The CA is checked against the assignment's pin, the
    certificate against the key and against that CA (it must chain to it) before anything
    is installed: vLLM reloads whatever lands there, and a leaf that does not chain would
    make every dialer refuse the box. The box's own request and the push path's
    (``--certificate``) both land here."""
    key = settings.tls_dir / KEY_FILE
    if not key.is_file():
        raise Refused(f"{source}: this box has no key for it (make the request here first: "
                      "--cert-request); nothing kept")
    certificate, ca, not_after = read_certificate_answer(doc, source, tls)
    staged = {name: settings.tls_dir / f".{name}.new" for name in (CERT_FILE, CA_FILE)}
    try:
        atomic_write(staged[CERT_FILE], certificate, 0o644)
        atomic_write(staged[CA_FILE], ca, 0o644)
        check_leaf(staged[CERT_FILE], staged[CA_FILE], key)
    except BaseException:
        for path in staged.values():
            path.unlink(missing_ok=True)
        raise
    os.replace(staged[CA_FILE], settings.tls_dir / CA_FILE)
    replace_in_place(staged[CERT_FILE], settings.tls_dir / CERT_FILE)
    atomic_write(settings.tls_dir / CERT_META,
                 json.dumps({"issued_at": time.time(), "not_after": rfc3339_seconds(not_after),
                             "ca_sha256": tls.ca_sha256}) + "\n", 0o644)
    return not_after


def read_certificate_answer(doc: Any, source: str, tls: BoxTls) -> tuple[str, str, str]:
    """The answer's certificate, its CA and not_after, the CA being the one the assignment
    pins: rewritten from the very bytes its digest names, so that certificate alone is
    trusted when the leaf is verified, whatever else the answer's PEM text carried."""
    fields = [doc.get(name) if isinstance(doc, dict) else None
              for name in ("certificate", "ca", "not_after")]
    if not all(isinstance(f, str) and len(f) <= MAX_PEM for f in fields) \
            or rfc3339_seconds(fields[2]) is None:
        raise Refused(f"{source} is not a certificate: certificate, ca (PEM) "
                      "and not_after (RFC 3339) are needed")
    try:
        der = ssl.PEM_cert_to_DER_cert(fields[1].strip())
    except ValueError:
        der = b""
    if hashlib.sha256(der).hexdigest() != tls.ca_sha256:
        raise Refused("llmao answered with a CA other than the one its assignment names; "
                      "nothing kept")
    return fields[0], ssl.DER_cert_to_PEM_cert(der), fields[2]


def check_leaf(certificate: Path, ca: Path, key: Path) -> None:
    """Refuse a certificate that is not for this box's key, or that the pinned CA did not
    sign (a server whose CA key was replaced signs leaves nothing verifies).

    ``openssl verify -trusted`` takes that one file as the only trust anchor (no system
    store), ``-purpose sslserver`` wants a server's leaf, and ``-no_check_time`` leaves the
    dates out: a box whose clock is off is not a reason to refuse, and not_after is kept
    apart for the renewal.
    """
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(certificate, key)
    except ssl.SSLError as exc:
        raise Refused(f"llmao's certificate does not fit this box's key ({exc.reason or exc}); "
                      "nothing kept") from None
    done = run_openssl(["verify", "-trusted", str(ca), "-purpose", "sslserver",
                        "-no_check_time", str(certificate)], "verify")
    if done.returncode != 0:
        said = (done.stdout + done.stderr).decode("utf-8", "replace")
        reason = re.search(r"error \d+ at \d+ depth lookup: ([^\n]+)", said)
        raise Refused("llmao's certificate does not chain to the fleet CA its assignment pins "
                      f"(openssl verify: {clean_text(reason.group(1) if reason else said)}); "
                      "nothing kept: was llmao's CA key replaced?")


def replace_in_place(staged: Path, path: Path) -> None:
    """Put the checked certificate at ``path``. A first one is renamed into place; a renewal
    rewrites the file itself: vLLM's --enable-ssl-refresh watches that file (watchfiles,
    which follows the file and not its folder) and reloads it on every write, and a file
    renamed over it would end the watch after the first renewal."""
    if not path.is_file():
        os.replace(staged, path)
        return
    text = staged.read_text(encoding="ascii")
    with open(path, "r+", encoding="ascii") as out:
        out.write(text)
        out.truncate()
        out.flush()
        os.fsync(out.fileno())
    staged.unlink()


def require_certificate_source(settings: Settings, tls: BoxTls | None,
                               given: Any = None) -> None:
    """Refuse, before anything is written, an assignment that needs a certificate the box
    cannot ask for: a pushed one (--payload) runs without LLMAO_URL and FLEET_KEY, so the
    push path brings it (``given``, --certificate)."""
    if given is not None and tls is None:
        raise Refused("--certificate was given but the assignment does not turn box TLS on")
    if tls is None or given is not None or (settings.url is not None
                                            and settings.fleet_key is not None):
        return
    why = certificate_due(settings, tls, time.time())
    if why is not None:
        raise Refused(f"the assignment turns on box TLS and the box needs a certificate ({why}), "
                      "which it asks llmao for with LLMAO_URL and FLEET_KEY; on the push path "
                      "the role brings it: make the request with --cert-request and give "
                      "llmao's answer with --certificate (docs/box-tls.md)")


def ensure_certificate(settings: Settings, tls: BoxTls | None,
                       say: Callable[[str], None], given: Any = None) -> None:
    """A good certificate on the box before vLLM starts or while it runs: asked for when
    missing, from another CA, or with less than a third of its life left. ``given`` is the
    push path's: llmao's answer the controller had signed for this box's request, kept as
    it is (the role asked for it because it was due)."""
    if tls is None:
        return
    if given is not None:
        say(f"certificate: kept, valid until "
            f"{keep_certificate(settings, tls, given, 'the --certificate answer')}")
        return
    why = certificate_due(settings, tls, time.time())
    if why is None:
        return
    say(f"certificate: {why}: asking llmao for one")
    not_after = request_certificate(settings, tls, say)
    say(f"certificate: kept, valid until {not_after}")


def cert_request_answer(settings: Settings, tls: BoxTls | None, dry_run: bool,
                        now: float) -> dict[str, Any]:
    """``--cert-request``: why the box needs a certificate (None: it does not) and, when it
    does, a request for its key (made here, 0600, never printed); a dry run makes nothing."""
    why = None if tls is None else certificate_due(settings, tls, now)
    csr = certificate_request(settings) if why is not None and not dry_run else None
    return {"tls": tls is not None, "due": why, "csr": csr}
