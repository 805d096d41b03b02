"""``playbooks/reconcile.yml`` on a local fleet: stub vLLM servers on loopback addresses, the
real ``llmao-server`` and the LiteLLM contract fake. Fast (no containers), so every behaviour
of the play that does not need a box or LiteLLM itself is checked here; the end-to-end test
runs the same play against container boxes and the real proxy.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.http_json import JsonService
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import PUBLIC_BASE_KEY
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import LlmaoAdmin
from llmao_server.store import Approval, SqliteStore
from rig.boxes import LocalStub, free_port
from rig.litellm_process import LiteLLMProcess
from rig.local_fleet import (
    MODEL,
    LocalFleet,
    loopback_boxes,
    one_model_hosts,
    start_stubs,
    stop_stubs,
)
from tests.llmao_process import LlmaoServer, start_llmao_server
from tests.reconcile_run import PlaybookRun, run_reconcile

pytestmark = pytest.mark.slow


@pytest.fixture
def local(tmp_path: Path, fake_litellm: LiteLLMProcess, litellm_master_key: str) -> LocalFleet:
    """Two boxes of one server each: the first serves, the second never starts."""
    local = LocalFleet(tmp_path / "fleet", one_model_hosts(loopback_boxes(2)))
    local.write(litellm={"url": fake_litellm.url, "master_key": litellm_master_key},
                server={"url": f"http://127.0.0.1:{free_port()}",
                        "state": str(tmp_path / "state.sqlite3")})
    return local


@pytest.fixture
def serving(local: LocalFleet) -> Iterator[list[LocalStub]]:
    fleet = local.load()
    first = next(iter(fleet.assignments))
    stubs = start_stubs(local.of_boxes([first], "first"))
    yield stubs
    stop_stubs(stubs)


def start_server(local: LocalFleet, log_dir: Path) -> LlmaoServer:
    """llmao-server on the address config.yaml gives it (so a restart keeps that address)."""
    port = int(local.load().settings.server.url.rsplit(":", 1)[1])
    return start_llmao_server(local.config_path, local.models_path, log_dir, port=port,
                              workers=1)


@pytest.fixture
def server(local: LocalFleet, tmp_path: Path) -> Iterator[LlmaoServer]:
    with start_server(local, tmp_path) as running:
        yield running


@pytest.fixture
def litellm(local: LocalFleet) -> Iterator[LiteLLM]:
    """The fake as the modules see it; this test's deployments are removed afterwards."""
    client = LiteLLM.from_settings(local.load().settings)
    yield client
    ours = tuple(f"llmao:{box}:" for box in local.hosts) + ("llmao:192.0.2.50:",
                                                              "hand-made-route")
    for route in client.routes():
        if route.id.startswith(ours):
            client.delete(route.id)


def reconcile(local: LocalFleet, *flags: str) -> PlaybookRun:
    return run_reconcile(local.inventory_path, *flags)


def boxes_of(local: LocalFleet) -> tuple[str, str]:
    first, second = local.hosts
    return first, second


def test_first_pass_registers_the_serving_server_and_the_second_changes_nothing(
        local, serving, server, litellm):
    first_box, silent_box = boxes_of(local)
    first = reconcile(local)
    assert first.returncode == 0, first.output
    assert f"{first_box} {MODEL}-8001 ({MODEL}, 8001 -> {first_box}:8001): Healthy: " \
           f"serving its model with our bearer => register: Healthy, not in LiteLLM" \
        in first.output
    assert f"{silent_box} {MODEL}-8001 ({MODEL}, 8001 -> {silent_box}:8001): Awaiting: " \
        in first.output
    assert first.changed == 2  # the registration, and the verdicts' new states
    assert [r.id for r in litellm.routes() if first_box in r.id] == \
        [f"llmao:{first_box}:8001:{MODEL}-8001"]
    audit = [json.loads(line) for line in
             (local.folder / "llmao-audit.jsonl").read_text().splitlines()]
    assert [(a["action"], a["id"]) for a in audit] == [
        ("register", f"llmao:{first_box}:8001:{MODEL}-8001")]
    second = reconcile(local)
    assert (second.returncode, second.changed) == (0, 0), second.output
    assert "=> unchanged, in LiteLLM" in second.output


