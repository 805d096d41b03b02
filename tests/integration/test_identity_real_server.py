"""A box's identity is given, never won (issue 33, docs/box-identity.md), through the real
``llmao-server`` with two gunicorn workers, each caller on a loopback address of its own (the
server tells peers apart by their TCP address): a copy of the fleet key gets nothing of a name
the controller pushes to, and cannot spend the controller's certificate budget; under
``fleet.binding: enrolled`` it binds nothing and a bootstrap token binds once; a pending name
stays with the peer that fetched it; and a release that names the next claimant is not won by
a thief polling every 0.1 s. Every call is a fresh connection, so both workers answer some."""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llmao_server.boxes.bindings import BOOTSTRAP_HEADER, INSTANCE_HEADER, TOKEN_HEADER
from llmao_server.store import BindingConflict, open_store
from tests.binding_fleet import ADMIN, Fleet
from tests.reliability.admin_http import login, request
from tests.server.fleet_pair import ADMIN_TOKEN, SECRETS, box_headers, config
from tests.tls_files import csr_pem, make_test_ca

pytestmark = pytest.mark.slow

# One name per scenario: the scenarios share a server and never touch each other's names.
TURNED, SIGNED, PENDING, RESERVED, HANDED = (f"203.0.113.{n}" for n in (21, 22, 23, 24, 25))
ENROLLED = "203.0.113.26"
HOSTS = {name: [["gemma", 8001]]
         for name in (TURNED, SIGNED, PENDING, RESERVED, HANDED, ENROLLED)}
# A fleet-key-only thief's certificate asks: far past the box's hourly budget (6).
THIEF_ASKS = 30
POLL_EVERY_S, POLL_FOR_S = 0.1, 3.0


def fleet_document(folder: Path) -> dict:
    """The test fleet on :data:`HOSTS`, with box TLS (its own CA) so certificates are signed."""
    ca = make_test_ca(folder / "ca")
    document = config(hosts=HOSTS, legacy_servers=None)
    document["box_tls"] = {"ca_cert": str(ca.cert), "ca_key": str(ca.key), "leaf_days": 3}
    return document


@pytest.fixture(scope="module")
def first_fetch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One server under the default ``fleet.binding: first_fetch``, for every scenario here
    but enrollment's."""
    folder = tmp_path_factory.mktemp("first-fetch")
    fleet = Fleet(folder, str(folder / "state.sqlite3"), document=fleet_document(folder))
    yield fleet
    fleet.server.stop()
    assert not [secret for secret in SECRETS if secret in fleet.everything_said()]


@pytest.fixture(scope="module")
def enrolled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One server under ``fleet.binding: enrolled``."""
    folder = tmp_path_factory.mktemp("enrolled")
    fleet = Fleet(folder, str(folder / "state.sqlite3"), binding="enrolled",
                  document=fleet_document(folder))
    yield fleet
    fleet.server.stop()


def code(body: dict) -> str | None:
    return body.get("error", {}).get("code")


def nothing_handed(answer: tuple[int, dict, str]) -> bool:
    """A refusal carrying nothing but its error: no payload, no token, no leaf."""
    status, body, token = answer
    return status == 403 and set(body) == {"error"} and not token


def refused(answer: tuple[int, dict, str], expected: str, what: str = "") -> None:
    """``answer`` is a 403 with the code ``expected`` and nothing else."""
    assert nothing_handed(answer) and code(answer[1]) == expected, (what, shown(answer))


def shown(answer: tuple[int, dict, str]) -> tuple[int, str | None, list[str], bool]:
    """What a failed check shows of an answer: never its payload's bearers nor its token."""
    status, body, token = answer
    return status, code(body), sorted(body), bool(token)


def intended(fleet: Fleet, name: str) -> str:
    status, body, _ = fleet.call("GET", f"/admin/api/boxes/{name}/turn", ADMIN)
    assert status == 200, body
    return body["revision"]


