"""Guards of the run controller (issue 14), at the system level: ``kubectl apply`` against
``kyai devcluster`` with the operator as a process.

- thresholds hold at their exact boundary: ``avgScore`` passes when the score equals it
  (``>=``), ``maxErrorRate`` passes when the error rate equals it (``<=``);
- a generation or judge Job whose worker exits non-zero ends the run ``Failed`` (it never
  waits forever).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge
from system.helpers import Kubectl, Operator, condition, free_port

GEN = "Answer with the bare answer."
ROWS = [
    {"instruction": "Capital of France?", "groundTruthResponse": "Paris"},
    {"instruction": "Capital of Italy?", "groundTruthResponse": "Rome"},
    {"instruction": "Capital of Spain?", "groundTruthResponse": "Madrid"},
    {"instruction": "Capital of Peru?", "groundTruthResponse": "Lima"},
]


@pytest.fixture(scope="module")
def server() -> Iterator[LLMDouble]:
    """Two rows right, one wrong, one failing: avgScore 0.5, error rate 0.25, both exact."""
    double = LLMDouble(
        models=[ModelSpec("cand", max_model_len=4096), ModelSpec("judge", max_model_len=8192)],
        rules=[
            Rule(match="France", model="cand", content="Paris"),
            Rule(match="Italy", model="cand", content="Rome"),
            Rule(match="Spain", model="cand", content="Barcelona"),
            Rule(match="Peru", model="cand", status=500),
            Rule(model="judge", content=substring_judge),
        ],
    )
    with double.start_in_thread() as running:
        yield running


def objects(namespace: str, url: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Snapshot",
            "metadata": {"name": "capitals", "namespace": namespace},
            "spec": {
                "source": {"rows": ROWS},
                "prompts": {"generation": GEN, "judge": 'Return JSON {"score": 0..1}.'},
            },
        },
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": "cand", "namespace": namespace},
            "spec": {"framework": "vllm", "model": "cand", "endpoint": {"url": url}},
        },
    ]


def run(name: str, namespace: str, judge_url: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "workloadRef": {"name": "cand"},
            "snapshotRef": {"name": "capitals"},
            "judge": {"type": "llm", "llm": {"endpoint": judge_url, "model": "judge"}},
            "generation": {"concurrency": 4, "maxRetries": 0},
            "jobs": {"backoffLimit": 0},
            **spec,
        },
    }


def finished(obj: dict[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def test_thresholds_pass_at_their_exact_boundary(
    kubectl: Kubectl, operator: Operator, server: LLMDouble, namespace: str
) -> None:
    kubectl.apply(
        *objects(namespace, server.base_url),
        run("at", namespace, server.base_url, thresholds={"avgScore": 0.5, "maxErrorRate": 0.25}),
        run("score-above", namespace, server.base_url, thresholds={"avgScore": 0.5001}),
        run("rate-below", namespace, server.base_url, thresholds={"maxErrorRate": 0.2499}),
    )
    done = {
        name: kubectl.wait_for("evaluationrun", name, namespace, finished, timeout=90)
        for name in ("at", "score-above", "rate-below")
    }
    for obj in done.values():
        status = obj["status"]
        assert status["phase"] == "Succeeded", (status, operator.logs())
        # The figures sit exactly on the thresholds.
        assert status["avgScore"] == 0.5
        assert status["questions"] == 4 and status["errorCount"] == 1

    at = condition(done["at"], "Passed")
    assert at["status"] == "True", at
    assert at["reason"] == "ThresholdsMet"

    above = condition(done["score-above"], "Passed")
    assert above["status"] == "False" and "avgScore" in above["message"], above
    below = condition(done["rate-below"], "Passed")
    assert below["status"] == "False" and "error rate" in below["message"], below


def test_a_failed_judge_job_fails_the_run(
    kubectl: Kubectl, operator: Operator, server: LLMDouble, namespace: str
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    asked = len(server.requests)
    kubectl.apply(*objects(namespace, server.base_url), run("no-judge", namespace, closed))
    done = kubectl.wait_for("evaluationrun", "no-judge", namespace, finished, timeout=90)
    status = done["status"]
    assert status["phase"] == "Failed", (status, operator.logs())
    ready = condition(done, "Ready")
    # The operator checked the judge before the generation: the check's own reason, and the
    # candidate was asked nothing.
    assert ready["status"] == "False" and ready["reason"] == "JudgeUnreachable", ready
    assert f"Cannot reach {closed}/models" in status["message"], status["message"]
    assert len(server.requests) == asked
    assert "avgScore" not in status


def test_a_failed_generation_job_fails_the_run(
    kubectl: Kubectl, operator: Operator, server: LLMDouble, namespace: str
) -> None:
    # A candidate that answered the Workload's probe, then went away before the run started:
    # the generation Job's `kyai generate` cannot reach it and exits non-zero.
    with LLMDouble(models=[ModelSpec("cand", max_model_len=4096)]).start_in_thread() as gone:
        kubectl.apply(*objects(namespace, gone.base_url))
        kubectl.wait_for(
            "workload",
            "cand",
            namespace,
            lambda obj: (obj.get("status") or {}).get("phase") == "Ready",
        )
    kubectl.apply(run("no-candidate", namespace, server.base_url))
    done = kubectl.wait_for("evaluationrun", "no-candidate", namespace, finished, timeout=90)
    status = done["status"]
    assert status["phase"] == "Failed", (status, operator.logs())
    ready = condition(done, "Ready")
    # `kyai generate` checked its candidate first: the run fails with the check's reason.
    assert ready["status"] == "False" and ready["reason"] == "CandidateUnreachable", ready
    assert "no-candidate-generate" in status["message"], status["message"]
    jobs = kubectl.items("jobs", namespace, "-l", "kyai.io/evaluation-run=no-candidate")
    assert [j["metadata"]["name"] for j in jobs] == ["no-candidate-generate"]  # never judged
