"""The data of ``kyai view`` / ``kyai report``: runs, boards, pairs, questions and notices."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kyai.api import EvaluationRunStatus
from kyai.api.evaluationsweep import EvaluationSweepStatus, SweepRow
from kyai.api.serving import ServingStatus
from kyai.cli import main
from kyai.view.payload import build
from kyai.view.sources import ViewError, cluster_sources, directory_sources

RunFactory = Callable[..., Path]

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def right_on(rows: set[int], n: int = 100) -> list[float]:
    return [1.0 if i in rows else 0.0 for i in range(n)]


def page_data(*paths: Path) -> dict[str, Any]:
    return build(directory_sources(list(paths)), now=NOW)


def cli_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> Any:
    status = main([*map(str, args), "-o", "json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


def the_pair(data: dict[str, Any], baseline: str, candidate: str) -> dict[str, Any]:
    ids = {run["label"]: run["id"] for run in data["runs"]}
    (found,) = [
        p
        for p in data["pairs"]
        if (p["baseline"], p["candidate"]) == (ids[baseline], ids[candidate])
    ]
    return found


def messages(data: dict[str, Any]) -> list[tuple[str | None, str]]:
    return [(notice["run"], notice["message"]) for notice in data["notices"]]


# -- pairs --------------------------------------------------------------------------------------


def test_every_ordered_pair_of_one_key_is_compared_and_no_pair_across_keys(
    make_run: RunFactory,
) -> None:
    runs = [make_run(name, right_on(set(range(50 + i)))) for i, name in enumerate("abc")]
    other = make_run("d", right_on(set(range(70))), key="key-b")
    data = page_data(*runs, other)
    pairs = {(p["baseline"], p["candidate"]) for p in data["pairs"]}
    assert pairs == {(x, y) for x in ("r0", "r1", "r2") for y in ("r0", "r1", "r2") if x != y}
    assert [board["runs"] for board in data["boards"]] == [["r2", "r1", "r0"], ["r3"]]


def test_the_discordant_questions_are_kyai_compare_s(
    make_run: RunFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    base = make_run("bf16", right_on(set(range(60))))
    cand = make_run("fp8", right_on(set(range(55)) | set(range(60, 70))))  # b = 5, c = 10
    data = page_data(base, cand)
    compared = cli_json(capsys, "compare", base, cand)
    pair = the_pair(data, "bf16", "fp8")
    counted = compared["discordant"]["baseline_only"] + compared["discordant"]["candidate_only"]
    assert len(pair["discordant"]) == counted == 15
    assert pair["discordant"] == list(range(55, 70))
    assert pair["baseline_scores"] == [1.0] * 5 + [0.0] * 10
    assert {key: compared[key] for key in pair["comparison"]} == pair["comparison"]
    assert pair["sentence"].startswith("No detectable difference between fp8 (model-fp8) and bf16")
    mirrored = the_pair(data, "fp8", "bf16")
    assert mirrored["comparison"]["mean_difference"] == -pair["comparison"]["mean_difference"]
    assert mirrored["comparison"]["p_value"] == pair["comparison"]["p_value"]
    assert mirrored["discordant"] == pair["discordant"]


def test_continuous_scores_list_every_question_scored_differently(make_run: RunFactory) -> None:
    one = [0.5, 1.0, 0.0, 0.25, 0.75, 1.0]
    two = [0.5, 0.5, 0.0, 0.25, 1.0, 1.0]
    data = page_data(make_run("a", one), make_run("b", two))
    pair = the_pair(data, "a", "b")
    assert pair["discordant"] == [1, 4]
    assert pair["comparison"]["discordant"] is None and pair["comparison"]["test"] == "paired-t"


def test_a_pair_kyai_compare_cannot_make_says_why(make_run: RunFactory) -> None:
    data = page_data(make_run("a", [1.0]), make_run("b", [0.0]))
    assert "at least 2" in the_pair(data, "a", "b")["refused"]


def test_a_copy_of_a_run_is_named_as_one_run(make_run: RunFactory, tmp_path: Path) -> None:
    run = make_run("a", right_on({1, 2, 3}, 10))
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in run.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    assert "identical" in the_pair(page_data(run, copy), "a", "copy")["same_run"]


def test_runs_of_one_key_with_other_rows_are_an_error_naming_both(make_run: RunFactory) -> None:
    a = make_run("a", right_on({1}, 10))
    b = make_run("b", right_on({1}, 10), dataset_sha256="sha-2")
    with pytest.raises(ViewError, match=r"a/summary.json.*b/summary.json"):
        page_data(a, b)


# -- runs, ranks and questions ------------------------------------------------------------------


def test_ranks_and_intervals_are_kyai_leaderboard_s(
    make_run: RunFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [
        make_run(name, right_on(set(range(k)))) for name, k in (("a", 40), ("b", 70), ("c", 72))
    ]
    data = page_data(*paths)
    board = cli_json(capsys, "leaderboard", "--from", *paths)["boards"][0]
    expected = {
        entry["run"]: (entry["rank"], entry["avg_score_interval"]) for entry in board["entries"]
    }
    assert {run["label"]: (run["rank"], run["interval"]) for run in data["runs"]} == expected
    assert expected["a"][0] == 3 and expected["b"][0] == expected["c"][0] == 1
    assert data["boards"][0]["rows"][0][:3] == ["1", "-", "c"]  # the leaderboard's own cells


def test_a_run_shows_its_errors_by_kind_and_serving_figures(make_run: RunFactory) -> None:
    data = page_data(make_run("a", [1.0, 0.0, 1.0], errors={1: "HTTP 500"}))
    (run,) = data["runs"]
    assert run["errors"] == {"candidate_http_error": 1} and run["error_count"] == 1
    assert run["serving"] == {
        "ttft_p50_ms": 12.5,
        "ttft_p90_ms": 30.0,
        "output_tokens_per_second": 99.0,
    }
    assert run["comparison_key"] == "key-a" and run["avg_score"] == pytest.approx(2 / 3)


def test_the_engines_itl_stands_beside_the_clients_where_its_metrics_were_read(
    make_run: RunFactory,
) -> None:
    serving = {
        "ttft_ms": {"p50": 12.5},
        "itl_ms": {"mean": 4.9, "p50": 0.004, "p90": 20.1},
        "server": {"url": "http://e/metrics", "itl_ms": {"mean": 5.0, "p50": 5.1}},
    }
    read = page_data(make_run("a", [1.0, 0.0], serving=serving))["runs"][0]["serving"]
    assert read == {"ttft_p50_ms": 12.5, "itl_p50_ms": 0.004, "server_itl_p50_ms": 5.1}
    unread = {key: value for key, value in serving.items() if key != "server"}
    alone = page_data(make_run("b", [1.0, 0.0], serving=unread))["runs"][0]["serving"]
    assert alone == {"ttft_p50_ms": 12.5, "itl_p50_ms": 0.004}


def test_a_cluster_runs_engine_itl_comes_from_its_status(cluster: list[dict[str, Any]]) -> None:
    run = run_object("a", right_on({1}, 4))
    run["status"]["serving"] = ServingStatus.model_validate(
        {"ttftP50Ms": 20.0, "itlP50Ms": 0.004, "server": {"itlP50Ms": 5.1, "requests": 4}}
    ).model_dump(by_alias=True, exclude_none=True)
    cluster.append(run)
    data = build(cluster_sources("evals", None, None), now=NOW)
    assert data["runs"][0]["serving"] == {
        "ttft_p50_ms": 20.0,
        "itl_p50_ms": 0.004,
        "server_itl_p50_ms": 5.1,
    }


def test_questions_join_the_row_the_answer_and_the_judgement(make_run: RunFactory) -> None:
    answer = '</script><img src=x onerror="alert(1)">'
    data = page_data(make_run("a", [1.0, 0.0], answers={0: answer}, errors={1: "HTTP 500"}))
    first, second = data["questions"]["r0"]
    assert first == {
        "i": 0, "id": "q0", "question": "question 0?", "truth": "truth 0", "answer": answer,
        "reasoning": "thought", "score": 1.0, "judgement": "judged 1.0", "reply": None,
        "error": None, "answered": True, "judged": True,
    }  # fmt: skip
    assert second["error"] == "candidate_http_error: HTTP 500" and second["score"] == 0.0


# -- what cannot be shown -----------------------------------------------------------------------


def test_a_missing_directory_is_a_notice_naming_it(make_run: RunFactory, tmp_path: Path) -> None:
    data = page_data(make_run("a", [1.0, 0.0]), tmp_path / "gone")
    assert messages(data) == [(str(tmp_path / "gone"), "no such file or directory: not shown")]
    assert [run["label"] for run in data["runs"]] == ["a"]


def test_a_run_not_judged_yet_is_a_notice(make_run: RunFactory, tmp_path: Path) -> None:
    waiting = tmp_path / "waiting"
    waiting.mkdir()
    (waiting / "run.json").write_text("{}")
    data = page_data(make_run("a", [1.0, 0.0]), waiting)
    assert (str(waiting), "a run not judged yet (no summary.json): no score to show") in messages(
        data
    )


def test_missing_files_are_notices_and_their_questions_are_not_shown(
    make_run: RunFactory,
) -> None:
    data = page_data(make_run("a", [1.0, 0.0], files=("judgements",)), make_run("b", [0.0, 0.0]))
    found = messages(data)
    assert [run for run, _ in found] == ["a", "a"]
    assert "no dataset.jsonl beside" in found[0][1] and "its questions" in found[0][1]
    assert "no generations.jsonl beside" in found[1][1] and "its answers" in found[1][1]
    (question, _) = data["questions"]["r0"]
    assert question["answer"] is None and question["judgement"] == "judged 1.0"
    assert question["answered"] is False


def test_a_run_without_per_question_scores_is_shown_unranked_with_a_notice(
    make_run: RunFactory,
) -> None:
    data = page_data(make_run("a", [1.0, 0.0, 1.0]), make_run("old", None, avg_score=0.9))
    old = data["runs"][1]
    assert old["rank"] is None and old["has_scores"] is False and old["avg_score"] == 0.9
    assert any(run == "old" and "no per-question scores" in text for run, text in messages(data))
    assert data["pairs"] == []


def test_a_directory_that_is_not_a_run_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "photos").mkdir()
    with pytest.raises(ViewError, match=f"{tmp_path / 'photos'}: not a run directory"):
        directory_sources([tmp_path / "photos"])
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ViewError, match=f"{tmp_path / 'notes.txt'}: not a run directory"):
        directory_sources([tmp_path / "notes.txt"])


def test_an_unreadable_summary_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "summary.json").write_text("{")
    with pytest.raises(ViewError, match=f"{tmp_path / 'broken' / 'summary.json'}: not a readable"):
        directory_sources([tmp_path / "broken"])


def test_nothing_to_show_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ViewError, match=r"no run to show.*no such file"):
        directory_sources([tmp_path / "gone"])


# -- a cluster ----------------------------------------------------------------------------------


def run_object(name: str, scores: list[float] | None, phase: str = "Succeeded") -> dict[str, Any]:
    status = EvaluationRunStatus(
        phase=phase,  # type: ignore[arg-type]
        avg_score=None if scores is None else sum(scores) / len(scores),
        comparison_key="key-a",
        dataset="capitals",
        model=f"model-{name}",
        questions=None if scores is None else len(scores),
        scores=scores,
        errors={},
        error_count=0,
        results_claim=f"results-{name}",
        results_path=f"/results/{name}",
        serving=ServingStatus(ttft_p50_ms=20.0),
    )
    return {
        "metadata": {"name": name, "namespace": "evals"},
        "spec": {"workloadRef": {"name": f"w-{name}"}},
        "status": status.model_dump(by_alias=True, exclude_none=True),
    }


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The EvaluationRuns the fake cluster lists (the test fills it)."""
    items: list[dict[str, Any]] = []
    monkeypatch.setattr(
        "kyai.leaderboard.cluster_runs", lambda namespace, all_namespaces: (items, {})
    )
    return items


