"""Box TLS through the real ``llmao-server`` and the real box program (docs/box-tls.md): the
box makes its key with openssl, gets a certificate for its address and runs vLLM with it; a
renewal comes when a third of the life is left; the certificate verifies against the fleet
CA at the box's address and nowhere else; without openssl the box says so."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.box_tls import box_context
from tests.llmao_process import LlmaoServer, start_llmao_server
from tests.reliability.box_runs import Ending, run_box
from tests.server.fleet_pair import CONFIG, FLEET_KEY, SECRETS, write_pair
from tests.tls_files import make_test_ca
from tests.unit.box_program.helpers import Box

pytestmark = pytest.mark.slow

BOX = "127.0.0.1"  # an IP name: the certificate names it, and a local stub can serve it
NAMED = "gpu-b"  # a provider id: no address until a listing gives one


class TlsFleet:
    def __init__(self, folder: Path):
        self.ca = make_test_ca(folder / "ca")
        document = json.loads(json.dumps(CONFIG))
        document["fleet"]["hosts"] = {BOX: [["gemma", 8001]], NAMED: [["gemma", 8001]]}
        document["fleet"].pop("legacy_servers", None)
        document["box_tls"] = {"ca_cert": str(self.ca.cert), "ca_key": str(self.ca.key),
                               "leaf_days": 3}
        config, models = write_pair(folder / "fleet", document)
        self.server: LlmaoServer = start_llmao_server(Path(config), Path(models), folder,
                                                      workers=1)
        self.outputs: list[str] = []

    def run(self, box: Box, *args: str, host: str = BOX) -> Ending:
        ending = run_box(box, "--no-handover", *args, env={
            "LLMAO_URL": self.server.url, "FLEET_KEY": FLEET_KEY, "LLMAO_HOST": host})
        self.outputs.append(ending.out + ending.err)
        return ending


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[TlsFleet]:
    served = TlsFleet(tmp_path)
    try:
        yield served
    finally:
        served.server.stop()


def with_openssl(box: Box) -> Box:
    (box.bin / "openssl").symlink_to(shutil.which("openssl"))
    return box


def a_box(folder: Path, name: str = "box") -> Box:
    (folder / name).mkdir()
    return Box(folder / name)


def test_the_box_gets_a_certificate_for_its_address_and_vllm_serves_https(fleet, tmp_path,
                                                                          local_stub_factory):
    box = with_openssl(a_box(tmp_path))
    ending = fleet.run(box)
    assert ending.rc == 0, ending.err
    tls = box.data / "llmao" / "tls"
    assert stat.S_IMODE((tls / "key.pem").stat().st_mode) == 0o600
    assert (tls / "ca.pem").read_text() == fleet.ca.cert.read_text()
    program = (box.conf / "llmao-gemma.conf").read_text()
    assert (f"--ssl-keyfile {tls / 'key.pem'} --ssl-certfile {tls / 'cert.pem'} "
            "--enable-ssl-refresh") in program
    assert "certificate: no certificate yet: asking llmao for one" in ending.out
    # the box's certificate, served by a vLLM, verifies at the box's address and only there
    stub = local_stub_factory(served_name="gemma", model="google/gemma", api_key="k" * 32,
                              args=["--ssl-keyfile", str(tls / "key.pem"),
                                    "--ssl-certfile", str(tls / "cert.pem")])
    context = box_context(str(fleet.ca.cert))
    with context.wrap_socket(socket.create_connection((BOX, stub.port)),
                             server_hostname=BOX):
        pass
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"), \
            context.wrap_socket(socket.create_connection((BOX, stub.port)),
                                server_hostname="localhost"):
        pass
    # a second boot keeps the certificate; near expiry it is renewed, the key kept
    key, cert = (tls / "key.pem").read_bytes(), (tls / "cert.pem").read_bytes()
    assert "asking llmao" not in fleet.run(box).out
    assert (tls / "cert.pem").read_bytes() == cert
    meta = json.loads((tls / "cert.json").read_text())
    meta["issued_at"] -= 2.1 * 86400  # as if two days and more had passed
    meta["not_after"] -= 2.1 * 86400
    (tls / "cert.json").write_text(json.dumps(meta))
    renewed = fleet.run(box)
    assert "less than a third of its life is left: asking llmao for one" in renewed.out
    assert (tls / "cert.pem").read_bytes() != cert
    assert (tls / "key.pem").read_bytes() == key
    said = "\n".join([*fleet.outputs, fleet.server.log()])
    assert not [secret for secret in SECRETS if secret in said]
    assert "PRIVATE KEY" not in said


def test_without_openssl_the_box_names_it_and_writes_no_program(fleet, tmp_path):
    box = a_box(tmp_path)
    ending = fleet.run(box)
    assert ending.rc == 2
    assert "box TLS needs the openssl command" in ending.err
    assert not (box.conf / "llmao-gemma.conf").exists()


def test_a_box_no_listing_has_placed_yet_waits_and_then_says_so(fleet, tmp_path):
    box = with_openssl(a_box(tmp_path))
    ending = fleet.run(box, host=NAMED)
    assert ending.rc == 3, ending.err
    assert ending.out.count("asking again in") == 2  # LLMAO_FETCH_ATTEMPTS=3
    assert "llmao knows no address of gpu-b yet" in ending.err
    assert not (box.conf / "llmao-gemma.conf").exists()
