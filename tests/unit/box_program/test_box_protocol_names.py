"""The box program's names of the protocol are the ones llmao's server answers and reads.

install_set.py runs alone on a box with the standard library; its build carries the core's
box_protocol.py into it, which the server imports too. A change on either side must fail
here, not on a fleet.
"""

from __future__ import annotations

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import HOST_HEADER
from ansible_collections.llmao.fleet.plugins.module_utils.models_file import RECIPE_NUMBERS
from llmao_server.boxes.box_api import ROUTES


def test_the_optional_numbers_are_the_recipe_numbers_of_models_yaml(install_set):
    assert install_set.OPTIONAL_NUMBERS == RECIPE_NUMBERS


def test_the_host_header_is_the_one_the_server_reads(install_set):
    assert install_set.HOST_HEADER == HOST_HEADER


def test_the_paths_and_methods_are_the_box_apis(install_set):
    assert "GET" in ROUTES[install_set.CONFIG_PATH][0]
    assert "POST" in ROUTES[install_set.APPLIED_PATH][0]
    assert "POST" in ROUTES[install_set.TURN_PATH][0]


def test_the_box_token_headers_are_the_ones_the_server_reads(install_set):
    from llmao_server.boxes.bindings import INSTANCE_HEADER, TOKEN_HEADER

    assert install_set.TOKEN_HEADER == TOKEN_HEADER
    assert install_set.INSTANCE_HEADER == INSTANCE_HEADER


def test_the_bootstrap_header_and_every_binding_refusal_are_the_servers(install_set):
    """Each code a binding refusal may carry has its own line on the box (what to do)."""
    from llmao_server.boxes import bindings

    if not hasattr(bindings, "BOOTSTRAP_HEADER"):
        pytest.skip("llmao-server has no enrollment yet (issue 33)")
    assert install_set.BOOTSTRAP_HEADER == bindings.BOOTSTRAP_HEADER
    assert set(bindings.REFUSALS) <= set(install_set.BINDING_REFUSALS)


def test_every_token_llmao_mints_has_the_shape_a_box_keeps_and_presents():
    """The shape is the core's box_protocol's; llmao's minting must stay inside it, or a box
    would drop the token it was handed (and refuse its bootstrap token before sending it)."""
    from ansible_collections.llmao.fleet.plugins.module_utils.box_protocol import is_box_token
    from llmao_server.boxes.bindings import new_token

    minted = [new_token() for count in range(200)]
    assert all(is_box_token(token) for token in minted)
    assert not is_box_token(minted[0][:31]) and not is_box_token(minted[0] + "=")
