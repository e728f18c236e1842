"""The engine's serving figures at their edges: PromQL's histogram_quantile on small and odd
histograms, the difference between two scrapes, the rounding of the figures (issue 36's
mutation pass)."""

from __future__ import annotations

import logging
import math
import socket

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from kyai.evaluation import ChatResult
from kyai.evaluation._servermetrics import (
    HistogramState,
    Snapshot,
    _figures,
    histogram_quantile,
    parse_metrics,
    scrape,
    server_block,
)
from kyai.evaluation._serving import ServingRecorder

INF = math.inf


def test_one_finite_bucket_and_infinity_is_a_histogram() -> None:
    # Two bounds are enough: rank 2 of 4 in [0, 1] interpolates to 0.5.
    assert histogram_quantile(0.5, {1.0: 4, INF: 4}) == 0.5


def test_one_observation_is_interpolated_in_its_bucket() -> None:
    assert histogram_quantile(0.5, {0.1: 1, INF: 1}) == pytest.approx(0.05)


def test_a_falling_cumulative_count_is_raised_from_the_second_bucket_on() -> None:
    # Counts 2, 1, 4 are read as 2, 2, 4 (PromQL forces monotonicity): the 3rd of 4
    # observations lies halfway through (0.2, 0.4].
    assert histogram_quantile(0.75, {0.1: 2, 0.2: 1, 0.4: 4, INF: 4}) == pytest.approx(0.3)


def test_the_rank_is_found_in_the_first_bucket_whose_count_reaches_it() -> None:
    # q = 1: every observation is at most 0.1 (PromQL: the first count >= the rank).
    assert histogram_quantile(1.0, {0.1: 2, 0.2: 2, INF: 2}) == pytest.approx(0.1)


def test_a_quantile_of_zero_on_an_empty_first_bucket_is_its_bound() -> None:
    assert histogram_quantile(0.0, {0.1: 0, 0.2: 2, INF: 2}) == 0.1


def test_figures_are_milliseconds_to_three_decimals() -> None:
    state = HistogramState({0.001: 0, 0.002: 1, INF: 1}, total=0.00123456, count=1)
    figures = _figures(state)
    assert figures == {"mean": 1.235, "p50": 1.5, "p90": 1.9, "p99": 1.99}
    # The 2nd of 4 observations, a third of the way through (1, 2] ms.
    thirds = HistogramState({0.001: 1, 0.002: 4, INF: 4}, total=0.001, count=3)
    assert _figures(thirds)["mean"] == 0.333 and _figures(thirds)["p50"] == 1.333


def test_no_observation_and_no_usable_buckets_give_no_figures() -> None:
    assert _figures(HistogramState({0.1: 0, INF: 0}, total=0.0, count=0)) == dict.fromkeys(
        ("mean", "p50", "p90", "p99")
    )
    no_infinity = _figures(HistogramState({0.1: 1}, total=0.05, count=1))
    assert no_infinity == {"mean": 50.0, "p50": None, "p90": None, "p99": None}


def test_the_difference_of_two_scrapes() -> None:
    before = HistogramState({0.1: 2, INF: 3}, total=0.5, count=3)
    # No request in between: nothing, not everything since the engine started.
    same = before.minus(HistogramState({0.1: 2, INF: 3}, total=0.5, count=3))
    assert (same.count, same.total, same.buckets) == (0, 0.0, {0.1: 0, INF: 0})
    assert before.minus(None) is before
    # A bucket that appeared since the first scrape counts from zero.
    grown = HistogramState({0.1: 4, 0.2: 5, INF: 6}, total=1.0, count=6).minus(before)
    assert (grown.count, grown.buckets) == (3, {0.1: 2, 0.2: 5, INF: 3})
    # A bucket the first scrape had and the second lacks: a restart, so the second is whole.
    restarted = HistogramState({0.2: 5, INF: 6}, total=1.0, count=6)
    assert restarted.minus(HistogramState({0.1: 1, INF: 1}, total=0.1, count=1)) is restarted


def test_the_server_block_names_its_url() -> None:
    scrape = Snapshot({}, 10.0, ["vllm:generation_tokens_total"])
    block = server_block("http://engine:8000/metrics", scrape, scrape, 1.0)
    assert block is not None and block["url"] == "http://engine:8000/metrics"


