"""``kyai leaderboard`` against a cluster: EvaluationRuns read through the kubeconfig."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from system.helpers import Kubectl


def put_run(
    kubectl: Kubectl, namespace: str, name: str, key: str, score: float, latency: float | None,
    *, phase: str = "Succeeded", workload: str = "qwen", scores: list[float] | None = None,
) -> None:  # fmt: skip
    kubectl.apply(
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "EvaluationRun",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"workloadRef": {"name": workload}, "snapshotRef": {"name": "s"}},
        }
    )
    status: dict[str, Any] = {
        "phase": phase, "avgScore": score, "avgLatencyMs": latency, "comparisonKey": key,
        "model": f"model-{name}", "framework": "vllm", "dataset": "capitals", "questions": 4,
        "errorCount": 0, "completedAt": "2026-01-31T12:00:00Z",
    }  # fmt: skip
    if scores is not None:
        status.update(scores=scores, questions=len(scores))
    kubectl.run(
        "patch", "evaluationrun", name, "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip


def leaderboard(kubectl: Kubectl, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kyai.cli", "leaderboard", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECONFIG": str(kubectl.kubeconfig)},
    )


def test_leaderboard_ranks_cluster_runs_per_key_by_score_then_latency(
    kubectl: Kubectl, namespace: str
) -> None:
    kubectl.apply(
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": "qwen", "namespace": namespace},
            "spec": {
                "framework": "vllm",
                "model": "Qwen/Qwen3-8B",
                "engineArgsSetRef": {"name": "fast"},
            },
        }
    )
    put_run(kubectl, namespace, "slow", "key-a", 0.75, 900.0)
    put_run(kubectl, namespace, "fast", "key-a", 0.75, 100.0)
    put_run(kubectl, namespace, "best", "key-a", 0.8, 5000.0)
    put_run(kubectl, namespace, "other-key", "key-b", 0.99, 1.0)
    put_run(kubectl, namespace, "running", "key-a", 1.0, 1.0, phase="Judging")
    result = leaderboard(kubectl, "-n", namespace, "-o", "json")
    assert result.returncode == 0, result.stderr
    boards = json.loads(result.stdout)["boards"]
    assert [board["comparison_key"] for board in boards] == ["key-a", "key-b"]
    assert [entry["run"] for entry in boards[0]["entries"]] == ["best", "fast", "slow"]
    assert {entry["comparison_key"] for entry in boards[0]["entries"]} == {"key-a"}
    fast = boards[0]["entries"][1]
    assert (fast["workload"], fast["engine_args_set"], fast["namespace"]) == (
        "qwen",
        "fast",
        namespace,
    )
    everywhere = leaderboard(kubectl, "-A", "--key", "key-b", "-o", "json")
    assert everywhere.returncode == 0, everywhere.stderr
    (board,) = json.loads(everywhere.stdout)["boards"]
    assert [entry["run"] for entry in board["entries"]] == ["other-key"]
    table = leaderboard(kubectl, "-n", namespace)
    assert table.returncode == 0 and "COMPARISON KEY key-a" in table.stdout


def test_leaderboard_without_a_reachable_cluster_exits_3(kubectl: Kubectl, tmp_path: Path) -> None:
    kubeconfig = yaml.safe_load(kubectl.kubeconfig.read_text())
    for cluster in kubeconfig["clusters"]:
        cluster["cluster"]["server"] = "https://127.0.0.1:1"  # nothing listens there
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(kubeconfig))
    result = subprocess.run(
        [sys.executable, "-m", "kyai.cli", "leaderboard", "-n", "x"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "KUBECONFIG": str(config)},
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "cannot be reached" in result.stderr and "Traceback" not in result.stderr


def right_on(rows: set[int]) -> list[float]:
    return [1.0 if i in rows else 0.0 for i in range(100)]


def test_cluster_ranks_are_the_tie_aware_ranks_of_status_scores(
    kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    # A right on 0-69, B on 0-58 and 60-67, C on 0-59: Holm gives 1, 1, 2 (the hand
    # computation is in tests/integration/test_stats_ranks.py); the same summary.json files
    # give the same ranks and intervals.
    vectors = {
        "a": right_on(set(range(70))),
        "b": right_on(set(range(59)) | set(range(60, 68))),
        "c": right_on(set(range(60))),
    }
    for name, scores in vectors.items():
        put_run(kubectl, namespace, name, "key-s", sum(scores) / 100, 10.0, scores=scores)
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(
            json.dumps({"comparison_key": "key-s", "avg_score": sum(scores) / 100,
                        "avg_latency_ms": 10.0, "count": 100, "scores": scores})
        )  # fmt: skip
    put_run(kubectl, namespace, "no-scores", "key-s", 0.9, 10.0)
    result = leaderboard(kubectl, "-n", namespace, "--key", "key-s", "-o", "json")
    assert result.returncode == 0, result.stderr
    (board,) = json.loads(result.stdout)["boards"]
    ranked = [(e["run"], e["rank"]) for e in board["entries"]]
    assert ranked == [("a", 1), ("b", 1), ("c", 2), ("no-scores", None)]
    assert board["entries"][3]["rank_unavailable"].startswith("no per-question scores")
    files = leaderboard(kubectl, "--from", str(tmp_path), "-o", "json")
    (from_files,) = json.loads(files.stdout)["boards"]
    assert [(e["run"], e["rank"], e["avg_score_interval"]) for e in from_files["entries"]] == [
        (e["run"], e["rank"], e["avg_score_interval"]) for e in board["entries"][:3]
    ]


def report_data(kubectl: Kubectl, page: Path, *args: str) -> dict[str, Any]:
    """``kyai report ARGS -o PAGE`` against the cluster, and the data block the page shows."""
    done = subprocess.run(
        [sys.executable, "-m", "kyai.cli", "report", *args, "-o", str(page)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "KUBECONFIG": str(kubectl.kubeconfig)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    html = page.read_text(encoding="utf-8")
    block = html.split('<script type="application/json" id="kyai-data">', 1)[1]
    data: dict[str, Any] = json.loads(block.split("</script>", 1)[0])
    return data


def test_kyai_report_of_a_namespace_shows_the_cluster_runs_and_says_what_it_cannot_reach(
    kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    # Two runs of one key with per-question scores in their status; one run's results are
    # copied where --results-root finds them (DIR/RUN), the other's are not; a run still
    # judging has no score.
    first = right_on(set(range(80)))
    second = right_on(set(range(70)) | {85, 86})
    put_run(kubectl, namespace, "bf16", "key-v", sum(first) / 100, 10.0, scores=first)
    put_run(kubectl, namespace, "fp8", "key-v", sum(second) / 100, 10.0, scores=second)
    put_run(kubectl, namespace, "busy", "key-v", 0.5, 1.0, phase="Judging")
    for name in ("bf16", "fp8"):  # where the operator says their files are
        where = {"resultsClaim": "evals", "resultsPath": f"/results/{name}"}
        kubectl.run(
            "patch", "evaluationrun", name, "-n", namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": where}),
        )  # fmt: skip
    root = tmp_path / "volumes"  # laid out as a devcluster's: NAMESPACE/CLAIM/RUN
    (root / namespace / "evals" / "bf16").mkdir(parents=True)
    (root / namespace / "evals" / "bf16" / "summary.json").write_text(
        json.dumps({"comparison_key": "key-v", "avg_score": 0.8, "avg_latency_ms": 10.0,
                    "count": 100, "scores": first})
    )  # fmt: skip

    data = report_data(
        kubectl, tmp_path / "page.html", "-n", namespace, "--results-root", str(root)
    )
    runs = {run["label"]: run for run in data["runs"]}
    assert set(runs) == {"bf16", "fp8"}
    assert (runs["bf16"]["avg_score"], runs["fp8"]["avg_score"]) == (0.8, 0.72)
    assert {run["namespace"] for run in runs.values()} == {namespace}
    # The pair's figures are kyai.stats.compare's on the status scores: 12 questions differ.
    (pair, _) = data["pairs"]
    assert len(pair["discordant"]) == 12, pair
    said = [(notice["run"], notice["message"]) for notice in data["notices"]]
    assert any(run and "busy" in run and "Judging" in message for run, message in said), said
    assert any(run and "fp8" in run for run, _ in said), said  # its files: not under the root
    assert not any(run == "bf16" and "results-root" in message for run, message in said), said
    (bf16,) = [run for run in data["runs"] if run["label"] == "bf16"]
    assert bf16["directory"] == str(root / namespace / "evals" / "bf16")

    # Without --results-root, every run is shown from its status, and the page says so.
    bare = report_data(kubectl, tmp_path / "bare.html", "-n", namespace)
    assert {run["label"] for run in bare["runs"]} == {"bf16", "fp8"}
    assert not any(run["has_files"] for run in bare["runs"])
    bare_said = [notice["run"] or "" for notice in bare["notices"]]
    assert any("bf16" in run for run in bare_said) and any("fp8" in run for run in bare_said)
