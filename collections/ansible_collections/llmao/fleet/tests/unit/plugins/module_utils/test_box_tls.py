"""``box_tls:`` is checked at load like every key: the CA is a CA, unexpired, and the key is
its key; each problem names its key path. The test CAs are made with the openssl command,
as an operator without llmao-fleet-ca would."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from dataclasses import replace

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Change, Memory, State
from ansible_collections.llmao.fleet.plugins.module_utils.listings import index_listings
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import Route
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import BoxLeaves
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_plan import (
    PLAIN_UNDER_TLS,
    plain_allowed,
    plan_pass,
    probe_targets,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import (
    Observations,
    RecordError,
    probe_from_record,
    probe_record,
)
from ansible_collections.llmao.fleet.tests.unit.fleets import (
    DOWN,
    SERVING,
    base_config,
    write_pair,
)


def openssl_ca(folder, name="ca", ca=True):
    """A self-signed P-256 certificate and key in ``folder`` (a CA unless ``ca`` is false)."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    constraint = "critical,CA:TRUE" if ca else "critical,CA:FALSE"
    command = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
               "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out", str(cert),
               "-subj", f"/CN={name}", "-addext", f"basicConstraints={constraint}",
               "-days", "30"]
    subprocess.run(command, check=True, capture_output=True)
    os.chmod(key, 0o600)
    return cert, key


def load_with(tmp_path, section, signer=True):
    config = base_config()
    config["box_tls"] = section
    return load_fleet(*write_pair(tmp_path, config), signer=signer)


def refusal(tmp_path, section, signer=True) -> str:
    with pytest.raises(ConfigError) as caught:
        load_with(tmp_path, section, signer)
    return str(caught.value)


def test_no_section_no_tls_and_the_payload_is_unchanged(tmp_path):
    fleet = load_fleet(*write_pair(tmp_path))
    assert fleet.settings.box_tls is None
    assert "tls" not in json.loads(fleet.assignment("203.0.113.10").body)


def test_a_good_ca_loads_and_the_payload_names_it_so_the_revision_changes(tmp_path):
    plain = load_fleet(*write_pair(tmp_path)).assignment("203.0.113.10")
    cert, key = openssl_ca(tmp_path)
    fleet = load_with(tmp_path, {"ca_cert": cert.name, "ca_key": str(key)})
    tls = fleet.settings.box_tls
    assert tls.leaf_days == 7 and tls.ca_cert == str(cert)
    assert tls.ca_pem.startswith("-----BEGIN CERTIFICATE-----")
    served = fleet.assignment("203.0.113.10")
    payload = json.loads(served.body)
    assert payload["tls"] == {"ca_sha256": tls.ca_sha256, "leaf_days": 7}
    assert served.revision != plain.revision
    (warning,) = fleet.warnings
    assert "box_tls: boxes renew their certificates in the follow program" in warning


def test_boxes_that_follow_renew_and_nothing_is_warned(tmp_path):
    cert, key = openssl_ca(tmp_path)
    config = base_config()
    config["box_tls"] = {"ca_cert": str(cert), "ca_key": str(key)}
    config["rollout"] = {"follow_s": 30}
    assert load_fleet(*write_pair(tmp_path, config), signer=True).warnings == ()


def test_leaf_days_is_bounded(tmp_path):
    cert, key = openssl_ca(tmp_path)
    assert load_with(tmp_path, {"ca_cert": str(cert), "ca_key": str(key),
                                "leaf_days": 90}).settings.box_tls.leaf_days == 90
    assert "box_tls.leaf_days: must be an integer from 1 to 90" in refusal(
        tmp_path, {"ca_cert": str(cert), "ca_key": str(key), "leaf_days": 91})


def test_missing_files_are_named(tmp_path):
    message = refusal(tmp_path, {"ca_cert": "nope.pem", "ca_key": "nope.key"})
    assert "box_tls.ca_cert: cannot read" in message and "nope.pem" in message
    assert "box_tls.ca_key: cannot read" in message
    assert "box_tls.ca_key: is required" in refusal(tmp_path, {"ca_cert": "x.pem"})


