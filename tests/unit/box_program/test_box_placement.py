"""Servers placed on the cards of a box: the rule, its refusals, and what the programs get.

The property tests compare the placement with an exhaustive search over every way to give each
server its cards: the box must find a placement exactly when one exists, never over-commit a
card, and give the same answer every time.
"""

from __future__ import annotations

import itertools
import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .helpers import payload, server_entry

GIB = 1024


def cards(install_set, *totals_gib: float):
    """Cards of these totals (GiB), all free, indexed in order."""
    return tuple(install_set.Card(i, f"GPU-{i}", "test", Decimal(str(total)), Decimal(str(total)),
                                  int(total * GIB)) for i, total in enumerate(totals_gib))


def servers(install_set, *entries):
    return install_set.validate_assignment(payload(*entries)).servers


def place(install_set, fleet, box_cards):
    """The placement and the division, as the box program makes them (DoesNotFit if none)."""
    placement = install_set.place_servers(fleet, box_cards)
    return placement, install_set.divide_cards(fleet, box_cards, placement)


# --------------------------------------------------------------------------- examples


def test_a_70b_model_on_two_cards_beside_a_small_model_on_a_third(install_set):
    fleet = servers(install_set, server_entry(0, name="llama-70b", gpus=2, vram_gb=36),
                    server_entry(1, name="qwen-8b", vram_gb=17))
    placement, memory = place(install_set, fleet, cards(install_set, 80, 80, 80))
    assert placement == {"llama-70b": (0, 1), "qwen-8b": (2,)}
    assert {name: str(value) for name, value in memory.items()} == {
        "llama-70b": "0.9", "qwen-8b": "0.9"}


def test_more_cards_go_first_then_row_order_and_empty_cards_are_preferred(install_set):
    fleet = servers(install_set, server_entry(0, vram_gb=10), server_entry(1, gpus=2, vram_gb=10),
                    server_entry(2, vram_gb=10))
    placement, _ = place(install_set, fleet, cards(install_set, 24, 24, 24, 24))
    assert placement == {"model-1": (0, 1), "model-0": (2,), "model-2": (3,)}


def test_servers_share_cards_while_the_division_holds_on_each(install_set):
    fleet = servers(install_set, server_entry(0, gpus=2, vram_gb=30, max_model_len=8192),
                    server_entry(1, vram_gb=20, max_model_len=8192))
    placement, memory = place(install_set, fleet, cards(install_set, 80, 80))
    assert placement == {"model-0": (0, 1), "model-1": (0,)}
    # card 0 holds both: weights 0.375 and 0.25, the rest 0.275 shared 1:1; card 1 would give
    # model-0 all of 0.9, but one fraction serves all its cards: the smaller share
    assert {name: str(value) for name, value in memory.items()} == {
        "model-0": "0.512", "model-1": "0.387"}


def test_a_server_is_moved_when_the_preferred_cards_lead_nowhere(install_set):
    # The first choice puts model-0 on the big card, where model-1 then finds no room beside
    # it, nor on the small card: model-0 takes the small card instead.
    fleet = servers(install_set, server_entry(0, vram_gb=20), server_entry(1, vram_gb=60))
    placement, _ = place(install_set, fleet, cards(install_set, 80, 24))
    assert placement == {"model-0": (1,), "model-1": (0,)}


def test_too_few_cards_is_refused_naming_the_server_and_the_cards(install_set):
    fleet = servers(install_set, server_entry(0, name="llama-70b", gpus=4, vram_gb=20))
    with pytest.raises(install_set.DoesNotFit) as refused:
        place(install_set, fleet, cards(install_set, 80, 80))
    assert str(refused.value) == ("llama-70b needs 4 cards (gpus), this box has 2: GPU 0 80.0 "
                                  "GiB, GPU 1 80.0 GiB; nothing written")


def test_no_fit_is_refused_naming_the_server_the_cards_and_the_numbers(install_set):
    fleet = servers(install_set, server_entry(0, name="big", gpus=2, vram_gb=40),
                    server_entry(1, name="small", vram_gb=20))
    with pytest.raises(install_set.DoesNotFit) as refused:
        place(install_set, fleet, cards(install_set, 48, 48))
    message = str(refused.value)
    assert "no placement of the servers on this box's cards" in message
    assert "big would take GPU 0, GPU 1" in message
    assert "small needs 1 card(s), vram_gb 20 GiB per card; it cannot join:" in message
    assert ("GPU 0 (48.0 GiB, with big): the weights do not fit: big 40 GiB + small 20 GiB"
            in message)


