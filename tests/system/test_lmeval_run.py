"""An EvaluationRun with ``spec.lmEval``: the real lm_eval CLI in the lm-eval Job, offline on
gsm8k-format rows from a ConfigMap, gated by ``thresholds.metrics``; metrics in status and on
/metrics. In the devcluster the Job's pod is a local process of this .venv: lm_eval must be
importable there (``make setup`` installs the ``lm-eval`` extra)."""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any

import pytest

from kyai.api import EvaluationRunStatus
from kyai_testing import LLMDouble
from system.helpers import Kubectl, Operator

if importlib.util.find_spec("lm_eval") is None:
    if os.environ.get("CI"):
        pytest.fail("lm_eval is not installed (make setup installs the lm-eval extra)")
    pytest.skip("lm_eval is not installed (pip install -e '.[lm-eval]')", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# gsm8k's native format. The conftest's double answers "Final answer: 2" to a message with
# "$" and "I do not know" otherwise. By hand: row 1 flexible-extract "2" = 2 ✓, strict-match
# (needs "#### ") ✗; row 2 ✗ both. flexible-extract 1/2 = 0.5, strict-match 0/2 = 0.
ROWS = [
    {"question": "Each $ coin is 1. Two coins make how many?", "answer": "1+1=2\n#### 2"},
    {"question": "Three cats and four cats: how many cats?", "answer": "3+4=7\n#### 7"},
]
FLEX = "gsm8k/exact_match,flexible-extract"
STRICT = "gsm8k/exact_match,strict-match"


def manifests(namespace: str, double: LLMDouble) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "gsm8k-rows", "namespace": namespace},
            "data": {"test.jsonl": "".join(json.dumps(row) + "\n" for row in ROWS)},
        },
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": "cand", "namespace": namespace},
            "spec": {"framework": "vllm", "model": "cand", "endpoint": {"url": double.base_url}},
        },
    ]


def lmeval_run(name: str, namespace: str, gates: dict[str, float]) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "workloadRef": {"name": "cand"},
            "lmEval": {
                "tasks": [
                    {
                        "name": "gsm8k",
                        "numFewshot": 0,
                        "dataFiles": [
                            {
                                "split": "test",
                                "configMapRef": {"name": "gsm8k-rows", "key": "test.jsonl"},
                            }
                        ],
                    }
                ]
            },
            "generation": {"concurrency": 2},
            "thresholds": {"metrics": gates},
        },
    }


def finished(obj: dict[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def passed(obj: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Passed")


def test_lmeval_run_gates_its_metrics(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    kubectl.apply(
        *manifests(namespace, double),
        lmeval_run("met", namespace, {FLEX: 0.5}),
        lmeval_run("missed", namespace, {STRICT: 0.5, "gsm8k/acc,none": 0.1}),
    )
    met = kubectl.wait_for("evaluationrun", "met", namespace, finished, timeout=600)
    assert met["status"]["phase"] == "Succeeded", (met["status"], operator.logs())
    status = EvaluationRunStatus.model_validate(met["status"])
    assert status.metrics == {FLEX: 0.5, STRICT: 0.0}
    assert passed(met)["status"] == "True"

    missed = kubectl.wait_for("evaluationrun", "missed", namespace, finished, timeout=600)
    assert missed["status"]["phase"] == "Succeeded", (missed["status"], operator.logs())
    gate = passed(missed)
    assert gate["status"] == "False"
    assert "strict-match 0.0000 < 0.5" in gate["message"]
    assert "gsm8k/acc,none is missing" in gate["message"]
    shown = EvaluationRunStatus.model_validate(missed["status"]).metrics or {}
    assert shown["gsm8k/acc,none"] == -1 and shown[FLEX] == 0.5

    lines = [
        line
        for line in operator.metrics().splitlines()
        if line.startswith("kyai_evaluation_metric{") and namespace in line
    ]
    flex = [line for line in lines if 'run="met"' in line and 'filter="flexible-extract"' in line]
    assert len(flex) == 1, lines
    assert 'task="gsm8k"' in flex[0] and 'metric="exact_match"' in flex[0]
    assert flex[0].endswith(" 0.5")

    # The runs held their Workload while they ran (kyai.io/in-use) and freed it once done:
    # deleting it now completes.
    held = kubectl.get("workload", "cand", namespace)["metadata"].get("finalizers") or []
    assert "kyai.io/in-use" in held, held
    kubectl.run("delete", "workload", "cand", "-n", namespace, "--timeout=30s")
