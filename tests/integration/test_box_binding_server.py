"""Per-box identity through the real ``llmao-server`` (two workers; SQLite and PostgreSQL) and
the real box program: a box keeps its name, a second box with that name is refused, the
binding survives a restart and a SIGHUP, an admin releases it, ``fleet.binding: off`` is the
seed's protocol, and no box token reaches any log or output (docs/box-identity.md)."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.binding_rules import replaced_bindings
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    ListedBox,
    index_listings,
)
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import LlmaoAdmin
from ansible_collections.llmao.fleet.plugins.modules.fleet_observe import release_replaced
from llmao_server.store import open_store
from rig.boxes import free_port
from tests.binding_fleet import Fleet, token_of
from tests.llmao_process import start_llmao_server
from tests.server.fleet_pair import (
    CONFIG,
    KNOWN,
    OTHER_KNOWN,
    SECRETS,
    TOKEN_HEADER,
    box_headers,
    write_pair,
)

pytestmark = pytest.mark.slow

# Runs of a box program per check: fresh connections, so both workers answer some.
RUNS = 3


@pytest.fixture
def fleet(tmp_path: Path, location: str) -> Iterator[Fleet]:
    served = Fleet(tmp_path, location)
    try:
        yield served
    finally:
        served.server.stop()


def test_a_box_keeps_its_name_and_a_second_box_is_refused(fleet: Fleet) -> None:
    first, second = fleet.box("first"), fleet.box("second")
    ending = fleet.run(first)
    assert ending.rc == 0, ending.err
    token = token_of(first)
    assert token and len(token) >= 32
    for _ in range(RUNS):
        again = fleet.run(first)
        assert again.rc == 0 and "unchanged: revision" in again.out, again.err
    refused = fleet.run(second)
    assert refused.rc == 2
    assert refused.err.count("\n") == 1 and f"'{KNOWN}'" in refused.err
    assert "bound to another box" in refused.err and "release" in refused.err
    assert not any(second.conf.iterdir()) and token_of(second) is None
    # Survives a restart and a SIGHUP: the store keeps it, every new worker reads it.
    fleet.restart()
    assert fleet.run(second).rc == 2 and fleet.run(first).rc == 0
    fleet.server.reload()
    assert fleet.run(second).rc == 2 and fleet.run(first).rc == 0
    # Released by an admin, the name goes to the next box that fetches it.
    assert fleet.release(KNOWN)["released"] is True
    moved = fleet.run(second)
    assert moved.rc == 0, moved.err
    assert fleet.run(second).rc == 0 and fleet.run(first).rc == 2
    store = open_store(fleet.state)
    try:
        [binding] = [b for b in store.bindings_since(0) if b.box == KNOWN]
        conflicts = {c.box: c.count for c in store.binding_conflicts()}
    finally:
        store.close()
    assert binding.confirmed and binding.peer == "127.0.0.1"
    assert conflicts == {KNOWN: 1}  # the first box's refusal after the release
    said = fleet.everything_said()
    for secret in (token, token_of(second), *SECRETS):
        assert secret not in said
    assert "box_claim outcome=refused" in said


def test_a_lost_answer_a_wrong_token_and_304(fleet: Fleet) -> None:
    _, lost = fleet.fetch(OTHER_KNOWN)
    status, kept = fleet.fetch(OTHER_KNOWN)
    assert status == 200 and kept and kept != lost
    assert fleet.fetch(OTHER_KNOWN, lost)[0] == 403
    assert fleet.fetch(OTHER_KNOWN, kept) == (200, "")
    port = int(fleet.server.url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/vllm/config", headers={**box_headers(OTHER_KNOWN),
                                                       TOKEN_HEADER: kept})
    etag = connection.getresponse().getheader("ETag")
    connection.close()
    for _ in range(RUNS):
        assert fleet.fetch(OTHER_KNOWN, kept, **{"If-None-Match": etag})[0] == 304
        assert fleet.fetch(OTHER_KNOWN, "x" * 43)[0] == 403
    assert fleet.fetch(OTHER_KNOWN, None)[0] == 403  # no token: refused, not a guess
    # Three wrong tokens counted so far; admin.attempts.per_peer (5) is the limit.
    assert [fleet.fetch(OTHER_KNOWN, "y" * 43)[0] for _ in range(3)] == [403, 403, 429]
    assert kept not in fleet.everything_said() and lost not in fleet.everything_said()


def test_binding_off_is_the_seeds_protocol(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, str(tmp_path / "state.sqlite3"), binding="off")
    try:
        first, second = fleet.box("first"), fleet.box("second")
        assert fleet.run(first).rc == 0 and fleet.run(second).rc == 0
        assert fleet.run(first).rc == 0
        assert token_of(first) is None and token_of(second) is None
        assert fleet.fetch(KNOWN) == (200, "")
        assert fleet.fetch(KNOWN, "anything-at-all-" * 3) == (200, "")
    finally:
        fleet.server.stop()
    store = open_store(fleet.state)
    try:
        assert store.bindings_since(0) == [] and store.binding_conflicts() == []
    finally:
        store.close()


class Module:
    """What release_replaced asks of an AnsibleModule: its timeout, check mode, warnings."""

    def __init__(self, check_mode: bool = False):
        self.params = {"timeout": 10.0}
        self.check_mode = check_mode
        self.warnings: list[str] = []

    def warn(self, text: str) -> None:
        self.warnings.append(text)


def test_reconcile_releases_a_binding_a_listing_gives_to_another_instance(
        tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    document = json.loads(json.dumps(CONFIG))
    document["server"] = {"state": str(tmp_path / "state.sqlite3"),
                          "url": f"http://127.0.0.1:{port}"}
    config, models = write_pair(tmp_path / "fleet", document)
    server = start_llmao_server(Path(config), Path(models), tmp_path, port=port)
    try:
        fleet = load_fleet(config, models)
        headers = {**box_headers(KNOWN), "X-LLMAO-Box-Instance": "4242"}
        request = urllib.request.Request(f"{server.url}/vllm/config", headers=headers)
        with urllib.request.urlopen(request, timeout=10) as answer:
            token = answer.headers[TOKEN_HEADER]
        request = urllib.request.Request(f"{server.url}/vllm/config",
                                         headers={**headers, TOKEN_HEADER: token})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200
        admin = LlmaoAdmin.from_settings(fleet.settings)
        assert admin.observations().bindings == {KNOWN: "4242"}
        replaced = index_listings(["vast"], [ListedBox("vast", ("4343", KNOWN), KNOWN)], {})
        stale = replaced_bindings(admin.observations().bindings, replaced)

        checking = Module(check_mode=True)
        assert release_replaced(checking, fleet, stale) == stale
        assert admin.observations().bindings == {KNOWN: "4242"}
        assert "would release the binding of" in checking.warnings[0]

        module = Module()
        assert release_replaced(module, fleet, stale) == stale
        assert admin.observations().bindings == {}
        assert "vast 4343" in module.warnings[0] and "4242" in module.warnings[0]
        assert "box_binding outcome=released who='admin-api'" in server.log()
        assert "the listing names" in server.log()
        # The name is the listed instance's: a copy of the fleet key alone cannot take it, the
        # replacement (reporting instance 4343) binds it on its fetch.
        request = urllib.request.Request(f"{server.url}/vllm/config", headers=box_headers(KNOWN))
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403
        replacement = {**box_headers(KNOWN), "X-LLMAO-Box-Instance": "4343"}
        request = urllib.request.Request(f"{server.url}/vllm/config", headers=replacement)
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.headers[TOKEN_HEADER] not in (None, token)
    finally:
        server.stop()


def test_sixteen_first_fetches_from_sixteen_peers_bind_the_name_once(tmp_path: Path) -> None:
    """16 peers (loopback addresses of their own) fetch one unbound name at the same moment,
    across the server's two workers: one binding, and the 15 others get a 403, no payload."""
    fleet = Fleet(tmp_path, str(tmp_path / "state.sqlite3"))
    try:
        answers = fleet.at_once([f"127.0.0.{10 + index}" for index in range(16)], "GET",
                                "/vllm/config", box_headers(KNOWN))
        won = [answer for answer in answers if answer[0] == 200]
        refused = [answer for answer in answers if answer[0] == 403]
        assert len(won) == 1 and won[0][2] and len(refused) == 15
        assert all(not token and set(body) == {"error"} for _, body, token in refused)
        assert all(body["error"]["code"] == "box_pending_elsewhere" for _, body, _ in refused)
        bindings = [b for b in open_store(fleet.state).bindings_since(0) if b.bound]
        assert len(bindings) == 1
    finally:
        fleet.server.stop()