def test_check_and_diff_show_the_change_and_make_none(local, serving, server, litellm):
    first_box, _ = boxes_of(local)
    checked = reconcile(local, "--check", "--diff")
    assert checked.returncode == 0, checked.output
    assert "=> register: Healthy, not in LiteLLM" in checked.output
    assert f'"api_base": "http://{first_box}:8001/v1"' in checked.output
    assert '"api_key": "********"' in checked.output
    assert not any(first_box in route.id for route in litellm.routes())
    assert not (local.folder / "llmao-audit.jsonl").exists()
    assert LlmaoAdmin(server.url, local.admin_token).observations().pass_at is None


def test_routes_of_no_server_llmao_deletes_its_own_and_reports_the_rest(
        local, server, litellm):
    orphan = {"model_name": MODEL,
              "litellm_params": {"model": f"hosted_vllm/{MODEL}",
                                 "api_base": "http://192.0.2.50:8001/v1", "api_key": "x"},
              "model_info": {"id": "llmao:192.0.2.50:8001:gone",
                             PUBLIC_BASE_KEY: "http://192.0.2.50:8001/v1"}}
    hand_made = {"model_name": MODEL,
                 "litellm_params": {"model": f"hosted_vllm/{MODEL}",
                                    "api_base": "http://192.0.2.60:8001/v1", "api_key": "x"},
                 "model_info": {"id": "hand-made-route"}}
    litellm.register(orphan)
    litellm.register(hand_made)
    run = reconcile(local)
    assert run.returncode == 0, run.output
    assert "llmao:192.0.2.50:8001:gone (stub-model): delete: llmao route matches no " \
           "intended server" in run.output
    assert "hand-made-route (stub-model at http://192.0.2.60:8001/v1): route in LiteLLM " \
           "that matches no intended server (not llmao's: left alone)" in run.output
    ids = {route.id for route in litellm.routes()}
    assert "hand-made-route" in ids and "llmao:192.0.2.50:8001:gone" not in ids


def test_unreachable_litellm_fails_the_pass_before_any_change(local, serving, server):
    url = f"http://127.0.0.1:{free_port()}"
    local.write(litellm={"url": url, "master_key": "sk-unused-master-key-0001"})
    run = reconcile(local)
    assert run.returncode != 0 and run.failed == 1
    assert f"LiteLLM at {url} unreachable" in run.output
    assert "nothing was changed" in run.output
    assert "Probe every server" not in run.output
    assert not (local.folder / "llmao-audit.jsonl").exists()


def test_no_secret_in_verbose_output_nor_the_audit_log(local, serving, server, litellm,
                                                        tmp_path):
    audit = tmp_path / "elsewhere" / "audit.jsonl"
    audit.parent.mkdir()
    run = reconcile(local, "-vvv", "--diff", "-e", f"llmao_audit_log={audit}")
    assert run.returncode == 0, run.output
    assert json.loads(audit.read_text())["action"] == "register"
    assert not (local.folder / "llmao-audit.jsonl").exists()
    texts = (run.output, audit.read_text())
    leaked = [secret for secret in local.secrets() if any(secret in text for text in texts)]
    assert leaked == []


@pytest.fixture
def approved_box(local: LocalFleet, litellm: LiteLLM) -> Iterator[str]:
    """An unknown box serving one server, as it would once approved with MODEL alone."""
    box = next(name for name in loopback_boxes(3) if name not in local.hosts)
    as_approved = LocalFleet(local.folder / "approved", {box: [[MODEL, 8001]]}, salt=local.salt)
    stubs = start_stubs(as_approved.write())
    yield box
    stop_stubs(stubs)
    for route in litellm.routes():
        if route.id.startswith(f"llmao:{box}:"):
            litellm.delete(route.id)


