"""llmao.fleet.litellm_deployment's logic against the LiteLLM contract fake and LiteLLM itself.

Every test runs twice through `litellm_proxy` (the fake, then the real proxy marked
`litellm`): register, read back, idempotence, check mode, diff, replace, delete, and the
refusals that keep llmao's hands off deployments it does not own. A chat through the proxy
reaches the stub vLLM that the registered deployment names.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.audit_log import append_audit
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import LiteLLM
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import PUBLIC_BASE_KEY
from ansible_collections.llmao.fleet.plugins.modules.litellm_deployment import (
    MASKED,
    ApplyError,
    Outcome,
    apply_all,
    audit_entry,
)
from rig.boxes import free_port
from rig.litellm_process import LiteLLMProcess
from rig.local_fleet import LocalFleet, loopback_boxes, one_model_hosts, start_stubs, stop_stubs
from tests.tls_files import make_test_ca

MODEL = "deploy-model"


@pytest.fixture
def local(tmp_path, litellm_proxy: LiteLLMProcess, litellm_master_key: str) -> LocalFleet:
    local = LocalFleet(tmp_path, one_model_hosts(loopback_boxes(1), 1, MODEL), models=[MODEL])
    local.write(litellm={"url": litellm_proxy.url, "master_key": litellm_master_key})
    return local


@pytest.fixture
def fleet(local: LocalFleet) -> Fleet:
    return local.load()


@pytest.fixture
def litellm(fleet: Fleet) -> Iterator[LiteLLM]:
    """The proxy as the module sees it; every llmao deployment of this test removed after."""
    client = LiteLLM.from_settings(fleet.settings)
    yield client
    for route in client.routes():
        if route.id.startswith(f"llmao:{box_of(fleet)}:"):
            client.delete(route.id)


def box_of(fleet: Fleet) -> str:
    return next(iter(fleet.assignments))


def params(fleet: Fleet, **changes) -> dict:
    """One deployment as the module's options give it."""
    base = {"state": "present", "box": box_of(fleet), "listen_port": 8001, "name": None,
            "id": None, "public_host": None, "public_port": None, "reason": "test"}
    return {**base, **changes}


def run(fleet: Fleet, item: dict, check_mode: bool) -> Outcome:
    (outcome,) = apply_all(fleet, [item], check_mode, timeout=15.0)
    return outcome


def our_id(fleet: Fleet) -> str:
    return deployment_id(box_of(fleet), 8001, f"{MODEL}-8001")


def test_register_then_nothing_to_do(fleet, litellm):
    first = run(fleet, params(fleet), check_mode=False)
    assert (first.action, first.changed, first.id) == ("register", True, our_id(fleet))
    route = litellm.route(our_id(fleet))
    assert route is not None and route.owned
    assert route.public_base == route.api_base == f"http://{box_of(fleet)}:8001/v1"
    assert route.model_name == MODEL
    second = run(fleet, params(fleet), check_mode=False)
    assert (second.action, second.changed) == ("none", False)
    assert [r.id for r in litellm.routes()].count(our_id(fleet)) == 1


