"""Per-answer timing fields and the phase's serving block (the vllm bench serve definitions)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from kyai.evaluation import ChatResult
from kyai.evaluation._serving import (
    NO_TIMING,
    TIMING_FIELDS,
    ServingRecorder,
    distribution,
    serving_note,
    timing_fields,
)


def result(**fields: Any) -> ChatResult:
    base: dict[str, Any] = {
        "content": "x",
        "reasoning_content": None,
        "reasoning": None,
        "finish_reason": "stop",
        "usage": {"completion_tokens": 40},
        "response_id": None,
        "model": None,
        "latency_ms": 1080.0,
        "elapsed_ms": 1080.0,
        "attempts": 1,
        "max_tokens": None,
    }
    return ChatResult(**{**base, **fields})


def test_tpot_ttft_and_itl_of_a_streamed_answer() -> None:
    fields = timing_fields(
        result(streamed=True, ttft_ms=300.0, itl_ms=[20.0] * 38 + [21.0], text_chunks=40)
    )
    assert fields == {
        "streamed": True,
        "ttft_ms": 300.0,
        "tpot_ms": 20.0,  # (1080 - 300) / (40 - 1)
        "itl_ms_mean": round((20.0 * 38 + 21.0) / 39, 3),
        "output_tokens": 40,
        "output_tokens_source": "usage",
    }
    assert set(fields) == set(TIMING_FIELDS) == set(NO_TIMING)


def test_tokens_are_counted_from_chunks_only_without_usage() -> None:
    fields = timing_fields(
        result(usage=None, streamed=True, ttft_ms=100.0, itl_ms=[10.0], text_chunks=2)
    )
    assert (fields["output_tokens"], fields["output_tokens_source"]) == (2, "chunks")
    assert fields["tpot_ms"] == 980.0  # (1080 - 100) / (2 - 1)
    whole = timing_fields(result(usage=None))
    assert (whole["output_tokens"], whole["output_tokens_source"]) == (None, None)


def test_a_whole_answer_has_no_ttft_tpot_or_itl() -> None:
    fields = timing_fields(result())
    assert fields["streamed"] is False
    assert (fields["ttft_ms"], fields["tpot_ms"], fields["itl_ms_mean"]) == (None, None, None)
    assert fields["output_tokens"] == 40


def test_one_token_has_no_tpot() -> None:
    fields = timing_fields(
        result(usage={"completion_tokens": 1}, streamed=True, ttft_ms=5.0, text_chunks=1)
    )
    assert fields["tpot_ms"] is None
    assert fields["itl_ms_mean"] is None


def test_distribution_matches_numpy_linear_percentiles() -> None:
    numpy = pytest.importorskip("numpy")
    values = [float(v) for v in (7, 1, 3, 10, 2, 9, 4, 4, 15, 6, 8)]
    figures = distribution(values)
    assert figures["mean"] == round(sum(values) / len(values), 3)
    for p in (50, 90, 99):
        assert figures[f"p{p}"] == pytest.approx(float(numpy.percentile(values, p)), abs=1e-3)
    assert distribution([]) == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert distribution([4.0]) == {"mean": 4.0, "p50": 4.0, "p90": 4.0, "p99": 4.0}


def test_the_phase_block() -> None:
    recorder = ServingRecorder()
    for ttft in (100.0, 300.0):
        answer = result(streamed=True, ttft_ms=ttft, itl_ms=[20.0] * 39, text_chunks=40)
        recorder.observe(answer, timing_fields(answer))
    recorder.fail()
    block = recorder.block(wall_s=2.0, concurrency=8, gpus=4)
    assert block["streamed"] is True
    assert (block["requests"], block["failed"], block["concurrency"]) == (2, 1, 8)
    assert block["ttft_ms"]["mean"] == 200.0
    assert block["itl_ms"]["p99"] == 20.0
    assert block["e2e_ms"]["p50"] == 1080.0
    assert block["output_tokens"] == 80
    assert block["output_tokens_per_second"] == 40.0
    assert block["requests_per_second"] == 1.0
    assert (block["gpus"], block["gpu_seconds"]) == (4, 8.0)
    assert "gpu_seconds" not in recorder.block(wall_s=2.0, concurrency=8)
    assert serving_note(block) == "ttft_p50_ms=200.0 output_tokens_per_s=40.0"


def test_a_phase_with_a_whole_answer_is_not_streamed() -> None:
    recorder = ServingRecorder()
    streamed = result(streamed=True, ttft_ms=1.0, text_chunks=40)
    recorder.observe(streamed, timing_fields(streamed))
    recorder.observe(result(), timing_fields(result()))
    block = recorder.block(wall_s=0.0, concurrency=1)
    assert block["streamed"] is False
    assert block["ttft_ms"]["mean"] == 1.0  # over the streamed answers only
    assert block["output_tokens_per_second"] is None  # no wall time: no rate
    assert not math.isnan(block["e2e_ms"]["mean"])
    assert serving_note(None) == "ttft_p50_ms=n/a output_tokens_per_s=n/a"


def test_the_result_line_shows_the_engines_itl_beside_the_clients_when_it_was_read() -> None:
    block = {
        "ttft_ms": {"p50": 200.0},
        "itl_ms": {"p50": 0.004},
        "output_tokens_per_second": 40.0,
        "server": {"itl_ms": {"p50": 5.08}},
    }
    assert serving_note(block) == (
        "ttft_p50_ms=200.0 output_tokens_per_s=40.0 itl_p50_ms=0.0 engine_itl_p50_ms=5.1"
    )
    no_itl = {**block, "itl_ms": {"p50": None}, "server": {"url": "x"}}
    assert serving_note(no_itl).endswith(" itl_p50_ms=n/a engine_itl_p50_ms=n/a")
    unread = {key: value for key, value in block.items() if key != "server"}
    assert serving_note(unread) == "ttft_p50_ms=200.0 output_tokens_per_s=40.0"


def test_tpot_and_itl_follow_vllm_bench_from_the_chunk_times() -> None:
    """TTFT t1 - t0, E2E tn - t0, ITL the n - 1 gaps, TPOT (E2E - TTFT) / (tokens - 1): the
    gaps of one answer add up to E2E - TTFT, so the mean ITL and TPOT differ only in what
    divides it (chunks, tokens)."""
    times = [0.300, 0.3001, 0.320, 0.340, 0.3401, 0.380]  # role + first token together
    gaps = [(b - a) * 1000 for a, b in itertools.pairwise(times)]
    answer = result(
        usage={"completion_tokens": 9},  # more tokens than chunks: some carried two
        latency_ms=times[-1] * 1000,
        streamed=True,
        ttft_ms=times[0] * 1000,
        itl_ms=gaps,
        text_chunks=5,
    )
    fields = timing_fields(answer)
    assert fields["ttft_ms"] == 300.0
    assert fields["tpot_ms"] == 10.0  # (380 - 300) / (9 - 1)
    assert fields["itl_ms_mean"] == 16.0  # (380 - 300) / 5 gaps