def test_cluster_runs_whose_files_are_not_reachable_are_shown_from_status_with_a_notice(
    cluster: list[dict[str, Any]],
) -> None:
    cluster += [run_object("a", right_on({1, 2}, 10)), run_object("b", right_on({2, 3}, 10))]
    cluster.append(run_object("c", None, phase="Generating"))
    data = build(cluster_sources("evals", None, None), now=NOW)
    assert [run["label"] for run in data["runs"]] == ["a", "b"]
    assert all(not run["has_files"] and run["has_scores"] for run in data["runs"])
    found = dict(messages(data))
    assert "results claim results-a at /results/a" in found["a"] and "--results-root" in found["a"]
    assert found["c"] == "phase Generating: no score to show (not a succeeded run)"
    assert the_pair(data, "a", "b")["discordant"] == [1, 3]  # from the status' scores
    assert data["questions"] == {} and data["title"] == "namespace evals"


def test_cluster_runs_read_their_files_under_the_results_root(
    cluster: list[dict[str, Any]], tmp_path: Path, run_writer: RunFactory
) -> None:
    scores = right_on({1, 2}, 10)
    cluster += [run_object("a", scores), run_object("b", right_on({2}, 10))]
    root = tmp_path / "volumes"
    run_writer(root / "evals" / "results-a", "a", scores)  # a devcluster's layout
    data = build(cluster_sources("evals", None, root), now=NOW)
    assert [run["has_files"] for run in data["runs"]] == [True, False]
    assert len(data["questions"]["r0"]) == 10 and "r1" not in data["questions"]
    found = dict(messages(data))
    assert list(found) == ["b"] and f"not under --results-root {root}" in found["b"]


