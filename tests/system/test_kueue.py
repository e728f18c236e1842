"""Shared GPU clusters: the operator's Jobs wait in Kueue's queue and resume after preemption.

The devcluster emulates Kueue v0.14.8 (``DevClusterThread(kueue=True)``): a ClusterQueue
whose quota admits one worker Job at a time (each asks 100m of cpu), a LocalQueue ``team``,
WorkloadPriorityClasses ``low`` and ``high`` (preemption within the ClusterQueue). Runs
labelled for ``team`` get Jobs that carry the queue's labels and start suspended; a run whose
Job waits says ``WaitingForQuota`` with Kueue's message; a low-priority run whose generation
Job is preempted says ``Preempted``, then resumes from the answers it stored and ends with
the per-question scores of an undisturbed run. Not for ``--with-e2e`` (the emulation only).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge
from system.helpers import WORKER_IMAGE, Kubectl, Operator
from system.test_operator import phase_is, run, snapshot, workload

pytestmark = pytest.mark.timeout(240)

KUEUE = "kueue.x-k8s.io/v1beta1"
QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
#: Slow rows (0.5 s each, :func:`double`): half answered right ("done"), half wrong.
ROWS = [
    {
        "instruction": f"slow question {i}",
        "groundTruthResponse": "done" if i % 2 == 0 else "nope",
        "externalRowId": f"q{i}",
    }
    for i in range(16)
]
EXPECTED_SCORES = [1.0 if i % 2 == 0 else 0.0 for i in range(16)]


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevClusterThread | None]:
    """The devcluster with its Kueue emulation (module-scoped: this module's only)."""
    if request.config.getoption("--with-e2e"):
        pytest.skip("the Kueue emulation runs in the devcluster only")
    workdir = tmp_path_factory.mktemp("devcluster")
    with DevClusterThread(workdir=workdir, local_images=(WORKER_IMAGE,), kueue=True) as running:
        yield running


@pytest.fixture(scope="module")
def double() -> Iterator[LLMDouble]:
    """The candidate answers "done" after 0.5 s; the judge checks the ground truth."""
    server = LLMDouble(
        models=[ModelSpec("cand", max_model_len=4096), ModelSpec("judge", max_model_len=8192)],
        rules=[
            Rule(match="slow", model="cand", content="done", delay_s=0.5),
            Rule(model="judge", content=substring_judge),
        ],
    )
    with server.start_in_thread() as running:
        yield running


@pytest.fixture(scope="module")
def operator(
    kubectl: Kubectl, double: LLMDouble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """The operator, with a quick resync (Kueue's (un)suspends are read by the resync)."""
    running = Operator(
        kubectl.kubeconfig,
        tmp_path_factory.mktemp("operator"),
        env={
            "KYAI_DEFAULT_JUDGE_ENDPOINT": double.base_url,
            "KYAI_DEFAULT_JUDGE_MODEL": "judge",
            "HF_HUB_OFFLINE": "1",
            "KYAI_RUN_RESYNC_SECONDS": "1",
        },
    )
    running.start()
    yield running
    running.stop()


def queues(kubectl: Kubectl, namespace: str, *, cpu: str, preemption: str = "Never") -> None:
    """A ClusterQueue named after the namespace (cpu, memory and GPU quota), its LocalQueue."""
    resources = {"cpu": cpu, "memory": "4Gi", "nvidia.com/gpu": 2}
    kubectl.apply(
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
        *(
            {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass",
             "metadata": {"name": name}, "value": value}
            for name, value in (("low", 10), ("high", 1000))
        ),
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": namespace},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": preemption},
                "resourceGroups": [
                    {
                        "coveredResources": list(resources),
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": name, "nominalQuota": quota}
                                    for name, quota in resources.items()
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": namespace},
            "spec": {"clusterQueue": namespace},
        },
    )  # fmt: skip


def labelled(body: dict[str, Any], **labels: str) -> dict[str, Any]:
    body["metadata"]["labels"] = {**body["metadata"].get("labels", {}), **labels}
    return body


def ready(obj: dict[str, Any]) -> dict[str, Any]:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {}
    )


def reason_is(reason: str) -> Any:
    return lambda obj: ready(obj).get("reason") == reason


def test_queued_runs_wait_for_quota_and_their_jobs_carry_the_queue(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    queues(kubectl, namespace, cpu="100m")  # one worker Job at a time
    kubectl.apply(
        snapshot("capitals", namespace, ROWS[:6]),
        workload("cand", namespace, double),
        labelled(run("first", namespace, double, generation={"concurrency": 1}), **{QUEUE: "team"}),
    )
    kubectl.wait_for("evaluationrun", "first", namespace, phase_is("Generating"))
    kubectl.apply(labelled(run("second", namespace, double), **{QUEUE: "team"}))
    waiting = kubectl.wait_for(
        "evaluationrun", "second", namespace, reason_is("WaitingForQuota"), timeout=30
    )
    said = ready(waiting)
    assert said["status"] == "False", said
    assert "insufficient unused quota for cpu in flavor default-flavor" in said["message"], said
    assert "in LocalQueue team" in said["message"] and "second-generate" in said["message"]
    # Waiting for quota is progress held, not a failure: Reconciling, not Stalled.
    kinds = {c["type"]: c["status"] for c in waiting["status"]["conditions"]}
    assert kinds.get("Stalled") == "False" and waiting["status"]["phase"] == "Generating"
    for name in ("first", "second"):
        done = kubectl.wait_for(
            "evaluationrun", name, namespace, phase_is("Succeeded", "Failed"), timeout=120
        )
        assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs())
        assert done["status"]["scores"] == EXPECTED_SCORES[:6]
    jobs = kubectl.items("jobs", namespace)
    assert {job["metadata"]["name"] for job in jobs} == {
        f"{name}-{step}" for name in ("first", "second") for step in ("generate", "judge")
    }
    for job in jobs:
        assert job["metadata"]["labels"][QUEUE] == "team", job["metadata"]
    # Kueue admitted every Job (each has its Kueue Workload, Finished).
    admitted = kubectl.items("workloads.kueue.x-k8s.io", namespace)
    assert len(admitted) == 4
    assert all(
        any(c["type"] == "Finished" and c["status"] == "True" for c in wl["status"]["conditions"])
        for wl in admitted
    )


def test_a_preempted_run_resumes_from_its_answers_with_the_same_scores(
    kubectl: Kubectl,
    operator: Operator,
    double: LLMDouble,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queues(kubectl, namespace, cpu="100m", preemption="LowerPriority")
    double.reset()
    one_at_a_time = {"concurrency": 1}
    # The low run's generation slow enough (16 rows, 2 s each) that Kueue preempts it mid-way
    # however long the high run's Job takes to be made on a loaded machine; 0.5 s once it has.
    slow = double.rules[0]
    monkeypatch.setattr(slow, "delay_s", 2.0)  # put back after the test, whatever happens
    kubectl.apply(
        snapshot("capitals", namespace, ROWS),
        workload("cand", namespace, double),
        labelled(
            run("low", namespace, double, generation=one_at_a_time),
            **{QUEUE: "team", PRIORITY: "low"},
        ),
    )
    kubectl.wait_for(
        "evaluationrun", "low", namespace,
        lambda obj: ((obj.get("status") or {}).get("progress") or {}).get("done", 0) >= 2,
    )  # fmt: skip
    kubectl.apply(
        labelled(
            run("high", namespace, double, generation=one_at_a_time),
            **{QUEUE: "team", PRIORITY: "high"},
        )
    )
    preempted = kubectl.wait_for(
        "evaluationrun", "low", namespace, reason_is("Preempted"), timeout=30
    )
    slow.delay_s = 0.5
    said = ready(preempted)
    assert "Preempted to accommodate a workload" in said["message"], said
    assert "low-generate" in said["message"] and preempted["status"]["phase"] == "Generating"
    results = {}
    for name in ("high", "low"):
        done = kubectl.wait_for(
            "evaluationrun", name, namespace, phase_is("Succeeded", "Failed"), timeout=150
        )
        assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs())
        results[name] = done["status"]
    # Scores identical to an undisturbed run's (the high run's, and the rules' own).
    assert results["low"]["scores"] == results["high"]["scores"] == EXPECTED_SCORES
    assert results["low"]["errorCount"] == 0
    # Every row asked once per run, plus at most the one in flight (concurrency 1) again.
    asked = Counter(record.messages[-1]["content"] for record in double.requests_for("cand"))
    rows = {row["instruction"] for row in ROWS}
    counts = {
        row: sum(n for text, n in asked.items() if re.search(rf"{row}\b", text)) for row in rows
    }
    assert all(count >= 2 for count in counts.values()), counts
    assert sum(count - 2 for count in counts.values()) <= 1, counts
