"""A box's binding on the dashboard and in /metrics: shown, released, and its conflicts loud."""

from __future__ import annotations

import re

import pytest
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from tests.dashboard.sessions import csrf_token, flashes, log_in
from tests.server.fleet_pair import KNOWN, OTHER_KNOWN, box_headers

TOKEN_HEADER = "X-LLMAO-Box-Token"


@pytest.fixture
def admin(client: FlaskClient) -> FlaskClient:
    assert log_in(client).status_code == 302
    return client


def bind(client: FlaskClient, box: str = KNOWN) -> str:
    """Bind ``box`` and confirm it, as its box program does; its token."""
    token = client.get("/vllm/config", headers=box_headers(box)).headers[TOKEN_HEADER]
    assert client.get("/vllm/config",
                      headers={**box_headers(box), TOKEN_HEADER: token}).status_code == 200
    return token


def claim(client: FlaskClient, box: str = KNOWN) -> int:
    return client.get("/vllm/config", headers=box_headers(box)).status_code


def rows_of(client: FlaskClient, box: str) -> list[str]:
    page = client.get("/fleet").get_data(as_text=True)
    return [row for row in re.findall(r'<tr class="server".*?</tr>', page, flags=re.S)
            if f'data-box="{box}"' in row]


def test_a_bound_box_shows_its_binding_and_a_release_button(admin: FlaskClient) -> None:
    token = bind(admin)
    [row, *_] = rows_of(admin, KNOWN)
    assert "confirmed" in row and "from 127.0.0.1" in row
    assert 'action="/fleet/release"' in row and "data-confirm=" in row
    assert 'name="csrf_token"' in row
    assert "Release" not in "".join(rows_of(admin, OTHER_KNOWN))
    assert token not in admin.get("/fleet").get_data(as_text=True)


def test_release_needs_the_csrf_token_and_then_lets_a_new_box_bind(admin: FlaskClient) -> None:
    bind(admin)
    assert admin.post("/fleet/release", data={"box": KNOWN}).status_code == 403
    assert claim(admin) == 403
    sent = admin.post("/fleet/release", data={"box": KNOWN,
                                               "csrf_token": csrf_token(admin, "/fleet")})
    assert sent.status_code == 302
    assert any("Released the binding of" in text for text in flashes(admin))
    assert claim(admin) == 200


def test_a_refused_claim_is_in_the_strip_and_in_metrics(admin: FlaskClient) -> None:
    token = bind(admin)
    assert claim(admin) == 403
    assert claim(admin) == 403
    page = admin.get("/fleet").get_data(as_text=True)
    assert (f"someone holding the fleet key claimed box {KNOWN} from peer 127.0.0.1 (held by "
            "the box at 127.0.0.1): rotate the fleet key if this was not you (2 refused") in page
    metrics = admin.get("/metrics").get_data(as_text=True)
    found = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
             for family in text_string_to_metric_families(metrics)
             for sample in family.samples}
    assert found[("llmao_box_claims_refused_total", (("box", KNOWN),))] == 2
    assert found[("llmao_bound_boxes", ())] == 1
    assert token not in metrics


def test_claims_of_unbound_names_make_no_series(admin: FlaskClient) -> None:
    for _ in range(3):
        claim(admin, OTHER_KNOWN)  # pending: each fetch binds it anew, nothing is refused
    assert "llmao_box_claims_refused_total{" not in admin.get("/metrics").get_data(as_text=True)