def test_chat_through_litellm_reaches_the_registered_server(fleet, litellm,
                                                            litellm_proxy, litellm_master_key):
    stubs = start_stubs(fleet)
    try:
        run(fleet, params(fleet), check_mode=False)
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        request = urllib.request.Request(
            f"{litellm_proxy.url}/v1/chat/completions", data=body.encode(), method="POST",
            headers={"Authorization": f"Bearer {litellm_master_key}",
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            content = json.load(answer)["choices"][0]["message"]["content"]
        assert content == f"answered by {box_of(fleet)} port 8001"
    finally:
        stop_stubs(stubs)


def test_check_mode_says_what_it_would_do_and_does_nothing(fleet, litellm):
    outcome = run(fleet, params(fleet), check_mode=True)
    assert outcome.action == "register" and outcome.before == {}
    assert litellm.route(our_id(fleet)) is None
    run(fleet, params(fleet), check_mode=False)
    gone = run(fleet, params(fleet, state="absent"), check_mode=True)
    assert gone.action == "delete" and gone.after == {}
    assert litellm.route(our_id(fleet)) is not None


def test_diff_masks_the_key(fleet, litellm):
    outcome = run(fleet, params(fleet), check_mode=False)
    assert outcome.after == {"id": our_id(fleet), "model_name": MODEL,
                             "api_base": f"http://{box_of(fleet)}:8001/v1",
                             PUBLIC_BASE_KEY: f"http://{box_of(fleet)}:8001/v1",
                             "api_key": MASKED}
    text = json.dumps([outcome.before, outcome.after])
    assert all(server.api_key not in text for server in fleet.servers())


def test_a_moved_address_replaces_the_deployment(fleet, litellm):
    run(fleet, params(fleet), check_mode=False)
    moved = run(fleet, params(fleet, public_host="127.0.0.1", public_port=41001),
                check_mode=False)
    assert moved.action == "replace"
    assert moved.before["api_base"] == f"http://{box_of(fleet)}:8001/v1"
    assert litellm.route(our_id(fleet)).public_base == "http://127.0.0.1:41001/v1"


def test_absent_deletes_then_has_nothing_to_do(fleet, litellm):
    run(fleet, params(fleet), check_mode=False)
    gone = run(fleet, params(fleet, state="absent"), check_mode=False)
    assert gone.action == "delete" and gone.before["id"] == our_id(fleet)
    assert litellm.route(our_id(fleet)) is None
    again = run(fleet, params(fleet, state="absent", box=None, listen_port=None,
                               id=our_id(fleet)), check_mode=False)
    assert again.action == "none"


def test_a_deployment_without_our_marker_is_left_alone(fleet, litellm):
    body = {"model_name": MODEL,
            "litellm_params": {"model": f"hosted_vllm/{MODEL}",
                               "api_base": f"http://{box_of(fleet)}:8001/v1", "api_key": "x"},
            "model_info": {"id": our_id(fleet)}}
    litellm.register(body)
    for state in ("present", "absent"):
        with pytest.raises(ApplyError, match="not llmao's, left alone"):
            run(fleet, params(fleet, state=state), check_mode=False)
    assert litellm.route(our_id(fleet)) is not None


def test_only_llmao_ids_and_intended_servers(fleet, litellm):
    with pytest.raises(ApplyError, match="not an llmao deployment id"):
        run(fleet, params(fleet, state="absent", box=None, id="hand-made"), check_mode=False)
    with pytest.raises(ApplyError, match="no server on listen port 8003"):
        run(fleet, params(fleet, listen_port=8003), check_mode=False)


def test_a_refused_master_key_is_named(tmp_path, litellm_proxy):
    local = LocalFleet(tmp_path, one_model_hosts(loopback_boxes(1), 1, MODEL), models=[MODEL])
    fleet = local.write(litellm={"url": litellm_proxy.url, "master_key": "sk-not-the-key-123"})
    with pytest.raises(ApplyError, match="refused the master key") as caught:
        run(fleet, params(fleet), check_mode=False)
    assert "sk-not-the-key-123" not in str(caught.value)


def test_an_unreachable_litellm_is_named(tmp_path, litellm_master_key):
    url = f"http://127.0.0.1:{free_port()}"
    local = LocalFleet(tmp_path, one_model_hosts(loopback_boxes(1), 1, MODEL), models=[MODEL])
    fleet = local.write(litellm={"url": url, "master_key": litellm_master_key})
    with pytest.raises(ApplyError, match=f"LiteLLM at {url} unreachable"):
        run(fleet, params(fleet, state="absent"), check_mode=False)


def test_many_in_one_call_each_recorded_as_it_is_made(tmp_path, litellm_proxy,
                                                     litellm_master_key):
    local = LocalFleet(tmp_path / "many", one_model_hosts(loopback_boxes(3), 2, MODEL),
                       models=[MODEL])
    fleet = local.write(litellm={"url": litellm_proxy.url, "master_key": litellm_master_key})
    items = [params(fleet, box=server.box, listen_port=server.listen_port, reason=server.name)
             for server in fleet.servers()]
    recorded: list[tuple[str, str]] = []
    try:
        outcomes = apply_all(fleet, items, False, 15.0,
                             lambda outcome, why: recorded.append((outcome.id, why)))
        assert [o.action for o in outcomes] == ["register"] * 6
        assert recorded == [(o.id, s.name) for o, s in zip(outcomes, fleet.servers(),
                                                           strict=True)]
        items.insert(3, params(fleet, state="absent", box=None, id="hand-made"))
        with pytest.raises(ApplyError, match="hand-made is not an llmao") as caught:
            apply_all(fleet, items, False, 15.0)
        assert [o.action for o in caught.value.done] == ["none"] * 3
    finally:
        for server in fleet.servers():
            run(fleet, params(fleet, state="absent", box=server.box,
                              listen_port=server.listen_port), False)


def test_the_audit_line_holds_no_secret(fleet, litellm, tmp_path):
    outcome = run(fleet, params(fleet), check_mode=False)
    path = tmp_path / "audit.jsonl"
    append_audit(str(path), audit_entry(outcome, "Healthy, not in LiteLLM", 1700000000.0))
    append_audit(str(path), audit_entry(run(fleet, params(fleet, state="absent"), False),
                                        "Unhealthy", 1700000060.0))
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first == {"at": "2023-11-14T22:13:20Z", "time": 1700000000.0, "action": "register",
                     "id": our_id(fleet), "model_name": MODEL,
                     "api_base": f"http://{box_of(fleet)}:8001/v1",
                     "reason": "Healthy, not in LiteLLM"}
    assert second["action"] == "delete" and second["reason"] == "Unhealthy"
    assert all(server.api_key not in path.read_text() for server in fleet.servers())


@pytest.fixture
def asked(monkeypatch) -> list[str]:
    """The deployment ids LiteLLM is asked for one by one (not through a listing)."""
    ids: list[str] = []
    ask_alone = LiteLLM.route
    monkeypatch.setattr(LiteLLM, "route", lambda self, wanted: ids.append(wanted)
                        or ask_alone(self, wanted))
    return ids


def test_many_in_one_call_read_litellm_once(fleet, litellm, asked):
    """A bulk apply looks each deployment up in one listing (not one GET each); one it has
    changed since is asked for again, so registering then removing it in one call works."""
    present, absent = params(fleet), params(fleet, state="absent")
    outcomes = apply_all(fleet, [present, absent], False, 15.0)
    assert [o.action for o in outcomes] == ["register", "delete"]
    assert asked == [our_id(fleet)]
    assert litellm.route(our_id(fleet)) is None
    asked.clear()
    assert [o.action for o in apply_all(fleet, [present, present], False, 15.0)] == \
        ["register", "none"]
    assert asked == [our_id(fleet)]


def https_items(fleet: Fleet) -> list[dict]:
    return [params(fleet, box=server.box, listen_port=server.listen_port)
            for server in fleet.servers()]


def test_a_listed_https_route_with_its_ca_file_is_left_as_it_is(
        tmp_path, litellm_proxy, litellm_master_key, asked):
    """Under box TLS the listing carries each route's CA file (model_info), so a pass that
    changes nothing replaces nothing and asks for no deployment alone."""
    local = TlsFleet(tmp_path, litellm_proxy, litellm_master_key)
    fleet = local.verifying_against("ca-on-proxy.pem")
    try:
        assert {o.action for o in apply_all(fleet, https_items(fleet), False, 15.0)} == \
            {"register"}
        asked.clear()
        again = apply_all(fleet, https_items(fleet), False, 15.0)
        assert [o.action for o in again] == ["none", "none"]
        assert asked == []
    finally:
        remove_all(fleet)


def test_a_route_whose_ca_file_changed_is_replaced(tmp_path, litellm_proxy,
                                                    litellm_master_key, asked):
    """A new litellm_ca_path replaces every https deployment, each read alone first."""
    local = TlsFleet(tmp_path, litellm_proxy, litellm_master_key)
    fleet = local.verifying_against("old-ca.pem")
    try:
        apply_all(fleet, https_items(fleet), False, 15.0)
        fleet = local.verifying_against("new-ca.pem")
        asked.clear()
        again = apply_all(fleet, https_items(fleet), False, 15.0)
        assert [o.action for o in again] == ["replace", "replace"]
        assert sorted(asked) == sorted(server.id for server in fleet.servers())
        client = LiteLLM.from_settings(fleet.settings)
        assert {client.route(server.id).ca_path for server in fleet.servers()} == \
            {str(tmp_path / "new-ca.pem")}
    finally:
        remove_all(fleet)


class TlsFleet:
    """Two servers under box TLS, against this test's LiteLLM."""

    def __init__(self, folder, litellm_proxy: LiteLLMProcess, master_key: str):
        self.folder, self.ca = folder, make_test_ca(folder / "ca")
        self.local = LocalFleet(folder / "fleet", one_model_hosts(loopback_boxes(1), 2, MODEL),
                                models=[MODEL])
        self.litellm = {"url": litellm_proxy.url, "master_key": master_key}

    def verifying_against(self, ca_file: str) -> Fleet:
        """The fleet with LiteLLM told to verify its boxes against ``ca_file``."""
        return self.local.write(litellm=self.litellm, box_tls={
            "ca_cert": str(self.ca.cert), "ca_key": str(self.ca.key),
            "litellm_ca_path": str(self.folder / ca_file)})


def remove_all(fleet: Fleet) -> None:
    client = LiteLLM.from_settings(fleet.settings)
    for server in fleet.servers():
        if client.route(server.id) is not None:
            client.delete(server.id)
