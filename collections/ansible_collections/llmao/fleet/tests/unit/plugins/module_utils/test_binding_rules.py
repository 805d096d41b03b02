# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which bindings a provider listing says outlived their box (docs/box-identity.md)."""

from __future__ import annotations

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.binding_rules import replaced_bindings
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    ListedBox,
    index_listings,
)
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import (
    LlmaoAdminError,
    parse_observations,
)

LISTINGS = index_listings(["vast", "runpod"], [
    ListedBox("vast", ("4343", "203.0.113.10"), "203.0.113.10"),
    ListedBox("vast", ("5001", "203.0.113.50"), "203.0.113.50"),
    ListedBox("vast", ("5002", "203.0.113.50"), "203.0.113.50"),
    ListedBox("runpod", ("pod-b",), ""),
], {})


def test_a_name_listed_as_another_instance_is_released() -> None:
    [replaced] = replaced_bindings({"203.0.113.10": "4242"}, LISTINGS)
    assert replaced.record() == {"box": "203.0.113.10", "bound_instance": "4242",
                                 "listed": "vast 4343"}
    assert "vast 4343" in replaced.why and "4242" in replaced.why


@pytest.mark.parametrize("bound", [
    {"203.0.113.10": "4343"},  # the same instance: still its box
    {"203.0.113.10": None},  # the box never said which instance it is
    {"203.0.113.99": "4242"},  # not listed (gone, or the listing failed): nothing to go by
    {"203.0.113.50": "4242"},  # ambiguous: two instances share the address
    {"pod-b": "pod-b"},
])
def test_nothing_else_is_released(bound: dict) -> None:
    assert replaced_bindings(bound, LISTINGS) == []


def test_the_observations_carry_each_bound_box_and_its_instance() -> None:
    document = {"now": 1.0, "boxes": {}, "verdicts": {}, "bindings": {
        "a": {"state": "confirmed", "bound_at": 1.0, "peer": "192.0.2.1", "instance": "42"},
        "b": {"state": "pending", "bound_at": 1.0, "peer": None, "instance": None}}}
    assert parse_observations(document).bindings == {"a": "42", "b": None}
    assert parse_observations({**document, "bindings": {}}).bindings == {}
    with pytest.raises(LlmaoAdminError, match="bindings"):
        parse_observations({**document, "bindings": ["a"]})
