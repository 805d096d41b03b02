"""Latency and preemptions from vLLM's histograms: the names of a real vLLM 0.32 answer, the
same figures as prometheus_client's own parser, quantiles of bucket deltas, unknown absent."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.llmao.fleet.plugins.module_utils.vllm_latency import (
    HISTOGRAMS,
    PREEMPTIONS,
    Cumulative,
    Latency,
    LatencyRecordError,
    bucket_quantile,
    interval_latency,
    read_latency,
)

REAL = (Path(__file__).parent / "data" / "vllm_0_32_metrics.txt").read_text()


def reference(text: str) -> tuple[dict[str, dict[float, float]], float | None]:
    """prometheus_client's reading: per histogram name its buckets summed over engines, and
    the preemption counter (its family is named without ``_total``)."""
    buckets: dict[str, dict[float, float]] = {}
    preemptions = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                by_bound = buckets.setdefault(sample.name.removesuffix("_bucket"), {})
                bound = float(sample.labels["le"])
                by_bound[bound] = by_bound.get(bound, 0.0) + sample.value
            elif sample.name == PREEMPTIONS:
                preemptions = (preemptions or 0.0) + sample.value
    return buckets, preemptions


def test_every_name_read_is_in_the_real_vllm_answer():
    families = {family.name for family in text_string_to_metric_families(REAL)}
    for figure, names in HISTOGRAMS.items():
        assert names[0] in families, f"{figure}: vLLM 0.32 exports {names[0]}"
    assert PREEMPTIONS.removesuffix("_total") in families


def test_the_figures_are_prometheus_clients():
    read = read_latency(REAL)
    buckets, preemptions = reference(REAL)
    assert set(read.histograms) == set(HISTOGRAMS)
    for figure, names in HISTOGRAMS.items():
        assert dict(read.histograms[figure]) == buckets[names[0]], figure
    assert read.preemptions_total == preemptions == 0.0
    ttft = dict(read.histograms["ttft"])
    assert (ttft[0.005], ttft[0.01], ttft[math.inf]) == (0.0, 1.0, 2.0)


def with_requests(text: str, more: dict[float, float]) -> str:
    """``text`` with ``more`` TTFT requests per bucket bound added (cumulative lines moved)."""
    lines = []
    for line in text.splitlines():
        if line.startswith("vllm:time_to_first_token_seconds_bucket{"):
            bound = float(line.split('le="')[1].split('"')[0])
            added = sum(count for at, count in more.items() if at <= bound)
            name_labels, value = line.rsplit(" ", 1)
            line = f"{name_labels} {float(value) + added}"
        elif line.startswith("vllm:num_preemptions_total{"):
            line = line.rsplit(" ", 1)[0] + " 3.0"
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_quantiles_come_from_the_deltas_not_the_totals():
    before = read_latency(REAL)
    # 10 requests since: 9 between 0.25 and 0.5 s, one between 1 and 2.5 s.
    after = read_latency(with_requests(REAL, {0.5: 9, 2.5: 1}))
    latency = interval_latency([(before, after)])
    assert latency.ttft_p50_s == pytest.approx(0.25 + 0.25 * 5 / 9)
    assert latency.ttft_p95_s == pytest.approx(1.0 + 1.5 * 0.5)
    assert latency.preemptions == 3
    # The cumulative totals would have said otherwise (the two fast requests at start).
    total_p50 = bucket_quantile(0.5, after.histograms["ttft"])
    assert total_p50 != pytest.approx(latency.ttft_p50_s)
    # Nobody asked anything else in between: unknown, never 0.
    assert latency.e2e_p50_s is None and latency.itl_p95_s is None


def test_a_restart_counts_from_zero_and_a_first_scrape_knows_nothing():
    busy = read_latency(with_requests(REAL, {0.5: 9, 2.5: 1}))
    restarted = read_latency(REAL)  # fewer requests than before: vLLM started again
    assert interval_latency([(busy, restarted)]).ttft_p50_s == pytest.approx(0.01)
    assert interval_latency([(busy, restarted)]).preemptions == 0
    assert interval_latency([(None, busy)]) == Latency()
    assert interval_latency([(busy, None)]) == Latency()


@pytest.mark.parametrize("line", [
    'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="tiny"} 9.0',
    'vllm:time_to_first_token_seconds_bucket{engine="0",le="1e400",model_name="tiny"} 9.0',
    'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny"} 1e300',
    'vllm:time_to_first_token_seconds_bucket{engine="0",le="soon",model_name="tiny"} 1.0',
])
def test_buckets_that_make_no_histogram_leave_it_unknown(line):
    """A duplicate, an absurd bound, a count out of bounds or falling, a bound not a number."""
    read = read_latency(REAL + line + "\n")
    assert "ttft" not in read.histograms
    assert "e2e" in read.histograms  # the others stand


def test_an_unreadable_answer_reads_nothing():
    assert read_latency(None) is None
    assert read_latency("vllm:num_preemptions_total{ 1\n") is None


def test_data_parallel_engines_are_summed():
    second = "\n".join(line.replace('engine="0"', 'engine="1"') for line in REAL.splitlines()
                       if line.startswith(("vllm:time_to_first_token_seconds_bucket",
                                           PREEMPTIONS)))
    read = read_latency(REAL + second + "\n")
    assert dict(read.histograms["ttft"])[math.inf] == 4.0
    assert read.preemptions_total == 0.0


def test_buckets_are_known_by_their_labels_not_their_text():
    """A bucket given twice in another order and spacing is still given twice; one bound
    written two ways by two engines is still one bucket."""
    again = 'vllm:time_to_first_token_seconds_bucket{le="0.01", model_name="tiny",engine="0"} 1.0'
    read = read_latency(REAL + again + "\n")
    assert "ttft" not in read.histograms and "e2e" in read.histograms
    second = "\n".join(line.replace('engine="0"', 'engine="1"').replace('le="0.01"', 'le="1e-2"')
                       for line in REAL.splitlines()
                       if line.startswith("vllm:time_to_first_token_seconds_bucket"))
    one = dict(read_latency(REAL).histograms["ttft"])
    two = dict(read_latency(REAL + second + "\n").histograms["ttft"])
    assert two == {bound: 2 * count for bound, count in one.items()} and 0.01 in two


def test_many_engines_cost_a_lookup_each_and_a_repeated_one_is_still_found():
    """A box may write thousands of engines (the scrape's cap allows some 40,000 lines):
    each bucket is looked up once, never compared with every earlier one of its bound."""
    engines = 20_000
    text = "".join(f'vllm:time_to_first_token_seconds_bucket{{engine="{engine}",le="+Inf",'
                   f'model_name="m"}} 1.0\n' for engine in range(engines))
    began = time.monotonic()
    assert dict(read_latency(text).histograms["ttft"]) == {math.inf: float(engines)}
    assert time.monotonic() - began < 5
    repeated = text + ('vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m",'
                       'engine="7"} 1.0\n')
    assert "ttft" not in read_latency(repeated).histograms


def test_records_survive_json_and_refuse_garbage():
    read = read_latency(REAL)
    stored = Cumulative.from_record(json.loads(json.dumps(read.record())))
    assert stored.histograms == read.histograms, "every bucket is kept, empty ones too"
    later = read_latency(with_requests(REAL, {0.5: 9, 2.5: 1}))
    assert interval_latency([(stored, later)]) == interval_latency([(read, later)])
    latency = Latency(ttft_p50_s=0.1, preemptions=2)
    assert Latency.from_record(json.loads(json.dumps(latency.record()))) == latency
    for garbage in ({"histograms": {"ttft": [["x", 1]]}},
                    {"histograms": {"ttft": [[0.1, 2], ["+Inf", 1]]}},
                    {"histograms": {"nope": []}}, {"histograms": {}, "preemptions_total": -1}):
        with pytest.raises(LatencyRecordError):
            Cumulative.from_record(garbage)
    with pytest.raises(LatencyRecordError):
        Latency.from_record({"ttft_p50_s": "fast"})


def test_a_quantile_in_the_inf_bucket_is_the_largest_bound():
    assert bucket_quantile(0.95, ((1.0, 0.0), (2.0, 1.0), (math.inf, 10.0))) == 2.0
    assert bucket_quantile(0.5, ((1.0, 0.0), (math.inf, 0.0))) is None


def test_a_models_latency_sums_its_servers_deltas():
    before = read_latency(REAL)
    fast = read_latency(with_requests(REAL, {0.5: 9}))
    slow = read_latency(with_requests(REAL, {2.5: 9}))
    model = interval_latency([(before, fast), (before, slow)])
    assert model.ttft_p50_s == pytest.approx(0.5)  # rank 9 of 18: the end of the fast bucket
    assert model.ttft_p95_s == pytest.approx(1.0 + 1.5 * (17.1 - 9) / 9)
    assert model.preemptions == 6
    assert interval_latency([(before, fast), (None, slow)]) == Latency(), \
        "a server without a figure makes the model's unknown"


def test_a_latency_out_of_bounds_is_unknown_and_the_record_still_reads():
    """A box whose bucket bound is absurd, or whose counter leaps, beside an honest one: the
    quantile or the sum is unknown, never a figure that makes llmao refuse the whole pass."""
    far = 'vllm:e2e_request_latency_seconds_bucket{engine="0",le="%s",model_name="tiny"} 2.0\n'
    before = read_latency(REAL + far % "1e300")
    after = read_latency(with_requests(REAL + far % "1e300", {0.5: 9}).replace(
        'seconds_bucket{engine="0",le="1e300",model_name="tiny"} 2.0',
        'seconds_bucket{engine="0",le="1e300",model_name="tiny"} 12.0').replace(
        'e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 2.0',
        'e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 12.0'))
    assert (1e300, 12.0) in after.histograms["e2e"], "the bound is read, the quantile is not"
    latency = interval_latency([(before, after)])
    assert latency.e2e_p50_s is None and latency.e2e_p95_s is None
    assert latency.ttft_p50_s == pytest.approx(0.375), "the others stand"
    leapt = Cumulative(after.histograms, 2.0**53)
    honest = Cumulative(after.histograms, 3.0)
    zero = Cumulative(before.histograms, 0.0)
    assert interval_latency([(zero, leapt)]).preemptions == 2**53
    model = interval_latency([(zero, leapt), (zero, honest)])
    assert model.preemptions is None
    for latency in (interval_latency([(before, after)]), model):
        assert Latency.from_record(json.loads(json.dumps(latency.record()))) == latency


def random_cumulative(rng: random.Random) -> Cumulative:
    """Buckets and a counter anywhere a scrape lets through: bounds up to 1e300, counts up
    to 2**53."""
    histograms = {}
    for figure in HISTOGRAMS:
        bounds = sorted(rng.choice([rng.uniform(0, 10), 10.0 ** rng.uniform(-3, 300)])
                        for _index in range(rng.randint(1, 5)))
        counts = sorted(float(rng.choice([0, rng.randint(0, 10), 2**53])) for _bound in bounds)
        histograms[figure] = tuple(zip([*bounds, math.inf], [*counts, counts[-1]], strict=True))
    return Cumulative(histograms, float(rng.choice([0, rng.randint(0, 10), 2**53])))


def test_any_scrapes_give_a_latency_its_record_reads_back():
    rng = random.Random(7)
    for _case in range(300):
        pairs = [(random_cumulative(rng), random_cumulative(rng))
                 for _server in range(rng.randint(1, 3))]
        latency = interval_latency(pairs)
        assert Latency.from_record(json.loads(json.dumps(latency.record()))) == latency


def test_an_old_sparse_memory_still_gives_the_interval():
    """Memories written before every bucket was kept held only the buckets whose count
    differs from the one below: the next pass still reads the interval from them."""
    read = read_latency(REAL)
    sparse = {"histograms": {"ttft": [[0.01, 1.0], [0.02, 2.0], ["+Inf", 2.0]]},
              "preemptions_total": 0.0}
    later = read_latency(with_requests(REAL, {0.5: 9, 2.5: 1}))
    assert interval_latency([(Cumulative.from_record(sparse), later)]).ttft_p50_s == \
        interval_latency([(read, later)]).ttft_p50_s


def fresh(text: str) -> str:
    """``text`` as a server that has answered nothing yet: every TTFT bucket at 0."""
    return "\n".join(line.rsplit(" ", 1)[0] + " 0.0"
                     if line.startswith("vllm:time_to_first_token_seconds_bucket{") else line
                     for line in text.splitlines()) + "\n"


def handed_on(cumulative: Cumulative) -> Cumulative:
    """A scrape as reconcile hands it between its steps: through JSON and back."""
    return Cumulative.from_record(json.loads(json.dumps(cumulative.record())))


def test_empty_buckets_below_the_requests_keep_the_lower_edge():
    """10 requests in (0.02, 0.04] after a start: p50 0.03 as Prometheus interpolates from
    0.02, never 0.02 from an edge of 0 (the empty buckets below dropped on the way)."""
    before = handed_on(read_latency(fresh(REAL)))
    after = handed_on(read_latency(with_requests(fresh(REAL), {0.04: 10})))
    assert interval_latency([(before, after)]).ttft_p50_s == pytest.approx(0.03)
    assert interval_latency([(before, after), (before, after)]).ttft_p50_s == \
        pytest.approx(0.03)


def relaid(cumulative: Cumulative, figure: str, bounds: set[float]) -> Cumulative:
    """``cumulative`` with ``figure``'s buckets at ``bounds`` only (another layout)."""
    kept = tuple((bound, count) for bound, count in cumulative.histograms[figure]
                 if bound in bounds or bound == math.inf)
    return Cumulative({**cumulative.histograms, figure: kept}, cumulative.preemptions_total)


def test_servers_with_other_layouts_merge_on_their_common_bounds():
    """One server in the fast buckets, the other slow, their layouts not the same: the
    model's figure comes from the bounds both have, and is known."""
    quick = read_latency(with_requests(fresh(REAL), {0.01: 6, 0.04: 4}))
    slow = relaid(read_latency(with_requests(fresh(REAL), {0.5: 10})), "ttft",
                  {0.01, 0.04, 0.1, 0.5, 1.0})
    zero = read_latency(fresh(REAL))
    model = interval_latency([(handed_on(zero), handed_on(quick)),
                              (handed_on(relaid(zero, "ttft", {0.01, 0.04, 0.1, 0.5, 1.0})),
                               handed_on(slow))])
    # 20 requests: 6 by 0.01, 10 by 0.04, 20 by 0.5 on the common bounds; rank 10 ends 0.04.
    assert model.ttft_p50_s == pytest.approx(0.04)
    assert model.ttft_p95_s == pytest.approx(0.1 + 0.4 * (19 - 10) / 10)
    assert model.note is None


def test_servers_with_no_bound_in_common_say_so():
    quick = read_latency(with_requests(fresh(REAL), {0.01: 6}))
    zero = read_latency(fresh(REAL))

    def coarse(count: float) -> Cumulative:
        return Cumulative({**zero.histograms, "ttft": ((0.3, count), (math.inf, count))}, 0.0)

    model = interval_latency([(zero, quick), (coarse(0.0), coarse(3.0))])
    assert model.ttft_p50_s is None and model.ttft_p95_s is None
    assert model.note == "ttft: the servers' buckets share no bound below +Inf"
    assert Latency.from_record(json.loads(json.dumps(model.record()))) == model
    with pytest.raises(LatencyRecordError):
        Latency.from_record({"note": "x" * 10_000})
