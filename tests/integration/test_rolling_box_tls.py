"""Issue 20's rollout acceptance (docs/box-tls.md, "Turning it on for a running fleet"): the
pull path's following fleet of three container boxes (tests/rolling_fleet.py) turns box TLS on
under a steady chat load through LiteLLM's real proxy, and renews a certificate under it.

1. ``box_tls`` is added to config.yaml and llmao reloads: every box's revision changes, the
   boxes take their turns one at a time (each gets its certificate from ``POST /vllm/cert`` and
   restarts its vLLM with HTTPS), no request fails, LiteLLM never routes fewer than two of the
   three servers, and every deployment ends on an ``https://`` api_base that verifies against
   the fleet CA;
2. one box's certificate comes due (its record says less than a third of its life is left):
   its follow program asks for a new one and the vLLM stub loads it in place, under the same
   load, with no failed request and no restart;
3. the CA is rotated: LiteLLM is given a file of both CAs (every deployment registered again
   with it), then the new CA signs with the old one as ``previous_ca_cert``: the boxes renew
   in place, none is Rejected, no request fails, and every box ends serving the new CA's.
"""

from __future__ import annotations

import json
import ssl
import time
from pathlib import Path

import pytest

from llmao_server.fleet_ca_cli import init as init_fleet_ca
from rig.route_watch import RouteWatch
from tests.rolling_fleet import (
    FOLLOWING,
    LISTEN_PORT,
    MODEL,
    SERVER,
    assert_turns_never_overlap,
    chat_load,
    fleet_fixture,
)

pytestmark = [pytest.mark.docker, pytest.mark.litellm, pytest.mark.slow]

ROLL_TIMEOUT_S = 600.0
RENEW_TIMEOUT_S = 60.0
AFTER_RENEWAL_S = 8.0  # the load goes on over the new certificate
CERT_META = "/data/llmao/tls/cert.json"


fleet = fleet_fixture(FOLLOWING)


@pytest.fixture
def fleet_ca(tmp_path):
    return init_fleet_ca(str(tmp_path / "fleet-ca"), "rolling fleet CA")


def served_certificate(port: int, ca_cert: str) -> str:
    """The certificate served at 127.0.0.1:``port``, verified against the fleet CA."""
    context = ssl.create_default_context(cafile=ca_cert)
    with ssl.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped:
        return ssl.DER_cert_to_PEM_cert(wrapped.getpeercert(binary_form=True))


