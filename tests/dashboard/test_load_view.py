"""The load on the fleet page: per server now, per model now and over the last hours.

The pass of ``tests/server/loaded_pass.py`` (one server oversized, one model
saturated, one server healthy, one never scraped) and a few hours of history
in the store; the page is read through Flask's test client.
"""

from __future__ import annotations

import re
import time

import pytest
from flask import Flask
from flask.testing import FlaskClient

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet, load_fleet
from llmao_server.state import ServerState, app_state
from llmao_server.store import LoadSample, ReconcilePass
from llmao_server.web.charts import BOTTOM, HEIGHT, LEFT, TOP, line_chart, nice_ceiling
from llmao_server.web.fleet_view import CHART_MIN_FIT_S, CHART_SPAN_S, Observed, build_page
from tests.dashboard.sessions import log_in
from tests.server.fleet_pair import KNOWN, LEGACY, OTHER_KNOWN, write_pair
from tests.server.loaded_pass import a_pass

STEP_S = 600.0


def with_history(state: ServerState, now: float, passes: int = 12) -> ReconcilePass:
    """``passes`` earlier passes ten minutes apart (waiting growing), then the pass itself."""
    record = a_pass(now)
    for index in range(passes, 0, -1):
        at = record.pass_at - index * STEP_S
        models = {name: {**load, "requests_waiting": (load.get("requests_waiting") or 0)
                         and passes - index}
                  for name, load in record.models.items()}
        state.store.record_pass(ReconcilePass(at, record.verdicts, record.drift, at, models,
                                              record.boxes))
    state.store.record_pass(record)
    return record


def model_card(html: str, model: str) -> str:
    found = re.search(rf'<article class="model[^"]*" data-model="{model}">.*?</article>', html,
                      flags=re.S)
    assert found, f"no card for {model}"
    return found.group(0)


def server_row(html: str, box: str, name: str) -> str:
    for row in re.findall(r'<tr class="server".*?</tr>', html, flags=re.S):
        if f'data-box="{box}"' in row and f"<td>{name}</td>" in row:
            return row
    raise AssertionError(f"no row for {name} on {box}")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    return load_fleet(*write_pair(tmp_path_factory.mktemp("fleet")))


@pytest.fixture
def page_html(app: Flask, client: FlaskClient) -> str:
    with_history(app_state(app), time.time())
    assert log_in(client).status_code == 302
    answer = client.get("/fleet")
    assert answer.status_code == 200
    return answer.get_data(as_text=True)


def test_each_server_shows_its_kv_usage_queue_and_rate(page_html: str) -> None:
    gemma = server_row(page_html, KNOWN, "gemma")
    assert re.search(r'class="num kv"[^>]*>25%.*oversized', gemma, flags=re.S)
    assert ">2 / 0<" in gemma and ">12.5<" in gemma
    qwen = server_row(page_html, KNOWN, "qwen")
    assert ">97%<" in qwen
    assert "2 / 7" in qwen and "saturated" in qwen
    stalled = server_row(page_html, OTHER_KNOWN, "qwen")  # never scraped: dashes, not zeros
    assert re.findall(r'<td class="num (?:kv|queue|rate)">(.*?)</td>', stalled, flags=re.S) \
        == ['<span class="muted">—</span>', '<span class="muted">—</span>', "—"]
    assert ">31%<" in server_row(page_html, LEGACY, "gemma")


def test_each_model_shows_capacity_load_cost_and_a_chart(page_html: str) -> None:
    gemma = model_card(page_html, "gemma")
    for shown in ('class="healthy">2 / 2<', 'class="capacity">2<', 'class="load">4 / 0<',
                  'class="rate">52.5<', 'class="cost">1.00<', 'class="per-million">5.29<'):
        assert shown in gemma
    qwen = model_card(page_html, "qwen")
    assert 'class="capacity">—<' in qwen and 'class="cost">—<' in qwen  # unknown, not 0
    assert "saturated" in qwen
    chart = re.search(r"<svg class=\"chart\".*?</svg>", qwen, flags=re.S).group(0)
    waiting = re.findall(r'<polyline class="line requests_waiting" points="([^"]+)"', chart)
    assert len(waiting) == 1 and len(waiting[0].split()) == 13  # 12 earlier passes and now
    assert not re.findall(r'class="line capacity"', chart)  # qwen's capacity is unknown
    assert "<script" not in chart and "http" not in chart.replace("http://www.w3.org", "")


