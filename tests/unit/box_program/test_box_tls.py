"""The payload's ``tls`` object and when the box asks for a certificate (docs/box-tls.md)."""

from __future__ import annotations

import json

import pytest

from .helpers import payload, server_entry

DIGEST = "ab" * 32


def with_tls(tls):
    return {**payload(server_entry(0)), "tls": tls}


def test_tls_is_read_and_kept_in_the_applied_record(install_set):
    assignment = install_set.validate_assignment(
        with_tls({"ca_sha256": DIGEST, "leaf_days": 7}))
    assert assignment.tls == install_set.BoxTls(DIGEST, 7)
    record = install_set.build_record(assignment, {}, "2026-12-01T00:00:00Z")
    assert record["tls"] == {"ca_sha256": DIGEST, "leaf_days": 7}


@pytest.mark.parametrize("tls", [
    {"ca_sha256": DIGEST}, {"ca_sha256": DIGEST, "leaf_days": 0},
    {"ca_sha256": DIGEST, "leaf_days": 91}, {"ca_sha256": DIGEST, "leaf_days": True},
    {"ca_sha256": DIGEST.upper(), "leaf_days": 7}, {"ca_sha256": DIGEST, "leaf_days": 7, "x": 1},
    "on",
])
def test_a_malformed_tls_object_refuses_the_assignment(install_set, tls):
    with pytest.raises(install_set.Refused, match="assignment.tls"):
        install_set.validate_assignment(with_tls(tls))


def test_the_vllm_command_serves_https_only_with_tls(install_set, tmp_path):
    server = install_set.validate_assignment(payload(server_entry(0))).servers[0]
    plain = install_set.vllm_argv(server, None, "vllm")
    assert not any(arg.startswith("--ssl") for arg in plain)
    secure = install_set.vllm_argv(server, None, "vllm", tls_dir=tmp_path)
    assert secure[-5:] == ["--ssl-keyfile", str(tmp_path / "key.pem"), "--ssl-certfile",
                           str(tmp_path / "cert.pem"), "--enable-ssl-refresh"]


def settings_at(install_set, data):
    return install_set.read_settings({"DATA_DIRECTORY": str(data)}, fetching=False)


def test_a_certificate_is_due_when_missing_from_another_ca_or_in_its_last_third(install_set,
                                                                              tmp_path):
    settings = settings_at(install_set, tmp_path)
    tls = install_set.BoxTls(DIGEST, 3)
    due = install_set.certificate_due
    assert due(settings, tls, 0) == "no certificate yet"
    settings.tls_dir.mkdir(parents=True)
    for name in ("key.pem", "cert.pem"):
        (settings.tls_dir / name).write_text("x")
    assert due(settings, tls, 0) == "what the box knew of its certificate is lost"
    meta = {"issued_at": 0, "not_after": 3000, "ca_sha256": DIGEST}
    (settings.tls_dir / "cert.json").write_text(json.dumps(meta))
    assert due(settings, tls, 1999) is None
    assert due(settings, tls, 2000) == "less than a third of its life is left"
    assert due(settings, install_set.BoxTls("cd" * 32, 3), 0) == "the fleet CA changed"


def test_a_pushed_assignment_with_tls_is_refused_before_anything_is_written(box, run_main):
    outcome = run_main("--payload", str(box.write_payload(
        with_tls({"ca_sha256": DIGEST, "leaf_days": 7}))))
    assert outcome.rc != 0
    refusal = [line for line in outcome.err.splitlines() if "box_tls" in line]
    assert len(refusal) == 1 and "the push path (--payload) does not support box_tls yet" \
        in refusal[0]
    assert "no certificate yet" in refusal[0] and "Traceback" not in outcome.err
    assert box.snapshot() == {} and box.ctl_calls() == [], "nothing written, nothing handed over"
