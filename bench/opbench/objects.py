"""The objects the operator bench applies: a Snapshot, Workloads, EvaluationRuns, double rules."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "out"
NAMESPACE = "bench"
WORKER_IMAGE = "ghcr.io/kyai-io/kyai-operator:bench"
GROUP_PATH = "/apis/kyai.io/v1alpha1"
LABEL_RUN = "kyai.io/evaluation-run"
SNAPSHOT = "capitals"
JUDGE_MODEL = "judge"
PHASE_ORDER = ("Pending", "Generating", "Judging", "Succeeded")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

GENERATION_PROMPT = "Answer with the bare answer."
JUDGE_PROMPT = 'Score 1 if the response has the ground truth, else 0. Return JSON {"score": 0..1}.'
# (country, ground truth, what every candidate answers): four right, one wrong.
CAPITALS = (
    ("France", "Paris", "Paris"),
    ("Italy", "Rome", "Rome"),
    ("Spain", "Madrid", "Barcelona"),
    ("Japan", "Tokyo", "Tokyo"),
    ("Peru", "Lima", "Lima"),
)
EXPECTED_SCORE = sum(truth in answer for _, truth, answer in CAPITALS) / len(CAPITALS)


def snapshot_body() -> dict[str, Any]:
    rows = [
        {
            "instruction": f"Capital of {country}?",
            "groundTruthResponse": truth,
            "externalRowId": country.lower(),
        }
        for country, truth, _ in CAPITALS
    ]
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Snapshot",
        "metadata": {"name": SNAPSHOT, "namespace": NAMESPACE},
        "spec": {
            "source": {"rows": rows},
            "prompts": {"generation": GENERATION_PROMPT, "judge": JUDGE_PROMPT},
        },
    }


def workload_body(index: int, double_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": f"wl-{index}", "namespace": NAMESPACE},
        "spec": {
            "framework": "vllm",
            "model": f"cand-{index}",
            "endpoint": {"url": f"{double_url}/v1"},
        },
    }


def run_body(index: int, workloads: int, double_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {"name": run_name(index), "namespace": NAMESPACE},
        "spec": {
            "workloadRef": {"name": f"wl-{index % workloads}"},
            "snapshotRef": {"name": SNAPSHOT},
            "judge": {"type": "llm", "llm": {"endpoint": f"{double_url}/v1", "model": JUDGE_MODEL}},
            "generation": {"concurrency": 4},
        },
    }


def run_name(index: int) -> str:
    return f"run-{index:03d}"


def double_rules(workloads: int) -> list[dict[str, Any]]:
    return [
        {"match": country, "model": f"cand-{index}", "content": answer}
        for index in range(workloads)
        for country, _, answer in CAPITALS
    ]


# -- what the watches saw ------------------------------------------------------------------