def test_an_approved_box_is_registered_until_llmao_restarts(local, approved_box, litellm,
                                                             tmp_path):
    route_id = f"llmao:{approved_box}:8001:{MODEL}"
    with start_server(local, tmp_path):
        SqliteStore(local.load().settings.server.state).approve(
            Approval(approved_box, (MODEL,), "admin", time.time()))
        approved = reconcile(local)
        assert approved.returncode == 0, approved.output
        assert f"{approved_box} {MODEL} ({MODEL}, 8001 -> {approved_box}:8001): Healthy: " \
               "serving its model with our bearer => register: Healthy, not in LiteLLM" \
            in approved.output
        assert route_id in {route.id for route in litellm.routes()}
    with start_server(local, tmp_path):  # a restart forgets every approval
        forgotten = reconcile(local)
    assert forgotten.returncode == 0, forgotten.output
    assert f"{route_id} ({MODEL}): delete: llmao route matches no intended server" \
        in forgotten.output
    assert route_id not in {route.id for route in litellm.routes()}


@pytest.fixture
def garbage_provider(local: LocalFleet) -> Iterator[str]:
    """A Vast API that answers 200 with a page that is not its instance list (R3)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Garbage(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<html>maintenance</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    api = ThreadingHTTPServer(("127.0.0.1", 0), Garbage)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{api.server_address[1]}"
    local.write(providers={"vast": {"api_key": "vast-key-for-the-test", "url": url}})
    yield url
    api.shutdown()
    api.server_close()


def test_a_provider_answering_garbage_deletes_nothing_and_unlists_nobody(
        local, garbage_provider, serving, server, litellm):
    first_box, silent_box = boxes_of(local)
    route = f"llmao:{first_box}:8001:{MODEL}-8001"
    first = reconcile(local)
    assert first.returncode == 0, first.output
    assert "vast listing could not be read" in first.output
    assert "Unlisted" not in first.output
    assert f"{silent_box} {MODEL}-8001 ({MODEL}, 8001 -> {silent_box}:8001): Awaiting: " \
        in first.output
    assert [r.id for r in litellm.routes() if first_box in r.id] == [route]
    # Its vLLM goes away: one failed probe, below the threshold, deletes nothing.
    stop_stubs(serving)
    second = reconcile(local)
    assert second.returncode == 0, second.output
    assert "Unlisted" not in second.output
    assert [r.id for r in litellm.routes() if first_box in r.id] == [route]


def test_an_address_two_vast_instances_share_is_flagged_and_never_dialled(
        local, serving, server, litellm):
    """Item 2 of issue 13: never resolved by order, never Unlisted, said in the output."""
    from rig.provider_api import serve_provider_api, vast_instance

    first_box, silent_box = boxes_of(local)
    page = {"instances": [vast_instance(11, first_box, {8001: 8001}),
                          vast_instance(12, first_box, {8001: 8001})], "next_token": None}
    with serve_provider_api() as api:
        api.answer("/vast/instances/", page)
        local.write(providers={"vast": {"api_key": "vast-key-for-the-test",
                                        "url": f"{api.url}/vast"}})
        done = reconcile(local)
    assert done.returncode == 0, done.output
    assert f"{first_box} is ambiguous: vast 11, vast 12 share this address" in done.output
    assert "key the fleet.hosts row by the instance id" in done.output
    line = next(line for line in done.output.splitlines()
                if f"{first_box} {MODEL}-8001 ({MODEL}, 8001 -> no public address)" in line)
    assert "Unlisted" not in line and "Foreign" not in line and "is ambiguous" in line
    assert f"{silent_box} {MODEL}-8001" in done.output  # the other box: no listing names it
    # Its vLLM answers at the shared address, but which instance that is cannot be known.
    assert not [r.id for r in litellm.routes() if first_box in r.id]


def test_a_throttled_listing_with_a_bad_entry_and_a_preempted_bid_bends(
        local, serving, server, litellm):
    """Issue 24 item 5 and issue 18 item 7: Vast answers 429 first (retried as it asks), one
    entry is malformed (skipped, named), one price is garbage (only the price is lost), and
    the silent box is a bid Vast stopped: Preempted, in the output and the attention strip."""
    from rig.provider_api import serve_provider_api, vast_instance
    from tests.reliability.admin_http import login, request

    first_box, silent_box = boxes_of(local)
    page = {"instances": [
        {**vast_instance(11, first_box, {8001: 8001}), "dph_total": "cheap"},
        {"id": 12, "public_ipaddr": "192.0.2.77", "ports": {"8001/tcp": "garbage"}},
        vast_instance(13, silent_box, {8001: 8001}, price=0.3, status="exited", bid=True),
    ], "next_token": None}
    with serve_provider_api() as api:
        api.answer("/vast/instances/", page)
        api.throttle("/vast/instances/", 2, headers={"Retry-After": "1"})
        local.write(providers={"vast": {"api_key": "vast-key-for-the-test",
                                        "url": f"{api.url}/vast"}})
        done = reconcile(local)
        asked = api.requests_to("/vast/instances/")
    assert done.returncode == 0, done.output
    assert asked == 3, "two 429s waited out, then read"
    assert "vast listing could not be read" not in done.output
    assert ("vast: instances[1] (vast 12): ports['8001/tcp'] is not a list of bindings: "
            "skipped; the rest of the listing stands") in done.output
    assert "vast: instances[0] (vast 11): 'cheap' is not a price per hour: its price is " \
           "unknown" in done.output
    assert f"{silent_box} {MODEL}-8001 ({MODEL}, 8001 -> {silent_box}:8001): Preempted: " \
           "preempted: the provider stopped it" in done.output
    assert [r.id for r in litellm.routes() if first_box in r.id] == \
        [f"llmao:{first_box}:8001:{MODEL}-8001"], "the rest of the listing stands"
    cookie = login(server, local.admin_token).cookie() or ""
    page_html = request(server, "GET", "/fleet", headers={"Cookie": cookie}).text
    strip = page_html.split('class="attention"', 1)[1].split("</section>", 1)[0]
    assert 'class="problem preempted"' in strip and silent_box in strip
    assert "the provider stopped this interruptible instance" in strip
    exposition = request(server, "GET", "/metrics").text
    assert 'llmao_servers{state="Preempted"} 1.0' in exposition


# --- one pass at a time, fleet-wide ------------------------------------------------------------

OTHER_PASS = "other-controller pid 4242"


def lease_admin(local: LocalFleet, server: LlmaoServer) -> LlmaoAdmin:
    return LlmaoAdmin(server.url, local.admin_token)


def test_a_pass_finding_the_lease_held_names_the_holder_and_writes_nothing(
        local, serving, server, litellm):
    first_box, _ = boxes_of(local)
    admin = lease_admin(local, server)
    assert admin.claim_pass_lease("o" * 32, OTHER_PASS, 120).granted
    run = reconcile(local)
    assert run.returncode == 0, run.output
    assert f"the pass lease is held by {OTHER_PASS} for" in run.output
    assert "this pass ends without writing" in run.output
    assert "Observe llmao" not in run.output
    assert not any(first_box in route.id for route in litellm.routes())
    assert not (local.folder / "llmao-audit.jsonl").exists()
    assert admin.observations().pass_at is None
    assert admin.pass_lease().holder == OTHER_PASS


def test_a_lease_whose_pass_died_is_taken_over_once_expired_and_given_back(
        local, serving, server, litellm):
    first_box, _ = boxes_of(local)
    admin = lease_admin(local, server)
    assert admin.claim_pass_lease("d" * 32, OTHER_PASS, 1).granted
    time.sleep(1.2)
    run = reconcile(local)
    assert run.returncode == 0, run.output
    assert "the pass lease is held by this pass" in run.output
    assert [r.id for r in litellm.routes() if first_box in r.id] == \
        [f"llmao:{first_box}:8001:{MODEL}-8001"]
    assert admin.pass_lease().holder is None


def test_a_checked_pass_does_not_take_the_lease(local, serving, server, litellm):
    admin = lease_admin(local, server)
    checked = reconcile(local, "--check")
    assert checked.returncode == 0, checked.output
    assert "the pass lease is free" in checked.output
    assert admin.pass_lease().holder is None
    assert admin.claim_pass_lease("o" * 32, OTHER_PASS, 120).granted
    held = reconcile(local, "--check")
    assert f"the pass lease is held by {OTHER_PASS}" in held.output
    assert admin.pass_lease().holder == OTHER_PASS


def test_two_passes_at_once_one_acts_the_other_names_it_and_changes_nothing(
        local, server, litellm):
    """The first pass is slowed (its server answers after 1.5 s), so the second starts while the
    first holds the lease: the second must end without a write and name the first."""
    fleet = local.load()
    first_box = next(iter(fleet.assignments))
    stubs = start_stubs(local.of_boxes([first_box], "first"),
                        {first_box: {"*": {"answer_delay_s": 1.5}}})
    admin = lease_admin(local, server)
    try:
        runs: dict[str, PlaybookRun] = {}
        acting = threading.Thread(target=lambda: runs.setdefault("first", reconcile(local)))
        acting.start()
        deadline = time.monotonic() + 120
        while admin.pass_lease().holder is None:
            assert acting.is_alive() and time.monotonic() < deadline, runs
            time.sleep(0.1)
        holder = admin.pass_lease().holder
        second = reconcile(local)
        acting.join(300)
    finally:
        stop_stubs(stubs)
    first = runs["first"]
    assert first.returncode == 0, first.output
    assert second.returncode == 0, second.output
    assert "=> register: Healthy, not in LiteLLM" in first.output
    assert f"the pass lease is held by {holder} for" in second.output
    assert "Observe llmao" not in second.output
    assert holder.split(" pid ")[1].isdigit()
    audit = (local.folder / "llmao-audit.jsonl").read_text().splitlines()
    assert len(audit) == 1
    assert admin.pass_lease().holder is None


def apply_on(local: LocalFleet, server: LlmaoServer, box: str) -> str:
    """What the push path does once its turn says apply: it reports the intended revision as
    the controller (the turn was taken through the admin API, so the controller owns the
    box's name; the report starts the Loading clock as a pull box's fetch would). Returns
    that revision."""
    assignment = local.load().assignment(box)
    report = {"revision": assignment.revision, "applied_at": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "servers": [{"name": s.name, "port": s.listen_port,
                     "served_model_name": s.served_model_name} for s in assignment.servers]}
    answer = JsonService(server.url, local.admin_token).call(
        "POST", f"/admin/api/boxes/{box}/applied", report)
    assert answer["current"], answer
    return assignment.revision


def audited(local: LocalFleet) -> list[tuple[str, ...]]:
    entries = [json.loads(line) for line in
               (local.folder / "llmao-audit.jsonl").read_text().splitlines()]
    return [(e["action"], e.get("phase") or e["id"], e["reason"]) for e in entries]


class TestRolloutTurns:
    """Reconcile drives a box's turn: both boxes serve, the turn is taken through the admin API
    (as the push path takes it), the box's part is played by the test."""

    @pytest.fixture
    def local(self, tmp_path: Path, fake_litellm: LiteLLMProcess,
              litellm_master_key: str) -> LocalFleet:
        local = LocalFleet(tmp_path / "fleet", one_model_hosts(loopback_boxes(2)))
        local.write(litellm={"url": fake_litellm.url, "master_key": litellm_master_key},
                    server={"url": f"http://127.0.0.1:{free_port()}",
                            "state": str(tmp_path / "state.sqlite3")},
                    fleet={"health_grace_s": 2})
        return local

    @pytest.fixture
    def stubs(self, local: LocalFleet) -> Iterator[dict[str, LocalStub]]:
        stubs = start_stubs(local.load())
        yield {stub.host: stub for stub in stubs}
        stop_stubs(stubs)

    @staticmethod
    def take_turn(local: LocalFleet, server: LlmaoServer, box: str) -> dict:
        assignment = local.load().assignment(box)
        return JsonService(server.url, local.admin_token).call(
            "POST", "/admin/api/turns/take",
            {"box": box, "revision": assignment.revision,
             "servers": [s.name for s in assignment.servers]})

    def test_a_turn_drains_the_box_and_readmits_it_once_applied_healthy(
            self, local, stubs, server, litellm):
        first, second = boxes_of(local)
        first_id = f"llmao:{first}:8001:{MODEL}-8001"
        assert reconcile(local).returncode == 0
        assert self.take_turn(local, server, first)["phase"] == "draining"
        revision = local.load().assignment(first).revision
        checked = reconcile(local, "--check")
        assert checked.returncode == 0, checked.output
        assert f"=> delete: rollout: draining for rev {revision}" in checked.output
        assert first_id in {route.id for route in litellm.routes()}
        admin = LlmaoAdmin(server.url, local.admin_token)
        assert [t.phase.value for t in admin.observations().turns] == ["draining"]

        drained = reconcile(local)
        assert drained.returncode == 0, drained.output
        assert f"{MODEL}: restarting {first}" in drained.output
        assert f"turn of {first} (rev {revision}): drained" in drained.output
        assert first_id not in {route.id for route in litellm.routes()}
        assert [t.phase.value for t in admin.observations().turns] == ["drained"]
        held = reconcile(local)  # the old vLLM still answers: never registered before the apply
        assert f"({MODEL}, 8001 -> {first}:8001): Healthy: serving its model with our bearer " \
               "=> unchanged, not in LiteLLM" in held.output

        apply_on(local, server, first)
        done = reconcile(local)
        assert done.returncode == 0, done.output
        assert f"turn of {first} (rev {revision}): done" in done.output
        assert {route.id for route in litellm.routes() if "llmao:" in route.id} == \
            {first_id, f"llmao:{second}:8001:{MODEL}-8001"}
        assert [t.phase.value for t in admin.observations().turns] == ["done"]
        assert audited(local)[2:] == [
            ("delete", first_id, f"rollout: draining for rev {revision}"),
            ("turn", "drained", ""),
            ("register", first_id, "Healthy, not in LiteLLM"),
            ("turn", "done", "")]

    def test_a_server_failing_on_the_new_revision_pauses_the_model(
            self, local, stubs, server, litellm):
        first, second = boxes_of(local)
        first_id = f"llmao:{first}:8001:{MODEL}-8001"
        assert reconcile(local).returncode == 0
        assert self.take_turn(local, server, first)["granted"]
        assert reconcile(local).returncode == 0
        stubs[first].stop()  # the new revision does not start
        revision = apply_on(local, server, first)
        time.sleep(3)  # past the 2 s grace
        failed = reconcile(local)
        assert failed.returncode == 0, failed.output
        why = f"{first_id} is Stalled: fetched its config"
        assert f"turn of {first} (rev {revision}): failed: {why}" in failed.output
        assert f"{MODEL}: PAUSED at {first} (rev {revision}): {why}" in failed.output
        assert [r.id for r in litellm.routes() if "llmao:" in r.id] == \
            [f"llmao:{second}:8001:{MODEL}-8001"]
        assert audited(local)[-1][:2] == ("turn", "failed")
        refused = self.take_turn(local, server, second)
        assert not refused["granted"] and "paused" in refused["why"]