def test_latency_and_preemptions_on_model_cards_and_server_rows(page_html: str) -> None:
    """The last interval's p50 / p95 (loaded_pass.LATENCY); unknown is a dash, never 0."""
    gemma = model_card(page_html, "gemma")
    for shown in ('class="ttft">50 ms / 200 ms<', 'class="e2e">1.5 s / —<',
                  'class="itl">20 ms / 40 ms<', 'class="preemptions">1<'):
        assert shown in gemma
    qwen = model_card(page_html, "qwen")
    assert 'class="ttft">— / —<' in qwen and 'class="preemptions">—<' in qwen
    row = server_row(page_html, KNOWN, "gemma")
    assert re.search(r'class="num latency" title="TTFT p50 50 ms, E2E p50 1.5 s, ITL p50 / p95 '
                     r'20 ms / 40 ms, 1 preemption\(s\)">200 ms / —<', row)
    assert '<td class="num latency">— / —</td>' in server_row(page_html, OTHER_KNOWN, "qwen")


def test_the_strip_says_what_to_change(page_html: str) -> None:
    strip = re.search(r'<section class="attention".*?</section>', page_html, flags=re.S).group(0)
    oversized = re.search(r'<article class="problem oversized">.*?</article>', strip,
                          flags=re.S).group(0)
    assert f"{KNOWN} gemma :8001" in oversized
    assert "serves max_model_len 32768, its KV cache holds 2048 tokens" in oversized
    assert "Lower max_model_len" in oversized and "vram_gb" in oversized
    saturated = re.search(r'<article class="problem saturated">.*?</article>', strip,
                          flags=re.S).group(0)
    assert "qwen" in saturated and "needs" in saturated and "another box" in saturated
    assert "gemma" not in saturated


def test_a_pass_without_loads_shows_no_models_and_no_load_problems(fleet: Fleet) -> None:
    """A reconcile older than the metrics: its verdicts only."""
    record = a_pass(1_000_000.0)
    bare = {key: {k: v for k, v in verdict.items() if k in ("state", "reason", "box", "name")}
            for key, verdict in record.verdicts.items()}
    page = build_page(fleet, Observed(verdicts=bare, pass_at=record.pass_at), 1_000_000.0)
    assert page.models == ()
    assert not {"oversized", "saturated"} & {problem.kind for problem in page.problems}
    loads = [row["load"] for row in page.table()["servers"]]
    assert all(load is None or (load["metrics"] is None and load["oversized"] is None)
               for load in loads)


def test_the_chart_keeps_to_its_hours_and_breaks_at_unknown_figures(fleet: Fleet) -> None:
    now = 1_000_000.0
    record = a_pass(now)
    history = [LoadSample(now - CHART_SPAN_S - 60, {}, {"gemma": {"requests_running": 99}}),
               *(LoadSample(now - minutes * 60, {}, {"gemma": {
                   "requests_running": None if minutes == 30 else 4, "capacity": 2}})
                 for minutes in (50, 40, 30, 20, 10))]
    page = build_page(fleet, Observed(verdicts=record.verdicts, models=record.models,
                                      history=history), now)
    (gemma,) = [panel for panel in page.models if panel.name == "gemma"]
    lines = {line.name: line.segments for line in gemma.chart.lines}
    assert len(lines["requests_running"]) == 2  # broken where the figure was unknown
    assert len(lines["capacity"]) == 1
    assert [label for _, label in gemma.chart.y_ticks] == ["0", "2.5", "5"]  # 99 is too old


def test_the_axis_top_is_a_round_number() -> None:
    assert [nice_ceiling(v) for v in (0, 0.4, 3, 7, 12, 150, 5000)] == [1, 1, 5, 10, 20, 200,
                                                                          5000]
    assert line_chart({"x": []}, 0.0, 60.0).empty


def test_an_absurd_figure_never_overflows_the_chart() -> None:
    # One box's figure near the largest float, one past it (a whole number no float holds),
    # and a text: the chart draws what it can place and never raises (issue 18, item 6).
    assert nice_ceiling(1.7e308) == 1.7e308 and nice_ceiling(9e307) == 1e308
    chart = line_chart({"x": [(0.0, 1.7e308), (30.0, 10**401), (45.0, "3"), (60.0, 2.0)]},
                       0.0, 60.0)
    segments = chart.lines[0].segments
    assert len(segments) == 2   # broken where the figure cannot be placed
    assert all("nan" not in segment and "inf" not in segment for segment in segments)


