"""Applying an assignment: files, stale programs, handover, the applied record, idempotence."""

from __future__ import annotations

import json

from .helpers import BEARERS, BOX, payload, server_entry

FOREIGN = "[program:other]\ncommand=/bin/true\n"


def apply(box, run_main, doc, *flags):
    return run_main("--payload", str(box.write_payload(doc)), *flags)


def test_a_first_run_writes_programs_record_and_hands_over(box, run_main):
    outcome = apply(box, run_main, payload(server_entry(0), server_entry(1)))
    assert outcome.rc == 0, outcome.err
    assert box.program("model-0").exists() and box.program("model-1").exists()
    assert box.ctl_calls() == ["reread", "update"]
    record = json.loads(box.record.read_text())
    assert record["revision"] == "rev-0001" and record["host"] == BOX
    assert record["servers"] == [
        {"name": "model-0", "model": "org/model-0", "served_model_name": "served-0",
         "port": 8001, "gpu_memory_utilization": 0.45},
        {"name": "model-1", "model": "org/model-1", "served_model_name": "served-1",
         "port": 8002, "gpu_memory_utilization": 0.45}]
    assert record["applied_at"].endswith("Z")
    assert not any(bearer in box.record.read_text() for bearer in BEARERS)
    assert not any(bearer in outcome.text for bearer in BEARERS)


def test_a_second_run_changes_nothing_and_calls_no_supervisorctl(box, run_main):
    doc = payload(server_entry(0, vram_gb=10), server_entry(1, max_model_len=2048))
    assert apply(box, run_main, doc).rc == 0
    before = box.snapshot()
    box.ctl_log.unlink()
    outcome = apply(box, run_main, doc)
    assert outcome.rc == 0, outcome.err
    assert "unchanged: revision rev-0001 is applied" in outcome.out
    assert box.snapshot() == before, "no file may be rewritten, the record keeps applied_at"
    assert box.ctl_calls() == []


def test_a_changed_server_rewrites_only_its_program(box, run_main):
    assert apply(box, run_main, payload(server_entry(0, gpu_memory_utilization=0.4),
                                        server_entry(1, gpu_memory_utilization=0.4))).rc == 0
    untouched = box.program("model-0").stat().st_ino
    changed = payload(server_entry(0, gpu_memory_utilization=0.4),
                      server_entry(1, gpu_memory_utilization=0.4, max_model_len=8192),
                      revision="rev-0002")
    outcome = apply(box, run_main, changed)
    assert outcome.rc == 0
    assert box.program("model-0").stat().st_ino == untouched
    assert "--max-model-len 8192" in box.program("model-1").read_text()
    assert box.ctl_calls() == ["reread", "update"] * 2
    assert json.loads(box.record.read_text())["revision"] == "rev-0002"


def test_stale_marked_programs_go_and_foreign_files_stay(box, run_main):
    assert apply(box, run_main, payload(server_entry(0), server_entry(1))).rc == 0
    (box.conf / "other.conf").write_text(FOREIGN)
    (box.conf / "llmao-handmade.conf").write_text(FOREIGN)
    outcome = apply(box, run_main, payload(server_entry(0), revision="rev-0002"))
    assert outcome.rc == 0
    assert not box.program("model-1").exists()
    assert f"removed {box.program('model-1')}" in outcome.out
    assert (box.conf / "other.conf").read_text() == FOREIGN
    assert (box.conf / "llmao-handmade.conf").read_text() == FOREIGN
    assert [s["name"] for s in json.loads(box.record.read_text())["servers"]] == ["model-0"]


def test_an_empty_assignment_removes_all_our_programs(box, run_main):
    assert apply(box, run_main, payload(server_entry(0))).rc == 0
    assert apply(box, run_main, payload(revision="rev-0002")).rc == 0
    assert [path.name for path in box.conf.iterdir()] == []


def test_a_foreign_file_where_a_program_goes_is_refused(box, run_main):
    box.program("model-0").write_text(FOREIGN)
    outcome = apply(box, run_main, payload(server_entry(0)))
    assert outcome.rc == 2
    assert "was not written by install_set.py" in outcome.err
    assert box.program("model-0").read_text() == FOREIGN
    assert box.ctl_calls() == []


def test_a_failed_handover_exits_4_and_the_next_run_hands_over_again(box, run_main):
    box.supervisorctl(status=7)
    doc = payload(server_entry(0))
    outcome = apply(box, run_main, doc)
    assert outcome.rc == 4
    assert "supervisorctl reread failed (exit 7)" in outcome.err
    assert box.program("model-0").exists() and not box.record.exists()
    box.supervisorctl(status=0)
    assert apply(box, run_main, doc).rc == 0
    assert box.ctl_calls() == ["reread", "reread", "update"]
    assert box.record.exists()


def test_no_handover_leaves_supervisor_alone(box, run_main):
    outcome = apply(box, run_main, payload(server_entry(0)), "--no-handover")
    assert outcome.rc == 0 and box.program("model-0").exists() and box.record.exists()
    assert box.ctl_calls() == []