def test_a_controller_needs_no_ca_key_but_checks_one_it_can_read(tmp_path):
    cert, key = openssl_ca(tmp_path, "one")
    key.unlink()
    assert "box_tls.ca_key: cannot read" in refusal(
        tmp_path, {"ca_cert": str(cert), "ca_key": str(key)})
    tls = load_with(tmp_path, {"ca_cert": str(cert), "ca_key": str(key)}, signer=False)
    assert tls.settings.box_tls.ca_cert == str(cert)
    other_key = openssl_ca(tmp_path, "two")[1]
    assert "is not the key of box_tls.ca_cert" in refusal(
        tmp_path, {"ca_cert": str(cert), "ca_key": str(other_key)}, signer=False)


def test_a_key_of_another_certificate_is_refused(tmp_path):
    cert = openssl_ca(tmp_path, "one")[0]
    other_key = openssl_ca(tmp_path, "two")[1]
    message = refusal(tmp_path, {"ca_cert": str(cert), "ca_key": str(other_key)})
    assert f"box_tls.ca_key: {other_key} is not the key of box_tls.ca_cert" in message


def test_a_leaf_is_not_a_ca(tmp_path):
    cert, key = openssl_ca(tmp_path, "leaf", ca=False)
    message = refusal(tmp_path, {"ca_cert": str(cert), "ca_key": str(key)})
    assert "box_tls.ca_cert:" in message
    assert "is not a CA certificate" in message