def applied_report(revision: str) -> dict:
    return {"revision": revision, "applied_at": "2026-12-05T12:00:00Z", "servers": []}


def posts_refused(fleet: Fleet, name: str, peer: str) -> None:
    """A box's three posts for ``name`` from ``peer`` with the fleet key alone, each refused
    with nothing handed: a valid certificate request for its address, an applied report and
    a turn ask of the revision llmao intends."""
    revision = intended(fleet, name)
    for path, body in {"/vllm/cert": {"csr": csr_pem(name)},
                       "/vllm/applied": applied_report(revision),
                       "/vllm/turn": {"revision": revision, "servers": ["gemma"]}}.items():
        refused(fleet.call("POST", path, box_headers(name), peer=peer, body=body),
                "box_token_required", path)


def observed(fleet: Fleet) -> dict:
    status, body, _ = fleet.call("GET", "/admin/api/observations", ADMIN)
    assert status == 200, body
    return body


def attention_strip(fleet: Fleet) -> str:
    """The dashboard's fleet page, as an admin logged in sees it."""
    cookie = login(fleet.server, ADMIN_TOKEN).cookie()
    page = request(fleet.server, "GET", "/fleet", headers={"Cookie": cookie or ""})
    assert page.status == 200, page.status
    return html.unescape(page.text)


def conflict_of(fleet: Fleet, name: str) -> BindingConflict:
    """The refused claims of ``name`` the store counted, the strip's source."""
    store = open_store(fleet.state)
    try:
        return {conflict.box: conflict for conflict in store.binding_conflicts()}[name]
    finally:
        store.close()


def controller_cert(fleet: Fleet, name: str) -> tuple[int, dict, str]:
    return fleet.call("POST", f"/admin/api/boxes/{name}/cert", ADMIN,
                      body={"csr": csr_pem(name)})


# ---------------------------------------------------------- a. pushed names: the controller's


def take_turn(fleet: Fleet, name: str) -> None:
    status, body, _ = fleet.call("POST", "/admin/api/turns/take", ADMIN, body={
        "box": name, "revision": intended(fleet, name), "servers": ["gemma"]})
    assert status == 200, body


def ask_cert(fleet: Fleet, name: str) -> None:
    status, body, _ = controller_cert(fleet, name)
    assert status == 200 and "BEGIN CERTIFICATE" in body["certificate"], body


@pytest.mark.parametrize(("name", "push"), [(TURNED, take_turn), (SIGNED, ask_cert)],
                         ids=["turn", "cert"])
def test_a_fleet_key_thief_gets_nothing_of_a_pushed_box(first_fetch: Fleet, name: str,
                                                        push) -> None:
    fleet, thief = first_fetch, f"127.0.1.{name.rsplit('.', 1)[1]}"
    push(fleet, name)
    turns_before = [turn for turn in observed(fleet)["turns"] if turn["box"] == name]
    refused(fleet.call("GET", "/vllm/config", box_headers(name), peer=thief),
            "box_token_required")
    posts_refused(fleet, name, thief)
    asks = [fleet.call("POST", "/vllm/cert", box_headers(name), peer=thief,
                       body={"csr": csr_pem(name)}) for _ in range(THIEF_ASKS)]
    for ask in asks:
        refused(ask, "box_token_required", "a certificate ask")

    # The controller's own signature is answered: its budget is not the one the thief hit.
    status, signed, _ = controller_cert(fleet, name)
    assert status == 200 and "BEGIN CERTIFICATE" in signed["certificate"], signed
    seen = observed(fleet)
    assert seen["bindings"][name]["holder"] == "controller"
    assert seen["boxes"][name] == {"last_fetch": None, "applied": None}
    assert [turn for turn in seen["turns"] if turn["box"] == name] == turns_before
    store = open_store(fleet.state)
    try:
        leaves = [leaf for leaf in store.issued_leaves(time.time()) if leaf.box == name]
    finally:
        store.close()
    assert leaves and all(leaf.by_controller for leaf in leaves)
    conflict = conflict_of(fleet, name)
    assert (conflict.last_peer, conflict.holder) == (thief, "controller")
    assert conflict.count >= THIEF_ASKS + 4
    assert (f"claimed box {name} from peer {thief} (the name is the controller's"
            in attention_strip(fleet))


