"""The engine's own histograms: parsing, the difference of two scrapes, histogram_quantile."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from kyai.evaluation._servermetrics import (
    HistogramState,
    histogram_quantile,
    parse_metrics,
    server_block,
)

INF = math.inf


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        # 10 observations: 2 in (0, 0.1], 6 in (0.1, 0.5], 2 in (0.5, +Inf).
        (0.5, 0.1 + 0.4 * (3 / 6)),  # rank 5: 3 into the second bucket's 6
        (0.2, 0.1),  # rank 2: the end of the first bucket
        (0.1, 0.05),  # rank 1: halfway into the first bucket, which starts at 0
        (0.9, 0.5),  # rank 9: in the +Inf bucket, the highest finite bound
        (0.99, 0.5),
    ],
)
def test_histogram_quantile_is_promqls(q: float, expected: float) -> None:
    buckets = {0.1: 2.0, 0.5: 8.0, INF: 10.0}
    assert histogram_quantile(q, buckets) == pytest.approx(expected)


def test_histogram_quantile_without_observations_or_inf_bucket() -> None:
    assert histogram_quantile(0.5, {0.1: 0.0, INF: 0.0}) is None
    assert histogram_quantile(0.5, {0.1: 3.0, 0.5: 4.0}) is None  # no +Inf bucket
    assert histogram_quantile(0.5, {-1.0: 4.0, 0.5: 4.0, INF: 4.0}) == -1.0


def exposition(observations: list[float], tokens: int, *, other: bool = True) -> str:
    registry = CollectorRegistry()
    ttft = Histogram(
        "vllm:time_to_first_token_seconds",
        "t",
        ["model_name", "engine"],
        buckets=[0.1, 0.5],
        registry=registry,
    )
    generated = Counter("vllm:generation_tokens", "g", ["model_name", "engine"], registry=registry)
    for engine, value in enumerate(observations):
        ttft.labels("m", str(engine % 2)).observe(value)  # two engines: summed
    generated.labels("m", "0").inc(tokens)
    if other:  # another model on the same server: left out
        ttft.labels("other", "0").observe(9.0)
        generated.labels("other", "0").inc(1000)
    return generate_latest(registry).decode()


def test_parse_filters_the_model_and_sums_its_engines() -> None:
    snapshot = parse_metrics(exposition([0.05, 0.3, 0.3, 0.7], 12), "m")
    state = snapshot.histograms["ttft_ms"]
    assert state.buckets == {0.1: 1.0, 0.5: 3.0, INF: 4.0}
    assert (state.count, state.total) == (4.0, pytest.approx(1.35))
    assert snapshot.output_tokens == 12.0
    assert snapshot.families == [
        "vllm:time_to_first_token_seconds",
        "vllm:generation_tokens_total",
    ]
    unknown_model = parse_metrics(exposition([0.3], 5, other=False), "not-served-here")
    assert unknown_model.histograms["ttft_ms"].count == 1.0  # all series when none is its


def test_the_server_block_is_the_difference_of_the_scrapes() -> None:
    before = parse_metrics(exposition([0.05, 0.3], 10), "m")
    after = parse_metrics(exposition([0.05, 0.3, 0.3, 0.3, 0.3, 0.3], 30), "m")
    block = server_block("http://e/metrics", before, after, wall_s=2.0)
    assert block is not None
    assert block["ttft_ms"]["mean"] == pytest.approx(300.0)  # 4 x 0.3 s
    assert block["ttft_ms"]["p50"] == pytest.approx(300.0)  # 0.1 + 0.4 x 2/4
    assert block["output_tokens"] == 20
    assert block["output_tokens_per_second"] == 10.0
    assert "e2e_ms" not in block and "requests" not in block  # not exposed here
    assert server_block("http://e/metrics", None, after, 2.0) is None


def test_a_reset_between_the_scrapes_keeps_the_second() -> None:
    before = HistogramState({0.1: 5.0, INF: 9.0}, 4.0, 9.0)
    after = HistogramState({0.1: 1.0, INF: 2.0}, 0.5, 2.0)
    assert after.minus(before) is after
    grown = HistogramState({0.1: 6.0, INF: 12.0}, 5.0, 12.0)
    assert grown.minus(before) == HistogramState({0.1: 1.0, INF: 3.0}, 1.0, 3.0)


def test_metrics_without_serving_families_give_no_block(caplog: pytest.LogCaptureFixture) -> None:
    nothing = parse_metrics("# HELP up x\n# TYPE up gauge\nup 1\n", "m")
    assert nothing.families == []
    assert server_block("http://e/metrics", nothing, nothing, 1.0) is None
    assert "none of vLLM's or SGLang's" in caplog.text
    with pytest.raises(ValueError):
        parse_metrics("this is not { prometheus", "m")
