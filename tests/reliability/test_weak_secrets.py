"""Secrets strong and distinct at load: a weak token is refused, a weak fleet key warned of.

``admin.token`` is refused unless it is 32 printable ASCII characters or more and
differs from every other secret of config.yaml, with the usual message naming the
file and the key, never the value. A weak ``fleet.key`` or salt loads (changing it
means re-provisioning the fleet) but never quietly: a real ``llmao-server`` says so
at start, in its log and on the dashboard's attention strip, and still serves.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.config_errors import ConfigError
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from ansible_collections.llmao.fleet.plugins.module_utils.secret_strength import (
    MIN_SECRET_LENGTH,
    secret_weakness,
)
from rig.fleet_files import FleetSecrets, strong_secret
from tests.llmao_process import LlmaoServer
from tests.reliability.admin_http import login, request
from tests.server.fleet_pair import (
    ADMIN_TOKEN,
    CONFIG,
    FLEET_KEY,
    KNOWN,
    SALT,
    box_headers,
    write_pair,
)

WEAK_KEY = "weak-fleet-key-7q"
WEAK_SALT = "weak-salt-\u00e9t\u00e9-0123456789abcdefghijklmnop"  # long, but not ASCII


def with_changes(section: str, **values: object) -> dict:
    document = copy.deepcopy(CONFIG)
    document.setdefault(section, {}).update(values)
    return document


@pytest.mark.parametrize(("token", "why"), [
    ("a" * (MIN_SECRET_LENGTH - 1), "shorter than 32 characters"),
    ("correct horse battery staple and more words", "printable ASCII"),
    ("\u00e9" * MIN_SECRET_LENGTH, "printable ASCII"),
    ("tab\tinside-0123456789abcdefghijklmnopq", "printable ASCII"),
    (FLEET_KEY, "the same as fleet.key"),
    (SALT, "the same as fleet.vllm_api_salt"),
])
@pytest.mark.parametrize("section", ["admin", "metrics"])
def test_a_weak_or_shared_token_is_refused_naming_file_and_key(
        tmp_path: Path, token: str, why: str, section: str) -> None:
    paths = write_pair(tmp_path, with_changes(section, token=token))
    with pytest.raises(ConfigError) as refused:
        load_fleet(*paths)
    message = str(refused.value)
    assert f"{paths[0]}: {section}.token: " in message
    assert why in message
    assert "secrets.token_urlsafe(32)" in message or "same as" in message
    assert token not in message


def test_the_metrics_token_differs_from_the_admin_token(tmp_path: Path) -> None:
    paths = write_pair(tmp_path, with_changes("metrics", token=ADMIN_TOKEN))
    with pytest.raises(ConfigError, match="metrics.token: must differ .* admin.token"):
        load_fleet(*paths)


@pytest.mark.parametrize("token", [None, "", "CHANGE_ME"])
def test_an_unset_admin_token_still_loads_with_the_admin_side_closed(
        tmp_path: Path, token: str | None) -> None:
    assert load_fleet(*write_pair(tmp_path, with_changes("admin", token=token)))


def test_the_rig_makes_strong_distinct_secrets() -> None:
    values = FleetSecrets().values()
    assert [secret_weakness(value) for value in values] == [None] * len(values)
    assert len(set(values)) == len(values)
    assert secret_weakness(strong_secret()) is None


@pytest.mark.slow
def test_a_weak_fleet_key_and_salt_load_loudly_and_keep_serving(
        servers: Callable[..., LlmaoServer], tmp_path: Path) -> None:
    fleet = {**CONFIG["fleet"], "key": WEAK_KEY, "vllm_api_salt": WEAK_SALT}
    server = servers("weak", str(tmp_path / "state.sqlite3"), fleet=fleet)
    log = server.log()
    assert "llmao-server: warning: " in log, "said at start"
    assert "fleet.key: is shorter than 32 characters" in log
    assert "fleet.vllm_api_salt: holds characters other than printable ASCII" in log
    assert "WARNING llmao_server.app: " in log, "and in the server's log"

    answer = request(server, "GET", "/vllm/config",
                     headers=box_headers(host=KNOWN, key=WEAK_KEY))
    assert answer.status == 200, "a weak key never strands the fleet"

    cookie = login(server, ADMIN_TOKEN).cookie()
    strip = request(server, "GET", "/fleet", headers={"Cookie": cookie or ""}).text
    attention = strip.split('class="attention"', 1)[1].split("</section>", 1)[0]
    assert "Weak secrets in config.yaml" in attention
    assert "fleet.key" in attention and "fleet.vllm_api_salt" in attention
    assert "token_urlsafe(32)" in attention

    server.stop()
    everything = server.log() + strip
    assert WEAK_KEY not in everything and WEAK_SALT not in everything


def test_strong_secrets_raise_no_warning(tmp_path: Path) -> None:
    fleet = load_fleet(*write_pair(tmp_path))
    assert fleet.settings.weak_secrets == ()
    assert not [w for w in fleet.warnings if "fleet.key" in w or "vllm_api_salt" in w]


@pytest.mark.parametrize("key", [
    "cl\u00e9-de-la-flotte-0123456789abcdefghijklmnop",  # long, strong-looking, not ASCII
    "fleet-key-with-a-tab\t0123456789abcdefghijklmnop",
    " fleet-key-with-a-leading-space-0123456789abcdef",
], ids=["non-ASCII", "a control character", "a leading space"])
def test_a_fleet_key_no_box_can_present_is_refused_naming_file_and_key(
        tmp_path: Path, key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_fleet(*write_pair(tmp_path, {**CONFIG, "fleet": {**CONFIG["fleet"], "key": key}}))
    message = str(refused.value)
    assert "config.yaml: fleet.key: " in message
    assert "no box can send" in message or "the server trims" in message
    assert key not in message