def test_the_engines_token_count_since_the_first_scrape() -> None:
    families = ["vllm:generation_tokens_total"]
    before, after = Snapshot({}, 10.0, families), Snapshot({}, 20.0, families)
    block = server_block("u", before, after, 3.0)
    assert block is not None
    assert (block["output_tokens"], block["output_tokens_per_second"]) == (10, 3.333)
    # No token since the first scrape: 0, not every token since the engine started.
    idle = server_block("u", after, after, 3.0)
    assert idle is not None and idle["output_tokens"] == 0
    # No count in the first scrape (the counter is created on first use): all of them.
    fresh = server_block("u", Snapshot({}, None, families), after, 3.0)
    assert fresh is not None and fresh["output_tokens"] == 20
    instant = server_block("u", before, after, 0.0)
    assert instant is not None and instant["output_tokens_per_second"] is None
    short = server_block("u", before, after, 0.5)
    assert short is not None and short["output_tokens_per_second"] == 20.0


def test_metrics_without_a_token_counter_have_no_token_count() -> None:
    registry = CollectorRegistry()
    Histogram("vllm:e2e_request_latency_seconds", "e", registry=registry).observe(0.2)
    snapshot = parse_metrics(generate_latest(registry).decode(), "m")
    assert snapshot.output_tokens is None
    assert snapshot.families == ["vllm:e2e_request_latency_seconds"]


def _two_models() -> bytes:
    registry = CollectorRegistry()
    tokens = Counter("vllm:generation_tokens", "g", ["model_name"], registry=registry)
    tokens.labels("m").inc(7)
    tokens.labels("other").inc(1000)
    return generate_latest(registry)


async def test_a_scrape_follows_redirects_and_reads_its_own_models_series() -> None:
    async def moved(_: web.Request) -> web.Response:
        raise web.HTTPFound("/real-metrics")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=_two_models(), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", moved)
    app.router.add_get("/real-metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        snapshot = await scrape(f"http://127.0.0.1:{port}/metrics", "m")
    finally:
        await runner.cleanup()
    assert snapshot is not None and snapshot.output_tokens == 7


async def test_an_unreadable_scrape_warns_naming_the_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    url = f"http://127.0.0.1:{closed}/metrics"
    with caplog.at_level(logging.WARNING):
        assert await scrape(url, "m") is None
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert line.startswith(f"The engine's metrics at {url} cannot be read (ConnectError: ")
    assert line.endswith("; the run goes on without the server-side figures.")


def test_every_failed_row_is_counted() -> None:
    recorder = ServingRecorder()
    recorder.fail()
    recorder.fail()
    assert recorder.block(wall_s=1.0, concurrency=1)["failed"] == 2


def _answer(*, streamed: bool) -> ChatResult:
    return ChatResult(
        content="x", reasoning_content=None, reasoning=None, finish_reason="stop", usage=None,
        response_id=None, model="m", latency_ms=10.0, elapsed_ms=10.0, attempts=1,
        max_tokens=None, streamed=streamed,
    )  # fmt: skip


def test_the_client_block_is_rounded_to_three_decimals_and_says_what_was_streamed() -> None:
    nothing = ServingRecorder().block(wall_s=1.0, concurrency=1)
    assert nothing["streamed"] is False and nothing["requests"] == 0
    one = ServingRecorder()
    one.observe(_answer(streamed=True), {"tpot_ms": None, "output_tokens": 10})
    assert one.block(wall_s=1.0, concurrency=1)["streamed"] is True
    one.observe(_answer(streamed=True), {"tpot_ms": None, "output_tokens": None})
    block = one.block(wall_s=1.23456, concurrency=1, gpus=2)
    assert block["streamed"] is True and block["output_tokens"] == 10
    assert (block["wall_seconds"], block["gpu_seconds"]) == (1.235, 2.469)
    assert block["output_tokens_per_second"] == 8.1  # 10 / 1.23456 = 8.10005...
    assert block["tpot_ms"] == dict.fromkeys(("mean", "p50", "p90", "p99"))
