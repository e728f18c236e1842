"""``kyai leaderboard --from``: summary.json files ranked per comparison key."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kyai.cli import main
from kyai.leaderboard import age
from kyai.ranking import Entry, entry_from_run, rank

NOW = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)


def right_on(rows: int, n: int = 100) -> list[float]:
    """0/1 scores: right on the first ``rows`` questions."""
    return [1.0 if i < rows else 0.0 for i in range(n)]


def summary(
    folder: Path, key: str, score: float, latency: float | None, *, errors: int = 0,
    scores: list[float] | None = None, **extra: Any,
) -> Path:  # fmt: skip
    folder.mkdir(parents=True)
    path = folder / "summary.json"
    path.write_text(
        json.dumps(
            {
                "comparison_key": key, "avg_score": score, "avg_latency_ms": latency,
                "error_count": errors, "count": 10 if scores is None else len(scores),
                "dataset": "capitals", "candidate_model": f"model-{folder.name}",
                "finished_at": "2026-01-31T11:00:00Z",
                **({} if scores is None else {"scores": scores}), **extra,
            }
        )
    )  # fmt: skip
    return path


def judgements(folder: Path, row_ids: list[str]) -> None:
    (folder / "judgements.jsonl").write_text(
        "".join(
            json.dumps({"row_index": i, "row_id": row_id, "score": 0.0}) + "\n"
            for i, row_id in enumerate(row_ids)
        )
    )


def leaderboard(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["leaderboard", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_equal_scores_rank_by_latency_and_keys_never_mix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary(tmp_path / "slow", "key-a", 0.75, 900.0, scores=right_on(75))
    summary(tmp_path / "fast", "key-a", 0.75, 120.0, scores=right_on(75))
    summary(tmp_path / "best", "key-a", 0.9, 5000.0, scores=right_on(90))
    summary(tmp_path / "no-latency", "key-a", 0.75, None, errors=10, scores=right_on(75))
    # a better score under another key
    summary(tmp_path / "other", "key-b", 0.99, 10.0, scores=right_on(99))
    status, out, _ = leaderboard(capsys, "--from", str(tmp_path), "-o", "json")
    assert status == 0
    boards = json.loads(out)["boards"]
    assert [board["comparison_key"] for board in boards] == ["key-a", "key-b"]
    first, second = boards
    # best beats the three others (McNemar: 15 discordant rows, all its own, p = 6e-5, Holm
    # keeps it); the three others share rank 2, listed by latency.
    assert [e["run"] for e in first["entries"]] == ["best", "fast", "slow", "no-latency"]
    assert [e["rank"] for e in first["entries"]] == [1, 2, 2, 2]
    assert {e["comparison_key"] for e in first["entries"]} == {"key-a"}
    assert [e["run"] for e in second["entries"]] == ["other"]
    assert second["entries"][0]["rank"] == 1
    assert first["ranking"]["alpha"] == 0.05 and "Holm" in first["ranking"]["method"]


def test_key_and_dataset_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary(tmp_path / "a", "abc123", 0.5, 1.0)
    summary(tmp_path / "b", "abd456", 0.6, 1.0)
    status, out, _ = leaderboard(capsys, "--from", str(tmp_path), "--key", "abd", "-o", "json")
    assert status == 0
    (board,) = json.loads(out)["boards"]
    assert board["comparison_key"] == "abd456"
    status, _, err = leaderboard(capsys, "--from", str(tmp_path), "--key", "ab")
    assert status == 2 and "several comparison keys" in err
    status, out, _ = leaderboard(capsys, "--from", str(tmp_path), "--dataset", "x", "-o", "json")
    assert status == 0 and json.loads(out) == {"boards": []}


def test_table_and_markdown_show_the_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scores = [1.0] * 7 + [0.5] + [0.0] * 2  # 0.75, not all 0/1: a t interval
    summary(tmp_path / "fast", "key-a", 0.75, 120.0, errors=2, scores=scores)
    summary(tmp_path / "slow", "key-a", 0.75, 900.0, scores=scores)
    status, out, _ = leaderboard(capsys, "--from", str(tmp_path))
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "COMPARISON KEY key-a (dataset capitals)"
    for header in ("RANK", "WORKLOAD", "MODEL", "FRAMEWORK", "ENGINE-ARGS", "SCORE", "LATENCY-MS",
                   "ERRORS", "AGE"):  # fmt: skip
        assert header in lines[1]
    assert lines[2].split()[:2] == ["1", "-"] and "fast" in lines[2] and "2/10" in lines[2]
    assert "slow" in lines[3] and "0.7500" in lines[3] and "900.0" in lines[3]
    assert lines[3].split()[0] == "1"  # the same scores: no test separates them
    assert "95%-INTERVAL" in lines[1] and "0.4460-1.0000 t" in lines[2]
    assert lines[4].startswith("RANK: pairwise paired tests") and "Holm-Bonferroni" in lines[4]
    status, out, _ = leaderboard(capsys, "--from", str(tmp_path), "-o", "markdown")
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| Rank | Namespace | Run | Workload | Model")
    assert rows[1].startswith("| 1 |") and "fast" in rows[1]
    assert out.startswith("### Comparison key `key-a`")


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("{not json", "not a readable JSON file"),
        ('{"avg_score": 0.5}', "'comparison_key'"),
        ('{"comparison_key": "k", "avg_score": "high"}', "'avg_score'"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_unreadable_summaries_are_usage_errors_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, complaint: str
) -> None:
    path = tmp_path / "run" / "summary.json"
    path.parent.mkdir()
    path.write_text(content)
    status, _, err = leaderboard(capsys, "--from", str(path))
    assert status == 2
    assert str(path) in err and complaint in err


def test_missing_path_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = leaderboard(capsys, "--from", str(tmp_path / "nope"))
    assert status == 2 and "no such file or directory" in err


def run_object(name: str, phase: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": name},
        "spec": {"workloadRef": {"name": "qwen"}},
        "status": {"phase": phase, **status},
    }


def test_entries_from_evaluation_runs_only_when_succeeded() -> None:
    done = run_object(
        "r1", "Succeeded", avgScore=0.5, avgLatencyMs=12.5, comparisonKey="k", model="m",
        framework="vllm", dataset="d", errorCount=1, questions=4,
        completedAt="2026-01-31T11:58:00Z",
    )  # fmt: skip
    entry = entry_from_run(done, {("team-a", "qwen"): "fast-args"})
    assert entry == Entry(
        namespace="team-a", run="r1", workload="qwen", model="m", framework="vllm",
        engine_args_set="fast-args", dataset="d", comparison_key="k", avg_score=0.5,
        avg_latency_ms=12.5, error_count=1, questions=4, completed_at="2026-01-31T11:58:00Z",
    )  # fmt: skip
    assert entry_from_run(run_object("r2", "Judging", comparisonKey="k")) is None
    assert entry_from_run(run_object("r3", "Failed")) is None
    assert entry_from_run(run_object("r4", "Succeeded", avgScore=0.5)) is None  # no key


def test_rank_is_deterministic_on_full_ties() -> None:
    base = dict(
        workload="w", model="m", framework="f", engine_args_set="", dataset="d",
        comparison_key="k", avg_score=0.5, avg_latency_ms=10.0, error_count=0, questions=1,
        completed_at=None,
    )  # fmt: skip
    entries = [Entry(namespace=ns, run=run, **base) for ns, run in (("b", "x"), ("a", "y"))]  # type: ignore[arg-type]
    (board,) = rank(entries)
    assert [e.namespace for e in board.entries] == ["a", "b"]


def test_age_like_kubectl() -> None:
    assert age(None, NOW) == "-"
    assert age((NOW - timedelta(seconds=42)).isoformat(), NOW) == "42s"
    assert age("2026-01-31T11:48:00Z", NOW) == "12m"
    assert age("2026-01-29T12:00:00Z", NOW) == "2d"


def test_a_rejudge_entry_names_its_sources_workload_and_engine_args() -> None:
    rejudge = {
        "metadata": {"namespace": "team-a", "name": "r1-again"},
        "spec": {"generationFrom": {"runRef": {"name": "r1"}}},
        "status": {"phase": "Succeeded", "avgScore": 0.5, "comparisonKey": "k2",
                   "workload": "qwen", "snapshot": "caps"},
    }  # fmt: skip
    entry = entry_from_run(rejudge, {("team-a", "qwen"): "fast-args"})
    assert entry is not None
    assert (entry.workload, entry.engine_args_set) == ("qwen", "fast-args")


def test_a_run_keeps_its_engine_args_once_its_workload_is_gone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 43: a sweep's derived Workloads are deleted when their cells end; the runs' own
    # status says which EngineArgsSet served them (and its hash), whatever Workloads remain.
    done = {"avgScore": 0.5, "comparisonKey": "k", "scores": [1.0, 0.0]}
    recorded = run_object("cell-a", "Succeeded", **done, workload="qwen-set-a-1a2b3c4d",
                          engineArgsSet="set-a", engineArgsHash="0123456789abcdef")  # fmt: skip
    older = run_object("cell-b", "Succeeded", **done, workload="qwen-set-b-5e6f7a8b")
    older["metadata"]["annotations"] = {"kyai.io/sweep-engine-args-set": "set-b"}  # no status
    renamed = run_object("plain", "Succeeded", **done, engineArgsSet="set-a")
    listed = ([recorded, older, renamed], {("team-a", "qwen"): "set-c"})  # qwen names set-c now
    monkeypatch.setattr("kyai.leaderboard.cluster_runs", lambda namespace, all_namespaces: listed)
    status, out, _ = leaderboard(capsys, "-n", "team-a", "-o", "json")
    assert status == 0
    (board,) = json.loads(out)["boards"]
    shown = {e["run"]: (e["engine_args_set"], e["engine_args_hash"]) for e in board["entries"]}
    assert shown == {"cell-a": ("set-a", "0123456789abcdef"), "cell-b": ("set-b", None),
                     "plain": ("set-a", None)}  # fmt: skip
    status, out, _ = leaderboard(capsys, "-n", "team-a")
    header, *rows = out.splitlines()[1:5]
    column = header.split().index("ENGINE-ARGS")
    assert {row.split()[2]: row.split()[column] for row in rows} == {
        "cell-a": "set-a", "cell-b": "set-b", "plain": "set-a"}  # fmt: skip
    # Runs written before the status held it, and outside a sweep: the Workload's set now.
    entry = entry_from_run(run_object("old", "Succeeded", **done), {("team-a", "qwen"): "set-c"})
    assert entry is not None and entry.engine_args_set == "set-c"
