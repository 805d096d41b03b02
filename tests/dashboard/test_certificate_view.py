"""Under box TLS each server row shows how long the certificate its box served has left, and
warns a few days ahead of its expiry (docs/box-tls.md)."""

from __future__ import annotations

import copy

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.intent import deployment_id
from llmao_server.web.fleet_view import Observed, build_page
from tests.server.fleet_pair import CONFIG, KNOWN, OTHER_KNOWN, write_pair
from tests.tls_files import make_test_ca

NOW = 1_800_000_000.0
DAY = 86400.0


def served(box: str, port: int, name: str, **extra: object) -> tuple[str, dict]:
    key = deployment_id(box, port, name)
    return key, {"id": key, "box": box, "state": "Healthy", "reason": "serving",
                 "in_litellm": True, "public": f"{box}:{port}", **extra}


def test_rows_show_the_time_left_and_warn_near_expiry(tmp_path):
    ca = make_test_ca(tmp_path / "ca")
    document = copy.deepcopy(CONFIG)
    document["box_tls"] = {"ca_cert": str(ca.cert), "ca_key": str(ca.key), "leaf_days": 7}
    fleet = load_fleet(*write_pair(tmp_path / "fleet", document))
    verdicts = dict([served(KNOWN, 8001, "gemma", cert_not_after=NOW + 5 * DAY),
                     served(KNOWN, 8002, "qwen", cert_not_after=NOW + 1.5 * DAY),
                     served(OTHER_KNOWN, 8001, "qwen")])
    rows = {(row["box"], row["listen_port"]): row
            for row in build_page(fleet, Observed(verdicts=verdicts), NOW).table()["servers"]}
    assert (rows[(KNOWN, 8001)]["certificate"], rows[(KNOWN, 8001)]["certificate_tone"]) == \
        ("TLS 5.0 d", "")
    assert (rows[(KNOWN, 8002)]["certificate"], rows[(KNOWN, 8002)]["certificate_tone"]) == \
        ("TLS 1.5 d", "hot")
    assert rows[(OTHER_KNOWN, 8001)]["certificate"] is None


def test_without_box_tls_no_row_shows_a_certificate(tmp_path):
    fleet = load_fleet(*write_pair(tmp_path / "fleet"))
    verdicts = dict([served(KNOWN, 8001, "gemma", cert_not_after=NOW + DAY)])
    rows = build_page(fleet, Observed(verdicts=verdicts), NOW).table()["servers"]
    assert all(row["certificate"] is None for row in rows)
