"""Reporting the applied revision back to llmao (POST /vllm/applied)."""

from __future__ import annotations

import json

import pytest

from .helpers import BEARERS, assert_sent_by_the_box, payload, server_entry

CONFIG, APPLIED = "/vllm/config", "/vllm/applied"


def test_the_report_carries_revision_time_and_servers_with_the_same_headers(llmao, box,
                                                                              run_main):
    llmao.script(CONFIG, (200, payload(server_entry(0), server_entry(1))))
    llmao.script(APPLIED, (204, b""))
    outcome = run_main()
    assert outcome.rc == 0, outcome.err
    (report,) = llmao.requests_to(APPLIED)
    assert_sent_by_the_box(report, "POST")
    assert report.headers["content-type"] == "application/json"
    body = json.loads(report.body)
    record = json.loads(box.record.read_text())
    assert body == {"revision": "rev-0001", "applied_at": record["applied_at"], "servers": [
        {"name": "model-0", "port": 8001, "served_model_name": "served-0"},
        {"name": "model-1", "port": 8002, "served_model_name": "served-1"}],
        "cards": [{"index": 0, "name": "NVIDIA Test GPU", "memory_total_mib": 81920}],
        "placement": {"model-0": [0], "model-1": [0]}}
    assert not any(bearer.encode() in report.body for bearer in BEARERS)
    assert "reported revision rev-0001 to llmao" in outcome.out


def test_an_unchanged_run_reports_again_with_the_first_applied_at(llmao, box, run_main):
    llmao.script(CONFIG, (200, payload(server_entry(0))))
    llmao.script(APPLIED, (200, {}))
    assert run_main().rc == 0
    assert run_main().rc == 0
    first, second = (json.loads(seen.body) for seen in llmao.requests_to(APPLIED))
    assert first == second


@pytest.mark.parametrize("answers", [
    [(500, b"")],
    [(404, {"error": {"message": "unknown route"}})],
])
def test_a_failed_report_is_a_warning_and_the_box_stays_configured(llmao, box, run_main,
                                                                     answers):
    llmao.script(CONFIG, (200, payload(server_entry(0))))
    llmao.script(APPLIED, *answers)
    outcome = run_main()
    assert outcome.rc == 0
    assert "warning:" in outcome.err
    assert box.program("model-0").exists() and box.record.exists()
    assert len(llmao.requests_to(APPLIED)) <= 3


def test_a_given_payload_is_not_reported(llmao, box, run_main):
    outcome = run_main("--payload", str(box.write_payload(payload(server_entry(0)))))
    assert outcome.rc == 0
    assert llmao.seen == []


def test_a_dry_run_fetches_but_reports_nothing(llmao, box, run_main):
    llmao.script(CONFIG, (200, payload(server_entry(0))))
    assert run_main("--dry-run").rc == 0
    assert [seen.path for seen in llmao.seen] == [CONFIG]