def test_cluster_files_with_other_scores_are_not_shown(
    cluster: list[dict[str, Any]], tmp_path: Path, run_writer: RunFactory
) -> None:
    cluster.append(run_object("a", right_on({1, 2}, 10)))
    run_writer(tmp_path, "a", right_on({5}, 10))  # DIR/RUN: another run's files
    data = build(cluster_sources("evals", None, tmp_path), now=NOW)
    assert data["runs"][0]["has_files"] is False
    assert "holds other scores than the run's status" in dict(messages(data))["a"]


def test_a_sweep_shows_its_table_its_chart_points_and_its_runs(
    cluster: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kyai.sweep_board import board_from

    rows = [
        SweepRow.model_validate(
            {"cell": f"c{i}", "workload": f"w{i}", "snapshot": "s", "run": f"r{i}",
             "phase": "Succeeded", "avgScore": score, "rank": 1, "ttftP50Ms": ttft,
             "pareto": pareto}
        )
        for i, (score, ttft, pareto) in enumerate([(0.8, 30.0, True), (0.7, 40.0, False)])
    ]  # fmt: skip
    rows.append(SweepRow(cell="c9", workload="w9", snapshot="s", run="gone", phase="Succeeded"))
    status = EvaluationSweepStatus(phase="Succeeded", table=rows, table_rows=len(rows))
    sweep = {"metadata": {"name": "pick", "namespace": "evals"}, "status": status.to_k8s()}
    monkeypatch.setattr("kyai.sweep_board.read_board", lambda namespace, name: board_from(sweep))
    cluster += [run_object("r0", right_on({1}, 10)), run_object("r1", right_on({1, 2}, 10))]
    cluster.append(run_object("other", right_on({3}, 10)))  # not the sweep's
    data = build(cluster_sources(None, "pick", None), now=NOW)
    assert [run["label"] for run in data["runs"]] == ["r0", "r1"]
    sweep_data = data["sweep"]
    assert sweep_data["heading"].startswith("SWEEP evals/pick: Succeeded")
    (group,) = sweep_data["groups"]
    assert [p["pareto"] for p in group["points"]] == [True, False, None]
    assert [p["run_id"] for p in group["points"]] == ["r0", "r1", None]
    assert group["rows"][0][:4] == ["1", "w0", "-", "r0"]
    assert ("gone", "named by the sweep's table, but no such EvaluationRun") in messages(data)


def test_runs_of_one_name_are_shown_by_their_paths(tmp_path: Path, run_writer: RunFactory) -> None:
    one = run_writer(tmp_path / "monday", "run", right_on({1}, 4))
    two = run_writer(tmp_path / "tuesday", "run", right_on({2}, 4))
    data = page_data(one, two)
    assert [run["label"] for run in data["runs"]] == [str(one), str(two)]
    assert str(one) in the_pair(data, str(one), str(two))["sentence"]


def test_a_cluster_run_shows_its_engine_args_once_its_workload_is_gone(
    cluster: list[dict[str, Any]],
) -> None:
    # Issue 43: the cluster lists no Workload (a sweep deleted its derived ones); the run's
    # status names the EngineArgsSet that served it.
    cluster += [run_object("a", right_on({1, 2}, 10)), run_object("b", right_on({2}, 10))]
    cluster[0]["status"] |= {"engineArgsSet": "set-a", "engineArgsHash": "0123456789abcdef"}
    data = build(cluster_sources("evals", None, None), now=NOW)
    shown = {
        run["label"]: (run["engine_args_set"], run["engine_args_hash"]) for run in data["runs"]
    }
    assert shown == {"a": ("set-a", "0123456789abcdef"), "b": ("", None)}
    (board,) = data["boards"]
    column = board["columns"].index("ENGINE-ARGS")
    assert {row[2]: row[column] for row in board["rows"]} == {"a": "set-a", "b": "-"}


def test_a_sweeps_two_runs_side_by_side_start_from_the_sweeps_baseline(
    cluster: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, make_run: RunFactory
) -> None:
    from kyai.sweep_board import board_from

    # Issue 43: the top-scoring run is named first, but the sweep compares with its baseline
    # (DELTA = cell - baseline): the page's pair starts from the baseline, the same sign.
    scores = {"r0": right_on({0, 1, 2, 3}, 10), "r1": right_on({0, 1}, 10)}
    rows = [
        SweepRow.model_validate(
            {"cell": f"c{name}", "workload": f"w{name}", "snapshot": "s", "run": name,
             "phase": "Succeeded", "avgScore": sum(values) / 10, "comparisonKey": "key-a",
             **({"baseline": True} if name == "r1" else {"delta": 0.2})}
        )
        for name, values in scores.items()
    ]  # fmt: skip
    status = EvaluationSweepStatus(phase="Succeeded", table=rows, table_rows=len(rows))
    sweep = {"metadata": {"name": "pick", "namespace": "evals"}, "status": status.to_k8s()}
    monkeypatch.setattr("kyai.sweep_board.read_board", lambda namespace, name: board_from(sweep))
    cluster += [run_object(name, values) for name, values in scores.items()]
    data = build(cluster_sources(None, "pick", None), now=NOW)
    ids = {run["label"]: run["id"] for run in data["runs"]}
    assert list(ids) == ["r0", "r1"]  # the sweep's table order: the top-scoring run first
    (board,) = data["boards"]
    assert board["baseline"] == ids["r1"]
    compared = the_pair(data, "r1", "r0")["comparison"]
    assert compared["mean_difference"] == pytest.approx(rows[0].delta)
    # Runs without a sweep: no baseline of their own (the first run named is the page's).
    plain = page_data(make_run("x", right_on({1}, 4)), make_run("y", right_on({2}, 4)))
    assert [board["baseline"] for board in plain["boards"]] == [None]
