"""``kyai leaderboard``: tie-aware ranks and intervals, from files and from the cluster alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sp

from kyai.api import pack_scores
from kyai.cli import main
from kyai.leaderboard import entry_from_summary
from kyai.ranking import NO_SCORES, Entry, SummaryError, entry_from_run, rank
from kyai.stats import Interval, score_interval


def right_on(rows: set[int], n: int = 100) -> list[float]:
    return [1.0 if i in rows else 0.0 for i in range(n)]


# A: right on rows 0..69, B: 0..58 and 60..67, C: 0..59 (see tests/unit/stats: ranks 1, 1, 2).
A = right_on(set(range(70)))
B = right_on(set(range(59)) | set(range(60, 68)))
C = right_on(set(range(60)))


def write_run(
    root: Path, name: str, vector: list[float] | None, *, latency: float = 100.0,
    key: str = "key-a", row_ids: list[str] | None = None, **extra: Any,
) -> Path:  # fmt: skip
    folder = root / name
    folder.mkdir(parents=True)
    body: dict[str, Any] = {
        "comparison_key": key, "dataset": "capitals", "candidate_model": f"model-{name}",
        "avg_latency_ms": latency, "error_count": 0,
    }  # fmt: skip
    if vector is not None:
        body.update(scores=vector, count=len(vector), avg_score=sum(vector) / len(vector))
        ids = row_ids if row_ids is not None else [f"q{i}" for i in range(len(vector))]
        (folder / "judgements.jsonl").write_text(
            "".join(
                json.dumps({"row_index": i, "row_id": row_id, "score": s}) + "\n"
                for i, (row_id, s) in enumerate(zip(ids, vector, strict=True))
            )
        )
    body.update(extra)
    (folder / "summary.json").write_text(json.dumps(body))
    return folder / "summary.json"


def board_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    status = main(["leaderboard", *args, "-o", "json"])
    out, err = capsys.readouterr()
    return status, json.loads(out) if status == 0 else None, err


def test_holm_ranks_and_intervals_from_summary_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path, "c", C)
    write_run(tmp_path, "b", B)
    write_run(tmp_path, "a", A)
    status, data, _ = board_json(capsys, "--from", str(tmp_path))
    assert status == 0
    (board,) = data["boards"]
    entries = board["entries"]
    assert [(e["run"], e["rank"]) for e in entries] == [("a", 1), ("b", 1), ("c", 2)]
    assert all(e["rank_unavailable"] is None for e in entries)
    ci = sp.binomtest(70, 100).proportion_ci(0.95, method="wilson")
    interval = entries[0]["avg_score_interval"]
    assert interval["method"] == "wilson" and interval["confidence"] == 0.95
    assert (interval["low"], interval["high"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert "scores" not in entries[0] and "row_ids" not in entries[0]


def test_runs_without_scores_get_no_rank_and_come_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path, "a", A)
    write_run(tmp_path, "c", C)
    stored = {"low": 0.8, "high": 0.9, "standard_error": 0.02, "confidence": 0.95,
              "method": "wilson"}  # fmt: skip
    write_run(tmp_path, "old", None, avg_score=0.95, avg_score_interval=stored)
    write_run(tmp_path, "older", None, avg_score=0.97)
    status, data, _ = board_json(capsys, "--from", str(tmp_path))
    assert status == 0
    entries = data["boards"][0]["entries"]
    # A beats C alone (p = 0.002 for one pair): 1 and 2; the scoreless runs after, by score.
    assert [(e["run"], e["rank"]) for e in entries] == [
        ("a", 1), ("c", 2), ("older", None), ("old", None),
    ]  # fmt: skip
    assert entries[2]["rank_unavailable"] == entries[3]["rank_unavailable"] == NO_SCORES
    assert entries[3]["avg_score_interval"] == stored and entries[2]["avg_score_interval"] is None
    assert main(["leaderboard", "--from", str(tmp_path)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[4].split()[0] == "n/a" and "older" in table[4]
    assert table[5].split()[0] == "n/a" and "0.8000-0.9000 wilson" in table[5]
    assert table[-1] == f"n/a: {NO_SCORES}."


def test_runs_of_one_key_with_different_rows_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "counts", "a", A)
    write_run(tmp_path / "counts", "short", A[:99])
    status, _, err = board_json(capsys, "--from", str(tmp_path / "counts"))
    assert status == 2
    assert "comparison key key-a" in err and "100 per-question scores" in err and "99" in err
    assert "short/summary.json" in err and "a/summary.json" in err
    write_run(tmp_path / "ids", "a", A)
    ids = [f"q{i}" for i in range(100)]
    ids[42] = "other"
    write_run(tmp_path / "ids", "b", B, row_ids=ids)
    status, _, err = board_json(capsys, "--from", str(tmp_path / "ids"))
    assert status == 2
    assert "row 42 is row_id 'q42'" in err and "'other'" in err and "b/summary.json" in err
    # Other keys may have other rows: they are never compared.
    write_run(tmp_path / "keys", "a", A)
    write_run(tmp_path / "keys", "short", A[:99], key="key-b")
    assert board_json(capsys, "--from", str(tmp_path / "keys"))[0] == 0


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        ({"scores": [0.5, 2.0]}, "scores[1] is 2.0"),
        ({"scores": "all"}, "'scores' is not a list"),
        ({"scores": [0.5, 1.0], "count": 3}, "'count' is 3 but 'scores' holds 2"),
        ({"avg_score_interval": {"low": 0.1}}, "avg_score_interval: field 'high'"),
    ],
)
def test_malformed_scores_and_intervals_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: dict[str, Any], complaint: str
) -> None:
    path = write_run(tmp_path, "x", None, avg_score=0.5, **extra)
    status, _, err = board_json(capsys, "--from", str(path))
    assert status == 2 and str(path) in err and complaint in err


def run_object(name: str, scores: list[float] | None, latency: float = 100.0) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Succeeded", "comparisonKey": "key-a", "model": f"model-{name}",
        "dataset": "capitals", "avgLatencyMs": latency, "questions": 100, "errorCount": 0,
        "avgScore": 0.5 if scores is None else sum(scores) / len(scores),
    }  # fmt: skip
    if scores is not None:
        status["scores"] = scores
    return {
        "metadata": {"namespace": "team-a", "name": name},
        "spec": {"workloadRef": {"name": "w"}},
        "status": status,
    }


def test_the_cluster_gives_the_ranks_and_intervals_of_the_files(tmp_path: Path) -> None:
    vectors = {"a": A, "b": B, "c": C, "d": [0.5] * 50 + [1.0] * 50}  # d: a t interval
    runs = [entry_from_run(run_object(name, scores)) for name, scores in vectors.items()]
    files = [entry_from_summary(write_run(tmp_path, n, s)) for n, s in vectors.items()]
    (from_cluster,) = rank(e for e in runs if e is not None)
    (from_files,) = rank(files)
    places = [(p.entry.run, p.rank, p.interval) for p in from_cluster.places]
    assert places == [(p.entry.run, p.rank, p.interval) for p in from_files.places]
    # Six pairs: A-C (p = 0.002) <= 0.05/6 is the only one Holm keeps (next: D-C, paired t
    # p = 0.038 > 0.05/5), so only C is beaten.
    assert [p.rank for p in from_cluster.places] == [1, 1, 1, 2]
    assert [p.entry.run for p in from_cluster.places] == ["d", "a", "b", "c"]
    assert from_cluster.places[0].interval == score_interval(vectors["d"])


def test_a_cluster_run_without_scores_is_unranked_and_says_why() -> None:
    entry = entry_from_run(run_object("big", None))
    assert entry is not None and entry.scores is None and entry.stored_interval is None
    (board,) = rank([entry, entry_from_run(run_object("a", A))])  # type: ignore[list-item]
    assert [(p.entry.run, p.rank) for p in board.places] == [("a", 1), ("big", None)]
    why = board.places[1].rank_unavailable or ""
    assert why.startswith("no per-question scores in the status of EvaluationRun team-a/big")
    huge = run_object("huge", None)
    huge["status"]["questions"] = 200_000
    too_large = entry_from_run(huge)
    assert too_large is not None and "200,000 scores do not fit" in (
        too_large.scores_unavailable or ""
    )
    assert NO_SCORES.startswith("no per-question scores")


def test_the_interval_in_status_is_shown_for_a_run_without_scores() -> None:
    body = run_object("big", None)
    body["status"]["avgScoreInterval"] = {"low": 0.1, "high": 0.3, "standardError": 0.05,
                                          "confidence": 0.95, "method": "t"}  # fmt: skip
    entry = entry_from_run(body)
    assert entry is not None and entry.stored_interval == Interval(0.1, 0.3, 0.05, 0.95, "t")
    (board,) = rank([entry])
    assert board.places[0].interval == Interval(0.1, 0.3, 0.05, 0.95, "t")


def test_packed_scores_in_the_cluster_rank_as_the_files_do(tmp_path: Path) -> None:
    # 1,500 questions: more than status.scores lists, so the cluster holds them packed.
    n = 1500
    vectors = {
        "a": [float(i % 10 < 7) for i in range(n)],
        "b": [float(i % 10 < 7 and i % 50 != 3) for i in range(n)],
        "c": [float(i % 10 < 6) for i in range(n)],
        "d": [((i * 7) % 11) / 10 for i in range(n)],  # continuous: packed as doubles
    }
    runs = []
    for name, vector in vectors.items():
        body = run_object(name, None)
        packed = pack_scores(vector, dataset_sha256="ab" * 32)
        assert packed is not None
        body["status"].update(
            questions=n, avgScore=sum(vector) / n, scoresPacked=packed.to_k8s(),
            datasetSha256="ab" * 32,
        )  # fmt: skip
        runs.append(entry_from_run(body))
    files = [entry_from_summary(write_run(tmp_path, k, v)) for k, v in vectors.items()]
    (from_cluster,) = rank(e for e in runs if e is not None)
    (from_files,) = rank(files)
    places = [(p.entry.run, p.rank, p.interval) for p in from_cluster.places]
    assert places == [(p.entry.run, p.rank, p.interval) for p in from_files.places]
    assert all(p.rank is not None for p in from_cluster.places)
    assert len({p.rank for p in from_cluster.places}) > 1  # the tests separate some runs


def test_cluster_runs_of_one_key_on_other_rows_are_refused() -> None:
    one, two = run_object("a", A), run_object("b", B)
    one["status"]["datasetSha256"], two["status"]["datasetSha256"] = "ab" * 32, "cd" * 32
    with pytest.raises(SummaryError, match=r"the dataset sha256 is abab.* and cdcd"):
        rank([e for e in (entry_from_run(one), entry_from_run(two)) if e is not None])


def test_a_board_of_one_question_runs_has_no_ranks() -> None:
    base = dict(
        namespace="", workload="", model="m", framework="", engine_args_set="", dataset="d",
        comparison_key="k", avg_latency_ms=None, error_count=0, questions=1, completed_at=None,
    )  # fmt: skip
    entries = [
        Entry(run="x", avg_score=1.0, scores=(1.0,), **base),  # type: ignore[arg-type]
        Entry(run="y", avg_score=0.0, scores=(0.0,), **base),  # type: ignore[arg-type]
    ]
    (board,) = rank(entries)
    assert [p.rank for p in board.places] == [None, None]
    assert "needs at least 2" in (board.places[0].rank_unavailable or "")


def test_refusal_is_a_summary_error() -> None:
    assert issubclass(SummaryError, ValueError)


def test_cluster_runs_carry_their_serving_figures() -> None:
    fast, slow = run_object("fast", A), run_object("slow", A)
    fast["status"]["serving"] = {"ttftP50Ms": 120.0, "outputTokensPerSecond": 850.5}
    slow["status"]["serving"] = {"ttftP50Ms": 240.0, "outputTokensPerSecond": 410.0}
    entries = [entry_from_run(body) for body in (fast, slow, run_object("old", A))]
    assert [(e.ttft_p50_ms, e.output_tokens_per_second) for e in entries if e] == [
        (120.0, 850.5), (240.0, 410.0), (None, None),
    ]  # fmt: skip
    (board,) = rank(e for e in entries if e is not None)
    front = {place.entry.run: place.pareto for place in board.places}
    assert front == {"fast": True, "slow": False, "old": None}  # same score, faster wins