def test_one_card_is_judged_by_the_division_as_before(install_set):
    fleet = servers(install_set, server_entry(0, vram_gb=12), server_entry(1, vram_gb=12))
    box_cards = cards(install_set, 24)
    assert install_set.place_servers(fleet, box_cards) == {"model-0": (0,), "model-1": (0,)}
    with pytest.raises(install_set.DoesNotFit, match="the weights do not fit"):
        install_set.divide_cards(fleet, box_cards, {"model-0": (0,), "model-1": (0,)})


def test_unknown_cards_place_nothing_and_divide_as_before(install_set):
    fleet = servers(install_set, server_entry(0, gpus=2), server_entry(1))
    assert install_set.place_servers(fleet, None) == {}
    assert {k: str(v) for k, v in install_set.divide_cards(fleet, None, {}).items()} == {
        "model-0": "0.45", "model-1": "0.45"}


def test_sixteen_cards_of_sixteen_sizes_are_searched_by_kind_not_one_by_one(install_set,
                                                                            monkeypatch):
    """Cards that hold the same groups of servers are alike whatever their size: without that,
    refusing this box tried every 8 of 16 cards for each wide server (about 28 s)."""
    checks = []
    real = install_set.card_problem
    monkeypatch.setattr(install_set, "card_problem",
                        lambda servers, card: checks.append(card) or real(servers, card))
    fleet = servers(install_set, server_entry(0, gpus=8, vram_gb=30),
                    server_entry(1, gpus=8, vram_gb=30), server_entry(2, vram_gb=30))
    with pytest.raises(install_set.DoesNotFit, match="no placement"):
        install_set.place_servers(fleet, cards(install_set, *range(40, 56)))
    assert len(checks) < 1000


# --------------------------------------------------------------------------- properties

TOTALS = [Decimal(16), Decimal(24), Decimal(48), Decimal(80)]
recipes = st.fixed_dictionaries({"gpus": st.integers(1, 4)}, optional={
    "vram_gb": st.sampled_from([2, 8, 14, 20, 30, 40, 60]),
    "max_model_len": st.sampled_from([4096, 32768]),
    "gpu_memory_utilization": st.sampled_from([0.2, 0.45, 0.7]),
})


def exists_placement(install_set, fleet, box_cards) -> bool:
    """Whether any way of giving each server its cards holds the division on every card."""
    indices = [card.index for card in box_cards]
    if any(server.gpus > len(indices) for server in fleet):
        return False
    options = [itertools.combinations(indices, server.gpus) for server in fleet]
    for choice in itertools.product(*options):
        if all(install_set.card_problem(tuple(s for s, chosen in zip(fleet, choice, strict=True)
                                              if card.index in chosen), card) is None
               for card in box_cards):
            return True
    return False


@settings(max_examples=250, deadline=None)
@given(st.lists(recipes, min_size=1, max_size=3),
       st.lists(st.sampled_from(TOTALS), min_size=1, max_size=6))
def test_the_placement_holds_is_deterministic_and_refuses_only_when_none_exists(
        install_set, recipe_list, totals):
    fleet = servers(install_set, *(server_entry(i, **recipe)
                                   for i, recipe in enumerate(recipe_list)))
    box_cards = cards(install_set, *totals)
    try:
        placement, memory = place(install_set, fleet, box_cards)
    except install_set.DoesNotFit:
        assert not exists_placement(install_set, fleet, box_cards)
        return
    assert exists_placement(install_set, fleet, box_cards)
    assert place(install_set, fleet, box_cards) == (placement, memory)
    for server in fleet:
        chosen = placement[server.name]
        assert len(chosen) == len(set(chosen)) == server.gpus
        assert set(chosen) <= {card.index for card in box_cards}
    for card in box_cards:
        on = [server for server in fleet if card.index in placement[server.name]]
        pinned = sum((s.gpu_memory_utilization for s in on if s.gpu_memory_utilization),
                     Decimal(0))
        shared = sum((memory[s.name] for s in on if not s.gpu_memory_utilization), Decimal(0))
        assert pinned + shared <= 1 and shared <= max(Decimal("0.9") - pinned, Decimal(0))
        weights = sum((s.vram_gb for s in on if s.vram_gb and not s.gpu_memory_utilization),
                      Decimal(0))
        assert weights <= (Decimal("0.9") - pinned) * card.total_gb


# --------------------------------------------------------------------------- programs