def test_dry_run_writes_nothing_and_shows_a_masked_diff(box, run_main):
    outcome = apply(box, run_main, payload(server_entry(0)), "--dry-run")
    assert outcome.rc == 0, outcome.err
    assert not any(box.conf.iterdir()) and not box.data.exists()
    assert box.ctl_calls() == []
    assert f"would write {box.program('model-0')}" in outcome.out
    assert f"+++ {box.program('model-0')}" in outcome.out
    assert '+environment=VLLM_API_KEY="***"' in outcome.out
    assert "would run supervisorctl reread and update" in outcome.out
    assert BEARERS[0] not in outcome.text


def test_dry_run_over_an_applied_assignment_diffs_and_masks_old_bearers(box, run_main):
    assert apply(box, run_main, payload(server_entry(0), server_entry(1))).rc == 0
    before = box.snapshot()
    rotated = payload(server_entry(0, api_key="sk-vllm-NEWbearer"), revision="rev-0002")
    outcome = apply(box, run_main, rotated, "--dry-run")
    assert outcome.rc == 0
    assert box.snapshot() == before
    assert f"would remove {box.program('model-1')}" in outcome.out
    assert '-environment=VLLM_API_KEY="***"' in outcome.out
    assert not any(secret in outcome.text for secret in (*BEARERS, "sk-vllm-NEWbearer"))


def test_json_output_for_the_push_role(box, run_main):
    doc = payload(server_entry(0), server_entry(1))
    first = apply(box, run_main, doc, "--json", "--no-handover")
    assert first.rc == 0
    result = first.json()
    assert result["changed"] is True and result["revision"] == "rev-0001"
    assert result["written"] == [str(box.program("model-0")), str(box.program("model-1")),
                                 str(box.record)]
    assert result["removed"] == [] and result["unchanged"] == []
    assert [d["path"] for d in result["diff"]] == result["written"]
    assert result["diff"][0]["before"] == ""
    assert 'VLLM_API_KEY="***"' in result["diff"][0]["after"]
    assert not any(bearer in first.out for bearer in BEARERS)

    again = apply(box, run_main, doc, "--json", "--no-handover").json()
    assert again["changed"] is False and again["written"] == [] and again["diff"] == []
    assert sorted(again["unchanged"]) == sorted(result["written"])

    shrunk = apply(box, run_main, payload(server_entry(0), revision="r2"), "--json",
                   "--dry-run").json()
    assert shrunk["changed"] is True and shrunk["dry_run"] is True
    assert shrunk["removed"] == [str(box.program("model-1"))]
    assert box.program("model-1").exists(), "--dry-run with --json still writes nothing"


def test_json_output_on_a_failure_is_one_object_too(box, run_main):
    outcome = apply(box, run_main, payload(server_entry(0, port=0)), "--json")
    assert outcome.rc == 2
    assert outcome.json() == {"failed": True, "rc": 2,
                              "msg": "servers[0].port: must be an integer from 1 to 65535"}


def test_a_hand_edited_program_is_put_back(box, run_main):
    doc = payload(server_entry(0))
    assert apply(box, run_main, doc).rc == 0
    original = box.program("model-0").read_text()
    box.program("model-0").write_text(original.replace("startsecs=10", "startsecs=1"))
    outcome = apply(box, run_main, doc)
    assert outcome.rc == 0 and box.program("model-0").read_text() == original
    assert box.ctl_calls() == ["reread", "update"] * 2


UPDATE_SAYS = """model-1: stopped
model-1: removed process group
model-0: stopped
model-0: updated process group
model-2: added process group
"""


def test_json_names_each_program_with_its_file_change_and_what_supervisord_did(box, run_main):
    assert apply(box, run_main, payload(server_entry(0), server_entry(1))).rc == 0
    box.supervisorctl(status=0, update_says=UPDATE_SAYS)
    doc = payload(server_entry(0, max_model_len=4096), server_entry(2), revision="rev-0002")
    outcome = apply(box, run_main, doc, "--json")
    assert outcome.rc == 0, outcome.err
    result = outcome.json()
    assert result["handed_over"] is True and result["record"] == str(box.record)
    assert result["programs"] == [
        {"name": "model-0", "file": "updated", "supervisord": "updated"},
        {"name": "model-2", "file": "added", "supervisord": "added"},
        {"name": "model-1", "file": "removed", "supervisord": "removed"}]
    assert box.ctl_calls()[-2:] == ["reread", "update"]


def test_json_of_a_dry_run_or_an_unchanged_box_reports_no_supervisord_action(box, run_main):
    doc = payload(server_entry(0))
    dry = apply(box, run_main, doc, "--json", "--dry-run").json()
    assert dry["handed_over"] is False
    assert dry["programs"] == [{"name": "model-0", "file": "added", "supervisord": None}]
    assert apply(box, run_main, doc).rc == 0
    again = apply(box, run_main, doc, "--json").json()
    assert again["handed_over"] is False
    assert again["programs"] == [{"name": "model-0", "file": "unchanged", "supervisord": None}]
