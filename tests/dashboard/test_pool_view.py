"""The dashboard's Pools panel (docs/pools.md): each pool of config.yaml with its boxes,
min/max, spend against the budget and its last decisions with why, from what the pool passes
reported through the admin API; a pool not reported yet says so; a fleet without pools has no
panel."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from flask import Flask

from tests.dashboard.sessions import log_in
from tests.server.test_pool_api import ADMIN, POOLS, decision, pool_config, pool_pass


def pool_article(page: str, pool: str) -> str:
    found = re.search(rf'<article class="pool[^"]*" data-pool="{pool}">.*?</article>', page,
                      flags=re.S)
    assert found, f"no panel for pool {pool}"
    return found.group(0)


def test_each_pool_shows_its_boxes_spend_and_last_decisions(
        make_app: Callable[..., Flask]) -> None:
    client = make_app(pool_config("chat", "code")).test_client()
    assert log_in(client).status_code == 302
    client.post(POOLS, headers=ADMIN, json=pool_pass(time.time() - 30, [
        decision("rent", "saturated for 3 passes")]))
    second = pool_pass(time.time(), [
        decision("refuse", "saturated for 3 passes: the cheapest offer (0.6 $/h) would take "
                           "the spend to 1.55 $/h, past budget.max_usd_per_hour 1.5"),
        decision("rent_failed", "below boxes.min: 429 Too Many Requests", "throttled")])
    second["pools"]["code"] = {**second["pools"]["chat"], "members": [], "decisions": [],
                               "spend_usd_per_hour": 0}
    client.post(POOLS, headers=ADMIN, json=second)
    page = client.get("/fleet").get_data(as_text=True)
    chat = pool_article(page, "chat")
    assert "Pools" in page and "vast" in chat
    assert re.search(r'class="boxes">2 <span class="bounds">\(min 1, max 3\)', chat)
    assert "0.95 / 1.50 (63%)" in chat
    assert 'data-box="chat-aaaaaaaa"' in chat and "0.45 $/h" in chat and "instance 5001" in chat
    shown = re.findall(r"<strong>(.*?)</strong>", chat)
    assert shown == ["rent failed", "not rented", "rented"]  # newest first
    assert "past budget.max_usd_per_hour 1.5" in chat and "[throttled]" in chat
    code = pool_article(page, "code")
    assert 'class="pool short"' in code and "0.00 / 1.50" in code


def test_a_pool_no_pass_reported_says_so_and_no_pools_no_panel(
        make_app: Callable[..., Flask]) -> None:
    client = make_app(pool_config("chat")).test_client()
    assert log_in(client).status_code == 302
    chat = pool_article(client.get("/fleet").get_data(as_text=True), "chat")
    assert "no pool pass reported it yet" in chat and "short" not in chat
    plain = make_app(folder="plain").test_client()
    assert log_in(plain).status_code == 302
    assert 'class="pools"' not in plain.get("/fleet").get_data(as_text=True)