def test_each_program_gets_its_cards_and_the_tensor_parallel_size(box, run_main):
    box.cards((81920, 81920), (81920, 81920), (81920, 81920))
    doc = payload(server_entry(0, gpus=2, vram_gb=36), server_entry(1, vram_gb=17))
    outcome = run_main("--payload", str(box.write_payload(doc)))
    assert outcome.rc == 0, outcome.err
    big, small = box.program("model-0").read_text(), box.program("model-1").read_text()
    assert ',CUDA_DEVICE_ORDER="PCI_BUS_ID",CUDA_VISIBLE_DEVICES="0,1"\n' in big
    assert "--gpu-memory-utilization 0.9 --tensor-parallel-size 2\n" in big
    assert ',CUDA_DEVICE_ORDER="PCI_BUS_ID",CUDA_VISIBLE_DEVICES="2"\n' in small
    assert "--tensor-parallel-size" not in small
    assert "placement: model-0 on GPU 0, GPU 1\nplacement: model-1 on GPU 2\n" in outcome.out
    record = json.loads(box.record.read_text())
    assert record["placement"] == {"model-0": [0, 1], "model-1": [2]}
    assert record["cards"][2] == {"index": 2, "name": "NVIDIA Test GPU",
                                  "memory_total_mib": 81920, "uuid": "GPU-00000002-test"}


def test_parallel_sizes_in_args_are_kept_and_nothing_is_added(box, run_main):
    box.cards(*[(24576, 24576)] * 4)
    doc = payload(server_entry(0, gpus=4, args=["-tp", "2", "--pipeline-parallel-size=2"]))
    assert run_main("--payload", str(box.write_payload(doc))).rc == 0
    text = box.program("model-0").read_text()
    assert text.count("parallel-size") == 1 and "-tp 2 --pipeline-parallel-size=2\n" in text
    assert 'CUDA_VISIBLE_DEVICES="0,1,2,3"' in text


def test_one_card_writes_no_device_variables(box, run_main):
    doc = payload(server_entry(0, gpus=1), server_entry(1))
    assert run_main("--payload", str(box.write_payload(doc))).rc == 0
    assert all("CUDA_" not in box.program(name).read_text() for name in ("model-0", "model-1"))


def test_when_nvidia_smi_fails_a_wide_server_runs_unplaced_and_says_so(box, run_main):
    # A box without nvidia-smi at all is refused (no CUDA driver); one whose nvidia-smi
    # fails has cards that are merely unknown.
    box.gpu_output("exit 9\n")
    outcome = run_main("--payload", str(box.write_payload(payload(server_entry(0, gpus=2)))))
    assert outcome.rc == 0, outcome.err
    assert "cards unknown: nothing placed" in outcome.out
    text = box.program("model-0").read_text()
    assert "--tensor-parallel-size 2" in text and "CUDA_VISIBLE_DEVICES" not in text


def test_too_few_cards_exits_1_and_writes_nothing(box, run_main):
    box.cards((81920, 81920), (81920, 81920))
    doc = payload(server_entry(0, name="llama-405b", gpus=8, vram_gb=60))
    outcome = run_main("--payload", str(box.write_payload(doc)))
    assert outcome.rc == 1
    assert "llama-405b needs 8 cards (gpus), this box has 2" in outcome.err
    assert not any(box.conf.iterdir()) and box.ctl_calls() == []


def test_free_memory_is_checked_per_card_on_a_fresh_box(box, run_main):
    box.cards((81920, 81920), (81920, 20480))
    doc = payload(server_entry(0, gpus=2, vram_gb=30))
    outcome = run_main("--payload", str(box.write_payload(doc)))
    assert outcome.rc == 1
    assert "GPU 1: model-0 30 GiB = 30 GiB of vram_gb needed, 20.0 GiB free" in outcome.err
    assert "GPU 0" not in outcome.err.split("nothing written")[1]
    assert not any(box.conf.iterdir())


def test_a_rerun_changes_nothing_and_a_new_placement_rewrites_only_the_moved(box, run_main):
    box.cards(*[(24576, 24576)] * 4)
    pinned = {"gpu_memory_utilization": 0.3}
    first = payload(server_entry(0, gpus=2, **pinned), server_entry(1, **pinned),
                    server_entry(2, **pinned))
    assert run_main("--payload", str(box.write_payload(first))).rc == 0
    before = box.snapshot()
    assert run_main("--payload", str(box.write_payload(first))).rc == 0
    assert box.snapshot() == before and box.ctl_calls() == ["reread", "update"]
    # model-1 now spans two cards: it takes GPU 2 and 3, model-2 moves beside model-0
    second = payload(server_entry(0, gpus=2, **pinned), server_entry(1, gpus=2, **pinned),
                     server_entry(2, **pinned), revision="rev-0002")
    outcome = run_main("--payload", str(box.write_payload(second)), "--json")
    assert outcome.rc == 0, outcome.err
    changed = {entry["name"]: entry["file"] for entry in json.loads(outcome.out)["programs"]}
    assert changed == {"model-0": "unchanged", "model-1": "updated", "model-2": "updated"}
    assert 'CUDA_VISIBLE_DEVICES="0"' in box.program("model-2").read_text()