def expired_ca(folder):
    """A CA that expired in 2021 (the openssl command cannot backdate one)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC))
            .not_valid_after(datetime.datetime(2021, 1, 1, tzinfo=datetime.UTC))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    (folder / "old.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "old.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    os.chmod(folder / "old.key", 0o600)
    return folder / "old.pem", folder / "old.key"


def test_an_expired_ca_is_refused(tmp_path):
    cert, key = expired_ca(tmp_path)
    message = refusal(tmp_path, {"ca_cert": str(cert), "ca_key": str(key)})
    assert "box_tls.ca_cert:" in message and "expired on Jan  1 00:00:00 2021 GMT" in message


def test_not_pem_is_refused(tmp_path):
    (tmp_path / "junk.pem").write_text("hello")
    key = openssl_ca(tmp_path)[1]
    assert "is not a PEM certificate" in refusal(
        tmp_path, {"ca_cert": "junk.pem", "ca_key": str(key)})


def test_a_key_others_can_read_loads_with_a_warning(tmp_path):
    cert, key = openssl_ca(tmp_path)
    os.chmod(key, 0o644)
    fleet = load_with(tmp_path, {"ca_cert": str(cert), "ca_key": str(key)})
    assert any("box_tls.ca_key" in w and "chmod 600" in w for w in fleet.warnings)


def test_a_previous_ca_is_trusted_beside_the_new_one_while_the_ca_is_rotated(tmp_path):
    old_cert, old_key = openssl_ca(tmp_path, "old")
    new_cert, new_key = openssl_ca(tmp_path, "new")
    before = load_with(tmp_path, {"ca_cert": str(old_cert), "ca_key": str(old_key)})
    rotated = load_with(tmp_path, {"ca_cert": str(new_cert), "ca_key": str(new_key),
                                   "previous_ca_cert": "old.pem",
                                   "litellm_ca_path": "/etc/llmao/both.pem"})
    tls = rotated.settings.box_tls
    assert tls.previous_ca_cert == str(old_cert)
    assert tls.trusted() == [str(new_cert), str(old_cert)]
    assert tls.trusted("/here/ca.pem") == ["/here/ca.pem", str(old_cert)]
    assert before.settings.box_tls.trusted() == [str(old_cert)]
    # the payload names the new CA alone: every box renews from it in its turn
    assert json.loads(rotated.assignment("203.0.113.10").body)["tls"]["ca_sha256"] == \
        tls.ca_sha256 != before.settings.box_tls.ca_sha256
    # reconcile's probes trust both (each target's context), before the rotation one
    (target, *others) = probe_targets(rotated, index_listings([], [], {}))
    assert sorted(ca["subject"] for ca in target.tls.get_ca_certs()) == [
        ((("commonName", "new"),),), ((("commonName", "old"),),)]
    assert all(other.tls is target.tls for other in others)
    (target, *others) = probe_targets(before, index_listings([], [], {}))
    assert [ca["subject"] for ca in target.tls.get_ca_certs()] == [
        ((("commonName", "old"),),)]


def test_a_previous_ca_is_checked_and_needs_a_bundle_for_litellm(tmp_path):
    cert, key = openssl_ca(tmp_path, "new")
    leaf = openssl_ca(tmp_path, "leaf", ca=False)[0]
    section = {"ca_cert": str(cert), "ca_key": str(key), "litellm_ca_path": "/x/both.pem"}
    message = refusal(tmp_path, {**section, "previous_ca_cert": str(leaf)})
    assert "box_tls.previous_ca_cert:" in message and "is not a CA certificate" in message
    message = refusal(tmp_path, {**section, "previous_ca_cert": "gone.pem"})
    assert "box_tls.previous_ca_cert: cannot read" in message
    old = openssl_ca(tmp_path, "old")[0]
    message = refusal(tmp_path, {"ca_cert": str(cert), "ca_key": str(key),
                                 "previous_ca_cert": str(old)})
    assert "box_tls.litellm_ca_path: with previous_ca_cert, LiteLLM must trust both" in message


def test_turning_tls_on_moves_a_route_to_https_only_on_an_https_answer(tmp_path):
    """A box behind its revision still serving plain HTTP keeps its http route through a
    failed probe (the pass would dial https, where nothing answered); it moves to https
    when its https answer comes, and stays on http while it answers plain HTTP."""
    cert, key = openssl_ca(tmp_path)
    fleet = load_with(tmp_path, {"ca_cert": str(cert), "ca_key": str(key)}, signer=False)
    gemma = fleet.assignment("203.0.113.10").servers[0].id
    plain = "http://203.0.113.10:8001/v1"
    routes = (Route(gemma, "gemma", plain, plain),)
    healthy = {gemma: Memory(State.HEALTHY, 0, 0, 0.0)}

    def gemma_plan(probe):
        probes = {s.id: DOWN for s in fleet.servers()} | {gemma: probe}
        seen = Observations(100.0, {}, {}, healthy, index_listings([], [], {}), routes)
        return next(s for s in plan_pass(fleet, seen, probes).servers if s.id == gemma)

    silent = gemma_plan(DOWN)
    assert (silent.verdict.state, silent.change) == (State.HEALTHY, None)
    assert gemma_plan(replace(SERVING, plain_http=True)).change is None
    answered = gemma_plan(SERVING)
    assert (answered.change, answered.endpoint.base_url) == (
        Change.REPLACE, "https://203.0.113.10:8001/v1")


# ---------------------------------------------------------------- no downgrade (issue 33)


def tls_fleet(tmp_path):
    cert, key = openssl_ca(tmp_path)
    return load_with(tmp_path, {"ca_cert": str(cert), "ca_key": str(key)}, signer=False)


@pytest.mark.parametrize(("leaves", "memory", "allowed"), [
    (BoxLeaves(), Memory(), True),
    (BoxLeaves(issued=True), Memory(), False),
    (BoxLeaves(revoked=frozenset({7})), Memory(), False),
    (BoxLeaves(), Memory(tls_seen=True), False),
    (None, Memory(), False),
])
def test_plain_http_only_from_a_box_never_issued_nor_verified(leaves, memory, allowed):
    assert plain_allowed(leaves, memory) is allowed


def test_a_box_behind_its_revision_with_a_leaf_is_not_taken_at_its_plain_word(tmp_path):
    """The old rule let every box behind its revision fall back; the revision is the box's
    claim, what llmao issued and verified is not."""
    fleet = tls_fleet(tmp_path)
    box = "203.0.113.10"
    gemma = fleet.assignment(box).servers[0].id
    listings = index_listings([], [], {})
    issued = {box: BoxLeaves(issued=True)}
    ours = {s.id for s in fleet.assignment(box).servers}
    allowed = {t.key: t.plain_allowed for t in probe_targets(fleet, listings, issued)}
    assert not any(allowed[key] for key in ours) and any(allowed.values())
    seen = {gemma: Memory(tls_seen=True)}
    allowed = {t.key: t.plain_allowed for t in probe_targets(fleet, listings, {}, seen)}
    assert allowed[gemma] is False and any(allowed.values())
    assert not any(t.plain_allowed for t in probe_targets(fleet, listings))


def gemma_pass(fleet, probe, routes=(), memory=None, leaves=None):
    gemma = fleet.assignment("203.0.113.10").servers[0].id
    probes = {s.id: DOWN for s in fleet.servers()} | {gemma: probe}
    memories = {gemma: memory or Memory(State.HEALTHY, 0, 0, 0.0)}
    seen = Observations(100.0, {}, {}, memories, index_listings([], [], {}), routes,
                        leaves=leaves)
    return next(s for s in plan_pass(fleet, seen, probes).servers if s.id == gemma)


def test_an_https_route_is_never_moved_to_http_and_the_plain_answer_is_flagged(tmp_path):
    fleet = tls_fleet(tmp_path)
    gemma = fleet.assignment("203.0.113.10").servers[0].id
    secure = "https://203.0.113.10:8001/v1"
    plan = gemma_pass(fleet, replace(SERVING, plain_http=True),
                      (Route(gemma, "gemma", secure, secure),))
    assert plan.change is None and plan.route.api_base == secure
    assert PLAIN_UNDER_TLS in plan.why and PLAIN_UNDER_TLS in plan.verdict.reason
    assert plan.summary()["plain_http"] is True
    assert "plain_http" not in gemma_pass(fleet, SERVING).summary()


def test_a_certificate_of_a_released_binding_is_rejected(tmp_path):
    fleet = tls_fleet(tmp_path)
    served = replace(SERVING, cert_serial=0xABC, cert_not_after=2e9)
    revoked = {"203.0.113.10": BoxLeaves(True, frozenset({0xABC}))}
    plan = gemma_pass(fleet, served, leaves=revoked)
    assert plan.verdict.state is State.REJECTED
    assert "a certificate of a released binding (serial abc)" in plan.verdict.reason
    assert not plan.verdict.memory.tls_seen
    current = {"203.0.113.10": BoxLeaves(True, frozenset({0xABD}))}
    assert gemma_pass(fleet, served, leaves=current).verdict.state is State.HEALTHY


def test_a_verified_certificate_is_remembered_and_a_plain_answer_never_clears_it(tmp_path):
    fleet = tls_fleet(tmp_path)
    verified = gemma_pass(fleet, replace(SERVING, cert_not_after=2e9, cert_serial=5))
    assert verified.verdict.memory.tls_seen
    plain = gemma_pass(fleet, replace(SERVING, plain_http=True), memory=verified.verdict.memory)
    assert plain.verdict.memory.tls_seen
    assert Memory.from_record(plain.verdict.memory.record()).tls_seen
    assert not gemma_pass(fleet, SERVING).verdict.memory.tls_seen


def test_what_no_downgrade_reads_survives_the_playbooks_steps():
    """The CA path of a route (else every https route reads as to be replaced), the serial
    a probe verified and what llmao issued each box, between fleet_observe, vllm_probe and
    fleet_plan."""
    route = Route("llmao:x", "m", "https://x:1/v1", "https://x:1/v1", ca_path="/etc/ca.pem")
    leaves = {"x": BoxLeaves(True, frozenset({2 ** 150}))}
    seen = Observations(1.0, routes=(route,), leaves=leaves)
    back = Observations.from_record(json.loads(json.dumps(seen.record())))
    assert back.routes == (route,) and back.leaves == leaves
    assert Observations.from_record(Observations(1.0).record()).leaves is None
    probe = replace(SERVING, cert_serial=2 ** 159 + 1)
    assert probe_from_record(json.loads(json.dumps(probe_record(probe)))) == probe
    with pytest.raises(RecordError, match="cert_serial"):
        probe_from_record({**probe_record(SERVING), "cert_serial": 12})
