"""R6: guessing the admin token, through the admin API's bearer and the login form alike.

Real ``llmao-server`` processes (three gunicorn workers each) on a SQLite file or,
for two instances, one PostgreSQL database. Every guess comes over loopback;
other peers are other loopback addresses (127.0.0.0/8 is all ours), which the
server sees as different TCP peers.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import AttemptLimits
from rig.postgres import session_cluster
from tests.llmao_process import LlmaoServer
from tests.reliability.admin_http import OBSERVATIONS, WORKERS, bearer, log_in, request
from tests.server.fleet_pair import ADMIN_TOKEN

GUESSES = 2_000
PARALLEL = 16
PEER_LIMIT = AttemptLimits.per_peer
OVERALL_LIMIT = AttemptLimits.overall

pytestmark = pytest.mark.slow


def in_parallel(guess: Callable[[LlmaoServer, str, str], int],
                attempts: list[tuple[LlmaoServer, str]]) -> Counter[int]:
    """One wrong guess per (server, peer), :data:`PARALLEL` at a time: their statuses."""
    def one(index: int) -> int:
        server, peer = attempts[index]
        return guess(server, f"wrong-guess-{index:05d}-of-the-admin-token", peer)

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return Counter(pool.map(one, range(len(attempts))))


def test_r6_wrong_bearers_from_one_peer_are_refused_without_being_compared(
        servers: Callable[..., LlmaoServer], tmp_path: Path) -> None:
    server = servers("one", str(tmp_path / "state.sqlite3"))
    started = time.monotonic()
    statuses = in_parallel(bearer, [(server, "127.0.0.1")] * GUESSES)
    elapsed = time.monotonic() - started
    compared = statuses[403]
    print(f"\nR6: {GUESSES} wrong bearers, {PARALLEL} in parallel, {WORKERS} workers: "
          f"{statuses[429]} refused unevaluated (429), {compared} compared (403), "
          f"{elapsed:.1f} s")
    assert set(statuses) <= {403, 429}, statuses
    assert statuses[429] >= 1_900
    assert compared <= PEER_LIMIT + 2
    assert server.log().count("why='wrong token'") == compared, "each compared guess audited"
    assert server.log().count("why='attempt limit") <= GUESSES // 100 + 2, "refusals bounded"

    # The login form draws on the same budget: the right token is refused unread.
    assert log_in(server, ADMIN_TOKEN) == 429
    assert bearer(server, ADMIN_TOKEN) == 429
    # Another peer is not locked out, and its right token does not use the budget up.
    for _ in range(PEER_LIMIT + 2):
        assert bearer(server, ADMIN_TOKEN, "127.0.0.2") == 200
    assert log_in(server, ADMIN_TOKEN, "127.0.0.2") == 302
    # Wrong logins in parallel from a third peer: the same limit.
    logins = in_parallel(log_in, [(server, "127.0.0.3")] * (4 * PARALLEL))
    assert logins == Counter({401: PEER_LIMIT, 429: 4 * PARALLEL - PEER_LIMIT})


def test_the_limits_hold_across_two_instances_on_postgresql(
        servers: Callable[..., LlmaoServer], pytestconfig: pytest.Config) -> None:
    database = session_cluster(pytestconfig).new_database()
    first, second = servers("one", database), servers("two", database)
    # One peer alternating between instances still gets PEER_LIMIT tries in all.
    alone = in_parallel(bearer, [(first, "127.0.1.1"), (second, "127.0.1.1")] * 2 * PEER_LIMIT)
    assert alone == Counter({403: PEER_LIMIT, 429: 3 * PEER_LIMIT})
    # Many peers: PEER_LIMIT tries each, until OVERALL_LIMIT tries from everyone.
    peers = [f"127.0.2.{n}" for n in range(1, OVERALL_LIMIT // PEER_LIMIT + 3)]
    spread = in_parallel(bearer, [((first, second)[k % 2], peer)
                                  for peer in peers for k in range(PEER_LIMIT)])
    assert spread[403] == OVERALL_LIMIT - PEER_LIMIT  # the lone peer's tries counted overall
    assert spread[403] + spread[429] == len(peers) * PEER_LIMIT
    assert bearer(second, ADMIN_TOKEN, "127.0.3.1") == 429  # everyone waits for the window
    refused = request(first, "GET", OBSERVATIONS, "127.0.3.2",
                      {"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert "too many admin token attempts from all addresses" in refused.text
    assert 0 < int(refused.headers["Retry-After"]) <= 15 * 60


def test_a_spread_attack_does_not_lock_out_a_trusted_controller(
        servers: Callable[..., LlmaoServer], tmp_path: Path) -> None:
    """``admin.attempts``: smaller limits, and a controller's address the overall limit
    leaves alone; its own limit still holds."""
    attempts = {"per_peer": 2, "overall": 6, "window_s": 600, "trusted_peers": ["127.0.4.0/30"]}
    server = servers("one", str(tmp_path / "state.sqlite3"),
                     admin={"token": ADMIN_TOKEN, "attempts": attempts})
    spread = in_parallel(bearer, [(server, f"127.0.5.{n}") for n in range(1, 6) for _ in (1, 2)])
    assert spread == Counter({403: 6, 429: 4})
    assert bearer(server, ADMIN_TOKEN, "127.0.5.9") == 429  # everyone else waits
    assert bearer(server, ADMIN_TOKEN, "127.0.4.1") == 200  # the controller does not
    guesses = in_parallel(bearer, [(server, "127.0.4.2")] * 5)
    assert guesses == Counter({403: 2, 429: 3})  # a trusted address still has its own limit
    assert bearer(server, ADMIN_TOKEN, "127.0.4.2") == 429


def test_without_a_writable_store_no_attempt_is_accepted(
        servers: Callable[..., LlmaoServer], pytestconfig: pytest.Config) -> None:
    cluster = session_cluster(pytestconfig)
    database = cluster.new_database()
    name = urlsplit(database).path.lstrip("/")
    server = servers("one", database)
    assert bearer(server, ADMIN_TOKEN) == 200
    cluster.psql(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    cluster.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                 f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")
    try:
        for _ in range(2 * PEER_LIMIT):
            assert bearer(server, f"guess-{_}") == 503
        assert bearer(server, ADMIN_TOKEN) == 503
        assert log_in(server, ADMIN_TOKEN) == 503
        assert "state store cannot count an admin attempt" in server.log()
    finally:
        cluster.psql(f"ALTER DATABASE {name} SET default_transaction_read_only = off")
        cluster.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")
    # Connections broken by the restart fail once each (503, uncounted), then reconnect.
    assert any(bearer(server, ADMIN_TOKEN) == 200 for _ in range(2 * WORKERS * 8))