# ------------------------------------------------------------ b. enrolled: given, never won


def test_under_enrolled_the_fleet_key_binds_nothing_and_a_bootstrap_token_binds_once(
        enrolled: Fleet) -> None:
    fleet, box, thief = enrolled, "127.0.2.10", "127.0.2.66"
    for peer in (thief, thief, box, box):
        refused(fleet.call("GET", "/vllm/config", box_headers(ENROLLED), peer=peer),
                "box_not_enrolled")
    assert ENROLLED not in observed(fleet)["bindings"]

    status, enrollment, _ = fleet.call("POST", f"/admin/api/boxes/{ENROLLED}/enroll", ADMIN,
                                       body={"ttl_s": 3600})
    assert status == 200, enrollment
    presenting = {**box_headers(ENROLLED), BOOTSTRAP_HEADER: enrollment["bootstrap_token"]}
    # Eight peers present the one token at the same moment, across both workers: one binds.
    peers = [box, *(f"127.0.2.{20 + index}" for index in range(7))]
    answers = fleet.at_once(peers, "GET", "/vllm/config", presenting)
    won = [(peer, answer) for peer, answer in zip(peers, answers, strict=True)
           if answer[0] == 200]
    assert len(won) == 1, [answer[0] for answer in answers]
    winner, (_, payload, token) = won[0]
    assert token and payload["servers"]
    spent = [answer for answer in answers if answer[0] != 200]
    for answer in spent:
        refused(answer, "bootstrap_token_invalid")
    refused(fleet.call("GET", "/vllm/config", presenting, peer=thief),  # a second use, later
            "bootstrap_token_invalid")
    refused(fleet.call("GET", "/vllm/config", box_headers(ENROLLED), peer=thief),
            "box_token_required")
    held = fleet.call("GET", "/vllm/config", {**box_headers(ENROLLED), TOKEN_HEADER: token},
                      peer=winner)
    assert held[0] == 200 and held[1]["servers"]
    binding = observed(fleet)["bindings"][ENROLLED]
    assert (binding["state"], binding["peer"], binding["holder"]) == ("confirmed", winner, "box")
    said = fleet.everything_said()
    assert token not in said and enrollment["bootstrap_token"] not in said


# ----------------------------------------------------------- c. a pending name stays its own


def test_a_pending_name_is_not_taken_by_another_peer(first_fetch: Fleet) -> None:
    fleet, box, thief = first_fetch, "127.0.3.10", "127.0.3.66"
    status, payload, token = fleet.call("GET", "/vllm/config", box_headers(PENDING), peer=box)
    assert status == 200 and token and payload["servers"]
    for _ in range(4):
        refused(fleet.call("GET", "/vllm/config", box_headers(PENDING), peer=thief),
                "box_pending_elsewhere")
    posts_refused(fleet, PENDING, thief)
    binding = observed(fleet)["bindings"][PENDING]
    assert (binding["state"], binding["peer"]) == ("pending", box)
    conflict = conflict_of(fleet, PENDING)
    assert (conflict.last_peer, conflict.holder_peer) == (thief, box)
    assert (f"claimed box {PENDING} from peer {thief} (held by the box at {box})"
            in attention_strip(fleet))
    # The box that fetched first still confirms its name, and gets its certificate.
    mine = {**box_headers(PENDING), TOKEN_HEADER: token}
    report = fleet.call("POST", "/vllm/applied", mine, peer=box,
                        body=applied_report(intended(fleet, PENDING)))
    assert report[0] == 200, shown(report)
    signed = fleet.call("POST", "/vllm/cert", mine, peer=box, body={"csr": csr_pem(PENDING)})
    assert signed[0] == 200 and "BEGIN CERTIFICATE" in signed[1]["certificate"], shown(signed)
    assert observed(fleet)["bindings"][PENDING]["state"] == "confirmed"


