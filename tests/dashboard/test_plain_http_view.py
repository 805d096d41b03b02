"""No downgrade (docs/box-tls.md): a server whose box answered the TLS hello in plain HTTP under
box TLS is an attention item, one entry per server, saying where and what to do; a pass without
one has no such item."""

from __future__ import annotations

import copy
import re
import time

from flask import Flask
from flask.testing import FlaskClient

from llmao_server.state import app_state
from llmao_server.web.fleet_view import Observed, build_page
from tests.dashboard.sessions import log_in
from tests.server.fleet_pair import KNOWN, OTHER_KNOWN
from tests.server.loaded_pass import GEMMA, OTHER_QWEN, a_pass

PLAIN_UNDER_TLS = "plain HTTP under box TLS"
KEPT = f"{PLAIN_UNDER_TLS}: its https route is kept, never moved to http"


def flagged(now: float):
    """The test pass with two servers flagged: one whose https route the pass kept, one
    routed over plain HTTP (a box llmao never issued a certificate to)."""
    record = a_pass(now)
    verdicts = copy.deepcopy(dict(record.verdicts))
    for key, why in ((OTHER_QWEN, KEPT), (GEMMA, "")):
        verdicts[key].update(plain_http=True, why=why, public=f"{verdicts[key]['box']}:8001",
                             reason=f"{PLAIN_UNDER_TLS}: {verdicts[key]['reason']}")
    return type(record)(record.pass_at, verdicts, record.drift, record.recorded_at,
                        record.models, record.boxes)


def strip_of(app: Flask, client: FlaskClient) -> str:
    assert log_in(client).status_code == 302
    answer = client.get("/fleet")
    assert answer.status_code == 200
    html = answer.get_data(as_text=True)
    return re.search(r'<section class="attention".*?</section>', html, flags=re.S).group(0)


def test_each_server_answering_plain_http_is_an_entry_with_advice(app: Flask,
                                                                 client: FlaskClient) -> None:
    app_state(app).store.record_pass(flagged(time.time()))
    item = re.search(r'<article class="problem plain-http">.*?</article>', strip_of(app, client),
                     flags=re.S)
    assert item, "no plain HTTP item in the strip"
    text = re.sub(r"\s+", " ", item.group(0))
    assert PLAIN_UNDER_TLS in text
    assert f"{KNOWN} gemma :8001" in text and f"{OTHER_KNOWN} qwen :8001" in text
    assert f"{KNOWN} qwen :8002" not in text
    assert f"answered at {OTHER_KNOWN}:8001: {PLAIN_UNDER_TLS}: Stalled in the test pass; " \
           "its https route is kept, never moved to http" in text
    assert "reading its bearer" in text and "install_set.py" in text


def test_a_pass_without_plain_http_has_no_such_item(app: Flask, client: FlaskClient) -> None:
    app_state(app).store.record_pass(a_pass(time.time()))
    assert "plain-http" not in strip_of(app, client)


def test_the_item_leads_the_strip(app: Flask) -> None:
    """A downgrade outranks load and state: the strip is read in order."""
    record = flagged(1_000_000.0)
    page = build_page(app_state(app).fleet,
                      Observed(verdicts=record.verdicts, pass_at=record.pass_at), 1_000_000.0)
    kinds = [problem.kind for problem in page.problems]
    assert kinds[0] == "plain-http", kinds
    assert [entry for entry, _ in page.problems[0].entries] == [f"{KNOWN} gemma :8001",
                                                                f"{OTHER_KNOWN} qwen :8001"]
