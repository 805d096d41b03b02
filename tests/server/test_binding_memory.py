"""One token decision: what a worker's memory admits without the store
(:func:`llmao_server.boxes.bindings.admitted_by_memory`, the box API's fast path and full
path alike) is exactly what the binding rule (:func:`~llmao_server.boxes.bindings.decide`,
run by the store) admits with nothing to write, whatever the enrollment, the peer, the
instance and the time the memory does not know."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmao_server.binding_cache import BindingCache
from llmao_server.boxes.bindings import (
    ADMIT,
    FETCH,
    HOLDER_BOX,
    HOLDER_CONTROLLER,
    POST,
    Claim,
    admitted_by_memory,
    decide,
    token_hash,
)
from llmao_server.store import BindingWrite, BoxBinding, Enrollment, SqliteStore
from tests.server.fleet_pair import KNOWN

TOKENS = ("a" * 43, "b" * 43)
PEERS = st.sampled_from([None, "192.0.2.7", "198.51.100.9"])
INSTANCES = st.sampled_from([None, "i-1", "i-2"])
TIMES = st.sampled_from([0.0, 50.0, 1e10])

bindings = st.builds(
    BoxBinding, box=st.just(KNOWN),
    token_hash=st.sampled_from(["", *map(token_hash, TOKENS)]), confirmed=st.booleans(),
    bound_at=TIMES, peer=PEERS, instance=INSTANCES, seq=st.just(0),
    holder=st.sampled_from([HOLDER_BOX, HOLDER_CONTROLLER]),
    pool=st.sampled_from([None, "spot"]),
    next_claimant=st.sampled_from([None, "instance:i-1"]))
enrollments = st.none() | st.builds(
    Enrollment, box=st.just(KNOWN), token_hash=st.sampled_from(list(map(token_hash, TOKENS))),
    expires_at=TIMES, pool=st.sampled_from([None, "spot"]), created_at=st.just(0.0),
    created_by=st.just("admin"))


@st.composite
def calls(draw: st.DrawFn) -> tuple[Claim, str, str | None]:
    """A box's call as the box API makes it (a bootstrap token only on a fetch), with the
    token and bootstrap token it presents."""
    call = draw(st.sampled_from([FETCH, POST]))
    presented = draw(st.sampled_from(TOKENS))
    bootstrap = draw(st.none() | st.sampled_from(TOKENS)) if call == FETCH else None
    claim = Claim(KNOWN, call, draw(PEERS), draw(INSTANCES), token_hash(presented),
                  None if bootstrap is None else token_hash(bootstrap), draw(st.booleans()),
                  draw(TIMES), token_hash("n" * 43))
    return claim, presented, bootstrap


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BindingCache]:
    store = SqliteStore(str(Path(tmp_path_factory.mktemp("memory")) / "state.sqlite3"))
    cache = BindingCache(store, interval_s=3600)
    yield cache
    cache.close()
    store.close()


def held_now(cache: BindingCache, binding: BoxBinding) -> BoxBinding:
    """``binding`` written by the store (as any worker's decision writes it) and read back
    into this worker's memory."""
    cache.store.decide_binding(KNOWN, lambda _held, _enrolled: (BindingWrite(binding), None))
    cache.refresh()
    held = cache.held(KNOWN)
    assert held is not None and held.token_hash == binding.token_hash
    return held


@settings(max_examples=300, deadline=None)
@given(binding=bindings, call=calls(), enrollment=enrollments)
def test_memory_admits_exactly_what_the_rule_admits_without_a_write(
        memory: BindingCache, binding: BoxBinding, call: tuple[Claim, str, str | None],
        enrollment: Enrollment | None) -> None:
    claim, presented, bootstrap = call
    held = held_now(memory, binding)
    expected = decide(claim, held, enrollment) == (None, ADMIT)
    # A call of the same token without a bootstrap token first: the memory may now
    # remember the token on this binding, and must still answer the call below as the rule.
    admitted_by_memory(memory, KNOWN, POST, presented)
    assert admitted_by_memory(memory, KNOWN, claim.call, presented, bootstrap) == expected
    assert admitted_by_memory(memory, KNOWN, claim.call, presented, bootstrap) == expected


def test_a_bootstrap_token_is_never_the_memory_s_to_decide(memory: BindingCache) -> None:
    """A confirmed binding's own token with a bootstrap token: the rule redeems the bootstrap
    token against the enrollment (the store's), so the memory admits nothing, even a token it
    remembers."""
    token = TOKENS[0]
    held_now(memory, BoxBinding(KNOWN, token_hash(token), True, 1.0, None, None, 0))
    assert admitted_by_memory(memory, KNOWN, FETCH, token)
    assert memory.admits(KNOWN, token)
    assert not admitted_by_memory(memory, KNOWN, FETCH, token, TOKENS[1])
