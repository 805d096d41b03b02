"""Renewal in place on the real vLLM (docs/box-tls.md, "Renewal in place"): ``vllm serve`` with
``--ssl-keyfile``, ``--ssl-certfile`` and ``--enable-ssl-refresh`` serves each certificate the
box program places over ``cert.pem`` (its ``replace_in_place``), the second one too; and the
probe's pipelined requests on its one TLS connection are answered in turn.

vLLM watches the two files with ``watchfiles``, which follows the files and not their folder: a
certificate renamed over ``cert.pem`` is loaded once and ends the watch (the renamed file is a
new inode nobody watches), so every later renewal would go unseen until a restart. The box
program rewrites the file in place; this test holds it to that on the real server, with one
start of the tiny model.
"""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ansible_collections.llmao.fleet.plugins.module_utils.box_tls import box_context
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Models
from ansible_collections.llmao.fleet.plugins.module_utils.listings import Endpoint
from ansible_collections.llmao.fleet.plugins.module_utils.probe import Target, probe_one
from llmao_server.fleet_ca_cli import init
from llmao_server.tls.fleet_ca import sign_leaf
from rig import real_vllm as real
from rig.boxes import free_port
from rig.fleet_files import strong_secret
from tests.unit.box_program.helpers import load_install_set

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

READY_TIMEOUT_S = 420.0
RELOAD_TIMEOUT_S = 20.0


class Leaves:
    """The box's key (made once, as a box keeps it) and certificates for it from a fleet CA."""

    def __init__(self, folder: Path):
        cert, key = init(str(folder / "ca"), "refresh test CA")
        self.ca_file = cert
        self.ca_cert, self.ca_key = Path(cert).read_bytes(), Path(key).read_bytes()
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.key_pem = self.key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption())

    def certificate(self) -> str:
        request = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
                   .sign(self.key, hashes.SHA256()))
        return sign_leaf(request, ["127.0.0.1"], self.ca_cert, self.ca_key, 2).pem


def served(port: int, ca_file: str) -> str | None:
    """The certificate served at 127.0.0.1:``port``, verified; None while none is."""
    context = ssl.create_default_context(cafile=ca_file)
    try:
        with ssl.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped:
            return ssl.DER_cert_to_PEM_cert(wrapped.getpeercert(binary_form=True))
    except (OSError, ssl.SSLError):
        return None


def same(pem: str | None, other: str) -> bool:
    return pem is not None and ssl.PEM_cert_to_DER_cert(pem) == ssl.PEM_cert_to_DER_cert(other)


def wait_for(server: real.RealVllm, port: int, ca_file: str, expected: str,
             timeout: float, what: str) -> float:
    """Seconds until the server serves ``expected`` (``what``); fails with its log otherwise."""
    began = time.monotonic()
    while not same(served(port, ca_file), expected):
        assert server.process.poll() is None, f"vllm serve exited:\n{server.log()[-4000:]}"
        assert time.monotonic() - began < timeout, (
            f"vllm serve does not serve the {what} {timeout:.0f} s after it was placed:\n"
            f"{server.log()[-4000:]}")
        time.sleep(0.5)
    return time.monotonic() - began


def test_the_real_vllm_serves_each_certificate_the_box_program_places(real_vllm_installed,
                                                                      tmp_path):
    install_set = load_install_set()
    leaves = Leaves(tmp_path)
    tls = tmp_path / "tls"
    tls.mkdir()
    key, cert = tls / install_set.KEY_FILE, tls / install_set.CERT_FILE
    install_set.atomic_write(key, leaves.key_pem.decode(), 0o600)
    first = leaves.certificate()
    staged = tls / f".{install_set.CERT_FILE}.new"
    install_set.atomic_write(staged, first, 0o644)
    install_set.replace_in_place(staged, cert)  # a first certificate: renamed into place
    port = free_port()
    server = real.start_real_vllm(
        tmp_path / "vllm", api_key=strong_secret("vllm-key-"), port=port,
        args=[*real.KV_CACHE_ARGS, "--ssl-keyfile", str(key), "--ssl-certfile", str(cert),
              "--enable-ssl-refresh"])
    with server:
        wait_for(server, port, leaves.ca_file, first, READY_TIMEOUT_S, "first certificate")
        for renewal in ("first renewal", "second renewal"):
            renewed = leaves.certificate()
            install_set.atomic_write(staged, renewed, 0o644)
            install_set.replace_in_place(staged, cert)
            wait_for(server, port, leaves.ca_file, renewed, RELOAD_TIMEOUT_S, renewal)
        assert server.log().count("Reloading SSL certificate chain") >= 2
        # The probe's one connection: /health, then /v1/models and /metrics pipelined behind
        # it once the handshake has verified the box, answered in turn by vLLM's server.
        seen = probe_one(Target("t", Endpoint("127.0.0.1", port, "given", "https"),
                                server.served_name, server.api_key,
                                box_context(leaves.ca_file)), 5, 30)
        assert (seen.health_ok, seen.models, seen.detail) == (True, Models.LISTS, "")
        assert seen.metrics.kv_cache_tokens and seen.cert_not_after
