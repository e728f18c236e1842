"""The leaderboard's serving columns (TTFT p50, tokens/s) and the score/TTFT Pareto front."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kyai.cli import main
from kyai.ranking import Entry, pareto_front


def entry(name: str, score: float, ttft: float | None) -> Entry:
    return Entry(
        namespace="", run=name, workload="", model=name, framework="", engine_args_set="",
        dataset="d", comparison_key="k", avg_score=score, avg_latency_ms=None, error_count=0,
        questions=None, completed_at=None, ttft_p50_ms=ttft,
    )  # fmt: skip


def test_the_front_is_every_entry_no_other_dominates() -> None:
    entries = [
        entry("fast-good", 0.70, 100.0),  # front
        entry("slow-best", 0.80, 300.0),  # front: best score
        entry("slow-worse", 0.70, 200.0),  # dominated by fast-good (equal score, slower)
        entry("fastest-bad", 0.40, 50.0),  # front: fastest
        entry("middle", 0.60, 150.0),  # dominated by fast-good (better and faster)
        entry("unknown", 0.90, None),  # no TTFT: neither on it nor dominating
    ]
    assert pareto_front(entries) == [True, True, False, True, False, None]


def test_equal_entries_are_both_on_the_front() -> None:
    # Neither has one value strictly better: neither dominates.
    assert pareto_front([entry("a", 0.5, 100.0), entry("b", 0.5, 100.0)]) == [True, True]


def summary(folder: Path, score: float, scores: list[float], serving: Any) -> None:
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(
        json.dumps(
            {
                "comparison_key": "k", "avg_score": score, "avg_latency_ms": 100.0,
                "count": len(scores), "scores": scores, "dataset": "d",
                **({} if serving is None else {"serving": serving}),
            }
        )
    )  # fmt: skip


def serving(ttft_p50: float, rate: float) -> dict[str, Any]:
    return {
        "streamed": True,
        "ttft_ms": {"mean": ttft_p50, "p50": ttft_p50, "p90": ttft_p50, "p99": ttft_p50},
        "output_tokens_per_second": rate,
    }


def test_from_files_the_columns_and_the_json_carry_the_serving_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    right = [1.0] * 6 + [0.0] * 4
    summary(tmp_path / "fp8", 0.6, right, serving(120.0, 850.5))
    summary(tmp_path / "bf16", 0.6, right, serving(240.0, 410.0))
    summary(tmp_path / "old", 0.6, right, None)  # written before serving figures
    assert main(["leaderboard", "--from", str(tmp_path), "-o", "json"]) == 0
    board = json.loads(capsys.readouterr().out)["boards"][0]
    by_run = {e["run"]: e for e in board["entries"]}
    assert by_run["fp8"]["ttft_p50_ms"] == 120.0
    assert by_run["fp8"]["output_tokens_per_second"] == 850.5
    assert (by_run["fp8"]["pareto"], by_run["bf16"]["pareto"], by_run["old"]["pareto"]) == (
        True,
        False,
        None,
    )
    assert main(["leaderboard", "--from", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    header = table.splitlines()[1].split()
    assert header[header.index("LATENCY-MS") + 1 : header.index("LATENCY-MS") + 4] == [
        "TTFT-P50-MS",
        "TOK/S",
        "PARETO",
    ]
    fp8 = next(line for line in table.splitlines() if " fp8 " in f" {line} ")
    assert "120.0" in fp8 and "850.5" in fp8 and "*" in fp8


def test_a_serving_block_that_is_not_numbers_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary(tmp_path / "bad", 0.5, [1.0, 0.0], {"ttft_ms": {"p50": "fast"}})
    assert main(["leaderboard", "--from", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "summary.json" in err and "ttft_p50_ms" in err
