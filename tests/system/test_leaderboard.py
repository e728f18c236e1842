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