# ------------------------------------------- d. a release naming the next claimant, polled


def poll(fleet: Fleet, name: str, peer: str, stop: threading.Event) -> list[tuple[int, dict, str]]:
    """A thief's fetches of ``name`` every :data:`POLL_EVERY_S` until ``stop`` (or
    :data:`POLL_FOR_S`), with the fleet key and, every other time, an instance id of its own."""
    answers = []
    ends = time.monotonic() + POLL_FOR_S
    while not stop.is_set() and time.monotonic() < ends:
        instance = {INSTANCE_HEADER: "i-thief"} if len(answers) % 2 else {}
        answers.append(fleet.call("GET", "/vllm/config", {**box_headers(name), **instance},
                                  peer=peer))
        stop.wait(POLL_EVERY_S)
    return answers


def bind_and_confirm(fleet: Fleet, name: str, peer: str, **headers: str) -> str:
    """A box's first fetch of ``name`` from ``peer``, confirmed by a fetch with its token."""
    status, _, token = fleet.call("GET", "/vllm/config", {**box_headers(name), **headers},
                                  peer=peer)
    assert status == 200 and token
    again = fleet.call("GET", "/vllm/config", {**box_headers(name), TOKEN_HEADER: token},
                       peer=peer)
    assert again[0] == 200
    return token


def release_to_instance(fleet: Fleet, name: str) -> dict[str, str]:
    """``next_instance=``: the listing's instance alone binds next."""
    status, body, _ = fleet.call("DELETE", f"/admin/api/boxes/{name}/binding?next_instance=i-2",
                                 ADMIN)
    assert status == 200 and body["released"], body
    return {INSTANCE_HEADER: "i-2"}


def release_to_enrollment(fleet: Fleet, name: str) -> dict[str, str]:
    """An enrollment first, then the release: the bootstrap token alone binds next."""
    status, enrollment, _ = fleet.call("POST", f"/admin/api/boxes/{name}/enroll", ADMIN,
                                       body={"ttl_s": 3600})
    assert status == 200, enrollment
    assert fleet.release(name)["released"]
    return {BOOTSTRAP_HEADER: enrollment["bootstrap_token"]}


@pytest.mark.parametrize(("name", "release", "between"), [
    (RESERVED, release_to_instance, "box_reserved"),
    (HANDED, release_to_enrollment, "box_not_enrolled"),
], ids=["next_instance", "enrollment"])
def test_a_release_naming_the_next_claimant_is_not_won_by_a_polling_thief(
        first_fetch: Fleet, name: str, release, between: str) -> None:
    fleet = first_fetch
    octet = name.rsplit(".", 1)[1]
    old, thief, claimant = (f"127.0.4.{octet}", f"127.0.5.{octet}", f"127.0.6.{octet}")
    bind_and_confirm(fleet, name, old, **{INSTANCE_HEADER: "i-1"})
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        polled = pool.submit(poll, fleet, name, thief, stop)
        time.sleep(0.5)
        naming = release(fleet, name)
        time.sleep(1.0)  # the thief polls the released name ten times
        bind_and_confirm(fleet, name, claimant, **naming)
        time.sleep(1.0)
        stop.set()
        answers = polled.result()
    assert len(answers) >= 20
    assert all(nothing_handed(answer) for answer in answers), [shown(a) for a in answers]
    codes = [code(answer[1]) for answer in answers]
    # Before the release, while the name waits for its claimant, after the claimant took it.
    assert codes[0] == "box_token_required" and between in codes
    assert codes[-1] == "box_token_required" and set(codes) == {"box_token_required", between}
    binding = observed(fleet)["bindings"][name]
    assert (binding["state"], binding["peer"]) == ("confirmed", claimant)
