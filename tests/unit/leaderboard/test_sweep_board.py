"""``kyai leaderboard --sweep NAME``: the sweep's own table, in the leaderboard's three forms."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from kyai.api.evaluationsweep import EvaluationSweepStatus, SweepRow
from kyai.cli import main
from kyai.sweep_board import SweepBoardError, board_from, render_json, render_markdown, render_table
from kyai.sweeps import table_config_map

SWEEP = {
    "apiVersion": "kyai.io/v1alpha1",
    "kind": "EvaluationSweep",
    "metadata": {"name": "pick", "namespace": "evals", "uid": "u-1"},
}


def row(
    workload: str, snapshot: str, rank: int | None, score: float | None, **extra: Any
) -> SweepRow:
    return SweepRow.model_validate(
        {
            "cell": f"{workload}-{snapshot}",
            "workload": workload,
            "snapshot": snapshot,
            "run": f"pick-{workload}-{snapshot}",
            "phase": "Succeeded" if score is not None else "Queued",
            "avgScore": score,
            "rank": rank,
            **extra,
        }
    )


ROWS = [
    row("qwen-fp8", "mmlu", 1, 0.71, interval={"low": 0.62, "high": 0.79, "method": "wilson"},
        baseline=True, ttftP50Ms=41.5, pareto=True),
    row("qwen-int4", "mmlu", 2, 0.55, engineArgsSet="fp8-kv", delta=-0.16, pValue=0.0004,
        test="mcnemar-exact", nonInferior=False, pareto=False),
    row("qwen-fp8", "gpqa", None, None, note="the run has not finished"),
]  # fmt: skip


def sweep_with(rows: list[SweepRow], **status: Any) -> dict[str, Any]:
    body = EvaluationSweepStatus(
        phase="Running",
        cells={"total": len(rows), "succeeded": 2, "running": 1},  # type: ignore[arg-type]
        table=rows,
        table_rows=len(rows),
        best_names="qwen-fp8",
        **status,
    )
    return {**SWEEP, "status": body.to_k8s()}


def test_the_table_shows_each_snapshot_with_ranks_intervals_and_baseline_figures() -> None:
    text = render_table(board_from(sweep_with(ROWS)))
    lines = text.splitlines()
    assert lines[0] == "SWEEP evals/pick: Running, 2/3 cells succeeded; best: qwen-fp8"
    assert lines.index("SNAPSHOT mmlu") < lines.index("SNAPSHOT gpqa")
    first = next(line for line in lines if line.startswith("1 "))
    assert "qwen-fp8" in first and "0.7100" in first and "0.6200-0.7900 wilson" in first
    assert "yes (baseline)" not in first and "(baseline)" in first and "41.5" in first
    second = next(line for line in lines if line.startswith("2 "))
    assert "fp8-kv" in second and "-0.1600" in second and "0.0004 mcnemar-exact" in second
    queued = next(line for line in lines if "Queued" in line)
    assert queued.startswith("- ") and "the run has not finished" in queued
    assert "Holm-Bonferroni" in text


def test_markdown_has_one_table_per_snapshot() -> None:
    text = render_markdown(board_from(sweep_with(ROWS)))
    assert text.count("### Snapshot") == 2 and "| Rank | Workload |" in text
    assert "| 1 | qwen-fp8 | - | pick-qwen-fp8-mmlu | Succeeded | 0.7100 |" in text


def test_json_keeps_the_rows_as_the_status_has_them() -> None:
    payload = json.loads(render_json(board_from(sweep_with(ROWS))))
    assert payload["sweep"] == "pick" and payload["phase"] == "Running"
    assert payload["rows"] == [r.to_k8s() for r in ROWS]
    assert payload["cells"]["total"] == 3 and payload["ranking"]["alpha"] == 0.05


REASON = "interval low end -55.4 points, not above -5.0 (the margin), on 3 paired questions"


def test_a_no_shows_the_differences_interval_its_n_and_why() -> None:
    # Issue 43: "no" with DELTA +0.0000 said nothing more; now the interval, n and the reason.
    no = row("qwen-int4", "mmlu", 1, 0.71, delta=0.0, pairedQuestions=3, pValue=1.0,
             deltaInterval={"low": -0.5543, "high": 0.5543, "method": "bonett-price",
                            "confidence": 0.95},
             test="mcnemar-exact", nonInferior=False, nonInferiorReason=REASON)  # fmt: skip
    board = board_from(sweep_with([row("qwen-fp8", "mmlu", 1, 0.71, baseline=True), no]))
    lines = render_table(board).splitlines()
    header = next(line for line in lines if line.startswith("RANK"))
    line = next(line for line in lines if "qwen-int4" in line)
    columns = re.split(r"\s{3,}", line)
    assert re.split(r"\s{3,}", header)[7:12] == ["DELTA", "DELTA-INTERVAL", "PAIRED", "P-VALUE",
                                                 "NON-INFERIOR"]  # fmt: skip
    assert columns[7:12] == ["+0.0000", "-0.5543 to +0.5543", "3", "1 mcnemar-exact", "no"]
    assert columns[-1] == f"not non-inferior: {REASON}"
    assert f"not non-inferior: {REASON} |" in render_markdown(board)
    (_, shown) = json.loads(render_json(board))["rows"]
    assert shown["deltaInterval"] == {"low": -0.5543, "high": 0.5543, "method": "bonett-price",
                                      "confidence": 0.95}  # fmt: skip
    assert (shown["pairedQuestions"], shown["nonInferiorReason"]) == (3, REASON)


def test_a_table_in_a_config_map_is_read_whole() -> None:
    rows = [row(f"w{i:02d}", "mmlu", 1, 0.5) for i in range(70)]
    sweep = sweep_with(rows[:64], table_config_map="pick-table")
    config_map = table_config_map(SWEEP, rows)
    board = board_from(sweep, config_map)
    assert [r.workload for r in board.rows] == [r.workload for r in rows]
    with pytest.raises(SweepBoardError, match="ConfigMap pick-table does not exist"):
        board_from(sweep, None)
    with pytest.raises(SweepBoardError, match="unreadable table"):
        board_from(sweep, {"metadata": {"name": "pick-table"}, "data": {"table.json": "{"}})


def test_sweep_with_another_scope_is_refused_with_exit_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["leaderboard", "--sweep", "pick", "-A"]) == 2
    assert "--sweep does not go with -A/--all-namespaces" in capsys.readouterr().err
    assert main(["leaderboard", "--sweep", "pick", "--key", "abc"]) == 2
    assert "--key" in capsys.readouterr().err
