"""Box TLS on the push path (docs/box-tls.md, "The push path"): ``playbooks/provision.yml``
pushes an assignment with ``box_tls`` to a container box (real supervisord, the real box
program and the image's own ``openssl``) that has no fleet key and no box token:

1. ``--check --diff`` says a certificate is due and changes nothing: no key is made;
2. the push makes the key on the box (0600), the controller has llmao sign the box's request
   with the admin token, the box keeps the certificate and the stub vLLM serves HTTPS with it,
   verified against the fleet CA for the box's name;
3. a second push finds the certificate good: nothing is signed, nothing changes;
4. once the certificate is due (less than a third of its life left), a push renews it and the
   stub vLLM serves the new one without a restart.

No key and no secret appears in the play's output.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from llmao_server.fleet_ca_cli import init
from rig.boxes import Box, free_port, host_gateway_address
from rig.local_fleet import MODEL, LocalFleet
from rig.tls import make_server_tls
from tests.llmao_process import start_llmao_server
from tests.reconcile_run import ANSIBLE_PLAYBOOK, REPO, PlaybookRun

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PROVISION = REPO / "playbooks" / "provision.yml"
SERVER = f"{MODEL}-8001"
TLS_DIR = "/data/llmao/tls"
SERVE_TIMEOUT_S = 60.0
PLAY_TIMEOUT_S = 300.0


def provision(local: LocalFleet, box: Box, folder: Path, server_ca: Path,
              *flags: str) -> PlaybookRun:
    """provision.yml without turns (no reconcile runs here), the box reached in its container."""
    reach = folder / "containers.yml"
    reach.write_text(json.dumps({"all": {"hosts": {box.name: {
        "ansible_connection": "community.docker.docker", "ansible_host": box.container}}}}))
    env = {**os.environ, "SSL_CERT_FILE": str(server_ca), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_PIPELINING": "true",
           "ANSIBLE_LOCAL_TEMP": str(folder / "ansible-tmp")}
    done = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), str(PROVISION), "-i", str(local.inventory_path), "-i",
         str(reach), "-e", "llmao_rolling=false", *flags], cwd=REPO, env=env,
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=PLAY_TIMEOUT_S,
        check=False)
    return PlaybookRun(done.returncode, done.stdout + done.stderr)


def served_certificate(port: int, name: str, fleet_ca: str) -> str | None:
    """The certificate served at 127.0.0.1:``port``, verified against the fleet CA for the
    box's ``name``; None while nothing serves HTTPS there."""
    context = ssl.create_default_context(cafile=fleet_ca)
    try:
        with ssl.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname=name) as wrapped:
            return ssl.DER_cert_to_PEM_cert(wrapped.getpeercert(binary_form=True))
    except (OSError, ssl.SSLError):
        return None


def wait_served(port: int, name: str, fleet_ca: str, expected: str) -> None:
    deadline = time.monotonic() + SERVE_TIMEOUT_S
    while served_certificate(port, name, fleet_ca) != expected:
        assert time.monotonic() < deadline, (f"127.0.0.1:{port} does not serve the box's "
                                             f"certificate after {SERVE_TIMEOUT_S:.0f} s")
        time.sleep(0.5)


def assert_clean(run: PlaybookRun, local: LocalFleet, key: bytes | None) -> None:
    assert "PRIVATE KEY" not in run.output
    if key is not None:
        assert key.decode() not in run.output
    leaked = [index for index, secret in enumerate(local.secrets()) if secret in run.output]
    assert leaked == [], f"provision.yml printed secrets (their indexes: {leaked})"


def test_a_pushed_box_gets_its_certificate_through_the_controller(tmp_path, box_factory):
    gateway = host_gateway_address()
    server_tls = make_server_tls(tmp_path / "server-tls", [gateway])
    ca_cert, ca_key = init(str(tmp_path / "fleet-ca"), "push fleet CA")
    # A DNS name: the certificate names it, with no provider listing needed.
    name = f"push-{secrets.token_hex(3)}.box.test"
    local = LocalFleet(tmp_path / "fleet", {name: [[MODEL, 8001, SERVER]]})
    port = free_port(gateway)
    local.write(server={"url": f"https://{gateway}:{port}",
                        "state": str(tmp_path / "state.sqlite3")},
                box_tls={"ca_cert": ca_cert, "ca_key": ca_key, "leaf_days": 3})
    with start_llmao_server(local.config_path, local.models_path, tmp_path, host=gateway,
                            port=port, tls=(server_tls.ca_file, server_tls.certfile,
                                            server_tls.keyfile)) as server:
        box = box_factory(name)
        public_port = box.public_port(8001)

        def push(*flags: str) -> PlaybookRun:
            run = provision(local, box, tmp_path, server_tls.ca_file, *flags)
            assert run.returncode == 0, f"{run.output[-6000:]}\n{server.log()[-3000:]}"
            return run

        def tls_file(file: str) -> bytes:
            return box.read_file(f"{TLS_DIR}/{file}")

        # 1. A dry run says a certificate is due and makes nothing.
        dry = push("--check", "--diff")
        assert "no certificate yet" in dry.output, dry.output
        assert box.exec(["test", "-e", TLS_DIR], check=False).returncode != 0
        assert_clean(dry, local, None)

        # 2. The push: key on the box, certificate signed through the controller, HTTPS.
        pushed = push("--diff")
        key = tls_file("key.pem")
        assert box.exec(["stat", "-c", "%a", f"{TLS_DIR}/key.pem"]).stdout.strip() == b"600"
        assert tls_file("ca.pem").decode() == Path(ca_cert).read_text()
        first = tls_file("cert.pem").decode()
        wait_served(public_port, name, ca_cert, first)
        program = box.read_file(f"/etc/supervisor/conf.d/llmao-{SERVER}.conf").decode()
        assert f"--ssl-certfile {TLS_DIR}/cert.pem --enable-ssl-refresh" in program
        assert_clean(pushed, local, key)
        assert "who='admin-api'" in server.log() and "outcome=issued" in server.log()
        pid = box.supervisorctl("pid", SERVER).stdout.strip()

        # 3. Pushed again: the certificate is good, nothing is signed.
        again = push()
        assert_clean(again, local, key)
        assert tls_file("cert.pem").decode() == first
        assert server.log().count("outcome=issued") == 1

        # 4. Due (its record says less than a third of its life is left): renewed in place.
        meta = json.loads(tls_file("cert.json"))
        meta["issued_at"], meta["not_after"] = time.time() - 2 * 86400, time.time() + 3600
        box.put_file(f"{TLS_DIR}/cert.json", json.dumps(meta))
        renewed = push()
        second = tls_file("cert.pem").decode()
        assert second != first and tls_file("key.pem") == key
        wait_served(public_port, name, ca_cert, second)
        assert box.supervisorctl("pid", SERVER).stdout.strip() == pid, "vLLM restarted"
        assert_clean(renewed, local, key)