def first_x(chart) -> float:
    return min(float(point.split(",")[0]) for line in chart.lines for segment in line.segments
               for point in segment.split())


@pytest.mark.parametrize(("window_s", "starts_at_left"), [(None, True), (3600.0, False)])
def test_the_chart_fits_the_data_unless_a_window_is_picked(fleet: Fleet, window_s,
                                                           starts_at_left) -> None:
    """Twenty minutes of samples fill the fitted chart from its left edge; picked, the last
    hour leaves the forty minutes before them empty."""
    now = 1_000_000.0
    record = a_pass(now)
    history = [LoadSample(now - minutes * 60, {}, {"gemma": {"requests_running": 3}})
               for minutes in (20, 10, 0)]
    page = build_page(fleet, Observed(verdicts=record.verdicts, models=record.models,
                                      history=history), now, window_s=window_s)
    (gemma,) = [panel for panel in page.models if panel.name == "gemma"]
    assert (first_x(gemma.chart) == LEFT) is starts_at_left
    start = now - (window_s or 20 * 60)
    assert gemma.chart.x_ticks[0][1] == time.strftime("%H:%M", time.gmtime(start))


def test_a_fitted_chart_spans_a_few_minutes_at_least(fleet: Fleet) -> None:
    now = 1_000_000.0
    record = a_pass(now)
    page = build_page(fleet, Observed(verdicts=record.verdicts, models=record.models, history=[
        LoadSample(now - 60, {}, {"gemma": {"requests_running": 3}})]), now)
    (gemma,) = [panel for panel in page.models if panel.name == "gemma"]
    assert first_x(gemma.chart) > LEFT  # the minute-old sample is not at the left edge
    assert gemma.chart.x_ticks[0][1] == time.strftime("%H:%M",
                                                      time.gmtime(now - CHART_MIN_FIT_S))


def test_each_model_has_a_kv_cache_chart_of_its_fullest_server(page_html: str) -> None:
    """The history keeps each model's fullest KV cache; the card draws it in percent."""
    charts = re.findall(r'<svg class="chart".*?</svg>', model_card(page_html, "qwen"), flags=re.S)
    assert len(charts) == 2
    kv = charts[1]
    assert "KV cache" in kv and ">100%<" in kv and ">50%<" in kv
    (points,) = re.findall(r'<polyline class="line kv_cache_usage_ratio" points="([^"]+)"', kv)
    assert len(points.split()) == 13
    # 97 % of the chart's height above its bottom: qwen's one scraped server.
    ys = {float(point.split(",")[1]) for point in points.split()}
    assert ys == {round(TOP + (HEIGHT - TOP - BOTTOM) * (1 - 0.97), 1)}


def test_the_window_links_pick_the_charts_hours(app: Flask, client: FlaskClient) -> None:
    with_history(app_state(app), time.time(), passes=3)
    assert log_in(client).status_code == 302
    fitted = client.get("/fleet").get_data(as_text=True)
    assert re.search(r'<a href="/fleet" aria-current="true">fit, up to 6 h</a>', fitted)
    assert 'href="/fleet?window=24h"' in fitted
    picked = client.get("/fleet?window=24h&q=gemma").get_data(as_text=True)
    assert re.search(r'<a href="/fleet\?window=24h&amp;q=gemma" aria-current="true">last 24h',
                     picked)
    assert '<input type="hidden" name="window" value="24h">' in picked
    # An unknown window is the fitted one.
    assert 'aria-current="true">fit' in client.get("/fleet?window=7y").get_data(as_text=True)


def test_a_model_whose_servers_cannot_be_added_says_why(app: Flask, client: FlaskClient) -> None:
    """Servers whose buckets share no bound: the model's TTFT is unknown, and its title says
    why (vllm_latency's note), where a bare dash would look like no traffic."""
    record = a_pass(time.time())
    note = "ttft: the servers' buckets share no bound below +Inf"
    models = {**record.models, "qwen": {**record.models["qwen"], "latency": {"note": note}}}
    app_state(app).store.record_pass(ReconcilePass(record.pass_at, record.verdicts,
                                                   record.drift, record.pass_at, models,
                                                   record.boxes))
    assert log_in(client).status_code == 302
    qwen = model_card(client.get("/fleet").get_data(as_text=True), "qwen")
    assert (f'class="ttft" title="unknown for the model: {note}">— / —<'
            .replace("'", "&#39;")) in qwen
