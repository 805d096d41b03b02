"""Preflight (does it fit?) and the division of the card between the servers."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .helpers import payload, server_entry

CARD = Decimal(80)


def servers(install_set, *entries):
    return install_set.validate_assignment(payload(*entries)).servers


def divide(install_set, *entries, card=CARD):
    return {name: str(value) for name, value in
            install_set.divide_memory(servers(install_set, *entries), card).items()}


# --------------------------------------------------------------------------- division


def test_two_equal_servers_get_equal_halves(install_set):
    # weights 16/80 = 0.2 each; the rest 0.5 split equally: 0.25 each
    assert divide(install_set, server_entry(0, vram_gb=16), server_entry(1, vram_gb=16)) == {
        "model-0": "0.45", "model-1": "0.45"}


def test_the_rest_is_shared_by_max_model_len(install_set):
    # weights 0.225 and 0.025; the rest 0.65 goes 4:1 by max_model_len
    assert divide(install_set,
                  server_entry(0, vram_gb=18, max_model_len=32768),
                  server_entry(1, vram_gb=2, max_model_len=8192)) == {
        "model-0": "0.745", "model-1": "0.155"}


def test_without_max_model_len_everywhere_the_rest_is_shared_equally(install_set):
    assert divide(install_set,
                  server_entry(0, vram_gb=18, max_model_len=32768),
                  server_entry(1, vram_gb=2)) == {"model-0": "0.55", "model-1": "0.35"}


def test_a_pinned_server_keeps_its_value_and_the_others_share_the_remainder(install_set):
    result = divide(install_set,
                    server_entry(0, gpu_memory_utilization=0.5),
                    server_entry(1, vram_gb=8),
                    server_entry(2, vram_gb=8))
    assert result == {"model-0": "0.5", "model-1": "0.2", "model-2": "0.2"}


def test_values_are_rounded_down_to_a_thousandth(install_set):
    # 0.9 shared 1:2:4 is 0.1285.., 0.2571.., 0.5142..: each rounded down, never up
    entries = [server_entry(i, max_model_len=2**i) for i in range(3)]
    assert divide(install_set, *entries, card=None) == {
        "model-0": "0.128", "model-1": "0.257", "model-2": "0.514"}


def test_weights_that_do_not_fit_are_a_fit_failure_naming_them(install_set):
    with pytest.raises(install_set.DoesNotFit) as failure:
        divide(install_set, server_entry(0, vram_gb=40), server_entry(1, vram_gb=36))
    message = str(failure.value)
    assert "model-0 40 GiB + model-1 36 GiB" in message
    assert "0.950 of the card (80.0 GiB)" in message and "budget" in message


def test_pins_that_leave_nothing_for_the_others_are_a_fit_failure(install_set):
    with pytest.raises(install_set.DoesNotFit, match="leaving nothing of the 0.9 budget for"):
        divide(install_set, server_entry(0, gpu_memory_utilization=0.9), server_entry(1))


def test_pins_above_the_whole_card_are_a_fit_failure(install_set):
    with pytest.raises(install_set.DoesNotFit, match="add up to 1.2, more than the whole card"):
        divide(install_set, server_entry(0, gpu_memory_utilization=0.6),
               server_entry(1, gpu_memory_utilization=0.6))


def test_a_server_left_with_nothing_is_a_fit_failure(install_set):
    with pytest.raises(install_set.DoesNotFit, match="model-1 would get no GPU memory"):
        divide(install_set, server_entry(0, vram_gb=72), server_entry(1))


@pytest.mark.parametrize("extra, expected", [
    ({}, {"model-0": "0.45", "model-1": "0.45"}),
    ({"max_model_len": 4096}, {"model-0": "0.3", "model-1": "0.6"}),
])
def test_an_unknown_card_still_shares_the_budget(install_set, extra, expected):
    entries = [server_entry(0, vram_gb=70, **({"max_model_len": 2048} if extra else {})),
               server_entry(1, vram_gb=1, **extra)]
    assert divide(install_set, *entries, card=None) == expected


def test_nothing_to_divide(install_set):
    assert divide(install_set) == {}
    assert divide(install_set, server_entry(0, gpu_memory_utilization=0.8)) == {"model-0": "0.8"}


entry_strategy = st.fixed_dictionaries({}, optional={
    "vram_gb": st.integers(1, 120),
    "max_model_len": st.integers(1, 2**20),
    "gpu_memory_utilization": st.decimals("0.001", "0.5", places=3),
})


@settings(max_examples=150, deadline=None)
@given(st.lists(entry_strategy, min_size=1, max_size=3),
       st.one_of(st.none(), st.integers(1024, 200_000).map(lambda mib: Decimal(mib) / 1024)))
def test_the_card_is_never_over_committed(install_set, extras, card):
    entries = [server_entry(i, **extra) for i, extra in enumerate(extras)]
    try:
        result = install_set.divide_memory(servers(install_set, *entries), card)
    except install_set.DoesNotFit:
        return
    pinned = sum(Decimal(str(e["gpu_memory_utilization"])) for e in extras
                 if "gpu_memory_utilization" in e)
    shared = [result[f"model-{i}"] for i, extra in enumerate(extras)
              if "gpu_memory_utilization" not in extra]
    assert all(value > 0 for value in result.values())
    assert sum(shared, Decimal(0)) <= max(Decimal("0.9") - pinned, Decimal(0))
    assert sum(result.values()) <= 1


# --------------------------------------------------------------------------- preflight


def gpu(install_set, total, free):
    """One card, as a box of one card sees it: every server on GPU 0."""
    return (install_set.Card(0, "GPU-0", "test", Decimal(total), Decimal(free)),)


def check(install_set, fleet, cards, disk, folder, applied):
    placement = install_set.place_servers(fleet, cards)
    return install_set.preflight(fleet, cards, placement, disk, folder, applied)


def test_not_enough_gpu_memory_names_the_servers_and_sizes(install_set, tmp_path):
    fleet = servers(install_set, server_entry(0, vram_gb=18), server_entry(1, vram_gb=30))
    with pytest.raises(install_set.DoesNotFit) as failure:
        check(install_set, fleet, gpu(install_set, 80, 40), Decimal(500), tmp_path, None)
    assert ("GPU 0: model-0 18 GiB + model-1 30 GiB = 48 GiB of vram_gb needed, 40.0 GiB free"
            in str(failure.value))


def test_not_enough_disk_names_the_servers_and_sizes(install_set, tmp_path):
    fleet = servers(install_set, server_entry(0, disk_gb=60), server_entry(1, disk_gb=45.5))
    with pytest.raises(install_set.DoesNotFit) as failure:
        check(install_set, fleet, None, Decimal("100.04"), tmp_path, None)
    assert (f"disk {tmp_path}: model-0 60 GiB + model-1 45.5 GiB = 105.5 GiB of disk_gb "
            "needed, 100.0 GiB free") in str(failure.value)


def test_both_shortfalls_are_told_at_once(install_set, tmp_path):
    fleet = servers(install_set, server_entry(0, vram_gb=90, disk_gb=600))
    with pytest.raises(install_set.DoesNotFit) as failure:
        check(install_set, fleet, gpu(install_set, 80, 80), Decimal(100), tmp_path, None)
    assert "vram_gb needed" in str(failure.value) and "disk_gb needed" in str(failure.value)


def test_what_fits_passes_with_notes(install_set, tmp_path):
    fleet = servers(install_set, server_entry(0, vram_gb=18, disk_gb=60))
    notes = check(install_set, fleet, gpu(install_set, 80, 79), Decimal(61), tmp_path, None)
    assert notes == ["GPU 0: vram_gb fits (79.0 GiB free)",
                     f"disk {tmp_path}: disk_gb fits (61.0 GiB free)"]


def test_unknown_hardware_or_nothing_to_check_is_not_a_failure(install_set, tmp_path):
    fleet = servers(install_set, server_entry(0, vram_gb=500, disk_gb=9000))
    notes = check(install_set, fleet, None, None, tmp_path, None)
    assert notes == ["GPU 0: free memory unknown; vram_gb not checked",
                     f"disk {tmp_path}: free space unknown; disk_gb not checked"]
    bare = servers(install_set, server_entry(0))
    assert check(install_set, bare, gpu(install_set, 8, 1), Decimal(1), tmp_path, None) == [
        "GPU 0: no vram_gb to check", f"disk {tmp_path}: no disk_gb to check"]


def test_over_an_applied_assignment_only_new_models_count_for_disk(install_set, tmp_path):
    """Running servers hold the card and their weights: free space is not theirs to claim."""
    fleet = servers(install_set, server_entry(0, vram_gb=18, disk_gb=60),
                    server_entry(1, vram_gb=18, disk_gb=30))
    applied = {"servers": [{"name": "model-0", "model": "org/model-0"}]}
    notes = check(install_set, fleet, gpu(install_set, 80, 2), Decimal(40), tmp_path, applied)
    assert notes[0].startswith("GPU 0: the applied servers hold its memory")
    assert notes[1] == f"disk {tmp_path}: disk_gb fits (40.0 GiB free)"
    with pytest.raises(install_set.DoesNotFit, match="model-1 30 GiB = 30 GiB of disk_gb"):
        check(install_set, fleet, None, Decimal(20), tmp_path, applied)


# --------------------------------------------------------------------------- nvidia-smi


def test_every_card_is_read_from_nvidia_smi_in_gib(install_set, box):
    box.cards((81559, 40960), (24576, 24000))
    found, note = install_set.query_cards()
    assert [(card.index, card.uuid, card.total_gb, card.free_gb) for card in found] == [
        (0, "GPU-00000000-test", Decimal("79.6474609375"), Decimal(40)),
        (1, "GPU-00000001-test", Decimal(24), Decimal("23.4375"))]
    assert note == ("GPU 0 (NVIDIA Test GPU): 79.6 GiB total, 40.0 GiB free\n"
                    "GPU 1 (NVIDIA Test GPU): 24.0 GiB total, 23.4 GiB free")


@pytest.mark.parametrize("script, says", [
    ("echo 'NVIDIA-SMI has failed' >&2\nexit 9\n", "nvidia-smi failed (exit 9)"),
    ("echo '[N/A], [N/A]'\n", "nvidia-smi said '[N/A], [N/A]'"),
    ("true\n", "nvidia-smi said ''"),
])
def test_a_failing_or_odd_nvidia_smi_means_unknown(install_set, box, script, says):
    box.gpu_output(script)
    found, note = install_set.query_cards()
    assert found is None and note.startswith(says) and note.endswith("GPU memory unknown")


def test_no_nvidia_smi_means_unknown(install_set, box):
    box.no_gpu()
    assert install_set.query_cards() == (None, "no nvidia-smi: GPU memory unknown")


def test_free_disk_is_measured_at_the_nearest_existing_folder(install_set, tmp_path):
    free = install_set.disk_free_gb(tmp_path / "not" / "yet" / "there")
    assert free is not None and free > 0


# --------------------------------------------------------------------------- end to end


def test_a_box_too_small_exits_1_and_writes_nothing(box, run_main):
    box.gpu(total_mib=81920, free_mib=20480)
    path = box.write_payload(payload(server_entry(0, vram_gb=12), server_entry(1, vram_gb=12)))
    outcome = run_main("--payload", str(path))
    assert outcome.rc == 1
    assert "does not fit this box" in outcome.err
    assert ("model-0 12 GiB + model-1 12 GiB = 24 GiB of vram_gb needed, 20.0 GiB free"
            in outcome.err)
    assert not any(box.conf.iterdir()) and not box.data.exists()
    assert box.ctl_calls() == []


def test_weights_beyond_the_card_exit_1_and_write_nothing(box, run_main):
    box.gpu(total_mib=24576, free_mib=24576)
    path = box.write_payload(payload(server_entry(0, vram_gb=12), server_entry(1, vram_gb=12)))
    outcome = run_main("--payload", str(path))
    assert outcome.rc == 1 and "the weights do not fit" in outcome.err
    assert not any(box.conf.iterdir())


def test_too_little_disk_exits_1_and_writes_nothing(box, run_main):
    path = box.write_payload(payload(server_entry(0, disk_gb=10**6)))
    outcome = run_main("--payload", str(path))
    assert outcome.rc == 1 and "disk_gb needed" in outcome.err
    assert not any(box.conf.iterdir())


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_without_nvidia_smi_the_box_is_refused_clearly(box, run_main, dry_run):
    """A CPU-only box: vLLM's CUDA build could not start there, so nothing is written."""
    box.no_gpu()
    path = box.write_payload(payload(server_entry(0, vram_gb=18), server_entry(1)))
    outcome = run_main(*dry_run, "--payload", str(path))
    assert outcome.rc == 1
    assert "no nvidia-smi on this box" in outcome.err and "nothing written" in outcome.err
    assert not any(box.conf.iterdir())
    assert "Traceback" not in outcome.err


def test_without_nvidia_smi_an_assignment_of_no_server_still_applies(box, run_main):
    box.no_gpu()
    outcome = run_main("--payload", str(box.write_payload(payload())))
    assert outcome.rc == 0, outcome.err