def test_box_tls_turned_on_renewed_and_its_ca_rotated_under_load_drops_nothing(
        fleet, fleet_ca, tmp_path, real_litellm, litellm_master_key):
    ca_cert, ca_key = fleet_ca
    before = fleet.intended()
    ports = {name: box.public_port(LISTEN_PORT) for name, box in fleet.boxes.items()}
    assert fleet.api_bases() == {name: f"http://127.0.0.1:{port}/v1"
                                 for name, port in ports.items()}

    # 1. box_tls on: the boxes roll one at a time, no request fails, every route ends https.
    with RouteWatch(fleet.litellm, MODEL) as watch, \
            chat_load(real_litellm.url, litellm_master_key, ROLL_TIMEOUT_S) as load:
        new = fleet.turn_on_box_tls(ca_cert, ca_key)
        took = fleet.wait("every box on its TLS revision, routed over https", lambda: (
            fleet.settled() and all(base and base.startswith("https://")
                                    for base in fleet.api_bases().values())), ROLL_TIMEOUT_S)
        load.stop()
    said = f"{load.summary()}\n{watch.summary()}\n{fleet.diagnostics()}"
    assert all(new[name] != before[name] for name in new), said
    assert load.failures() == [] and len(load.outcomes()) >= 20, said
    assert watch.fewest() >= 2 and watch.errors == [], said
    turns = fleet.turns()
    assert {name: (turn["revision"], turn["phase"]) for name, turn in turns.items()} == \
        {name: (revision, "done") for name, revision in new.items()}, said
    assert_turns_never_overlap(list(turns.values()))
    assert fleet.api_bases() == {name: f"https://127.0.0.1:{port}/v1"
                                 for name, port in ports.items()}, said
    print(f"box TLS rolled through {len(new)} boxes in {took:.0f} s")

    # 2. A renewal on one box under the load: a new certificate, loaded in place.
    name, box = next(iter(fleet.boxes.items()))
    first = served_certificate(ports[name], ca_cert)
    pid = box.supervisorctl("pid", SERVER).stdout
    with RouteWatch(fleet.litellm, MODEL) as watch, \
            chat_load(real_litellm.url, litellm_master_key, RENEW_TIMEOUT_S) as load:
        meta = json.loads(box.read_file(CERT_META))
        meta.update(issued_at=time.time() - 3600, not_after=time.time() + 600)
        box.put_file(CERT_META, json.dumps(meta))
        fleet.wait("the box serving a renewed certificate",
                   lambda: served_certificate(ports[name], ca_cert) != first, RENEW_TIMEOUT_S)
        time.sleep(AFTER_RENEWAL_S)
        load.stop()
    said = f"{load.summary()}\n{watch.summary()}\n{fleet.diagnostics()}"
    assert load.failures() == [] and len(load.outcomes()) >= 10, said
    assert {o.answered_by.split(":")[0] for o in load.outcomes()} == set(fleet.boxes), said
    assert watch.fewest() == 3 and watch.errors == [], said
    assert box.supervisorctl("pid", SERVER).stdout == pid, said

    # 3. The CA rotated (docs/box-tls.md): first LiteLLM is given a file of both CAs, and
    # every deployment is registered again to verify against it; then the new CA signs, the
    # old one stays trusted, and the boxes renew in place (their programs do not change).
    new_cert, new_key = init_fleet_ca(str(tmp_path / "fleet-ca-2"), "rolling fleet CA 2")
    both = tmp_path / "fleet-cas.pem"
    both.write_text(Path(new_cert).read_text() + Path(ca_cert).read_text())
    before = fleet.intended()
    with RouteWatch(fleet.litellm, MODEL) as watch, \
            chat_load(real_litellm.url, litellm_master_key, ROLL_TIMEOUT_S) as load:
        fleet.local.write(box_tls={"ca_cert": ca_cert, "ca_key": ca_key, "leaf_days": 2,
                                   "litellm_ca_path": str(both)})
        fleet.server.reload()
        assert fleet.intended() == before  # nothing rolls
        fleet.wait("every deployment verifying against both CAs", lambda: {
            route.ca_path for route in fleet.litellm.routes()
            if route.id in fleet.route_ids().values()} == {str(both)}, ROLL_TIMEOUT_S)
        fleet.local.write(box_tls={"ca_cert": new_cert, "ca_key": new_key, "leaf_days": 2,
                                   "previous_ca_cert": ca_cert, "litellm_ca_path": str(both)})
        rotated_at = time.monotonic()
        fleet.server.reload()
        new = fleet.intended()
        took = fleet.wait("every box renewed from the new CA, routed", lambda: (
            fleet.settled() and all(verifies(port, new_cert) for port in ports.values())),
            ROLL_TIMEOUT_S)
        time.sleep(AFTER_RENEWAL_S)
        load.stop()
    said = f"{load.summary()}\n{watch.summary()}\n{fleet.diagnostics()}"
    assert all(new[name] != before[name] for name in new), said
    assert load.failures() == [] and len(load.outcomes()) >= 10, said
    assert watch.fewest() >= 2 and watch.errors == [], said
    assert not any(": Rejected" in run.output for run in fleet.loop.passes_since(rotated_at)), \
        said
    print(f"the CA rotated through {len(new)} boxes in {took:.0f} s")


def verifies(port: int, ca_cert: str) -> bool:
    """Whether the box at ``port`` serves a certificate of that CA now."""
    try:
        served_certificate(port, ca_cert)
    except OSError:  # another CA's (ssl.SSLCertVerificationError), or restarting
        return False
    return True
