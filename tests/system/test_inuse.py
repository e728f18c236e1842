"""What a running run reads, deleted under it: an EngineArgsSet, the judge's Secret.

- An EngineArgsSet named by the Workload of a started, unfinished run is held by the in-use
  finalizer (as a PVC mounted by a pod is): ``kubectl delete`` marks it, the Workload stays
  Ready, its Deployment is not touched, the run Succeeds, and the deletion completes once
  the run is done (then the Workload says the EngineArgsSet is gone).
- The judge's Secret deleted while the run generates: the run says so (SecretNotFound)
  within a minute, and ends Failed after the start deadline instead of waiting forever.

The served Workload runs the engine stand-in in the devcluster (see test_served_workloads);
the operator runs as a process with ``cluster.network_env()`` and a short start deadline.
Not for ``--with-e2e``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble, ModelSpec
from system.helpers import (
    Kubectl,
    Operator,
    finished,
    keyed_judge,
    pod_network_operator,
    secret,
)
from system.test_operator import condition, phase_is, run, snapshot, workload

pytestmark = pytest.mark.timeout(300)

#: The start deadline of this module's operator: longer than the first look at a Job's pods
#: (the grace and resync timers below, shortened from 15 s and 20 s), so a stuck pod is
#: reported before it fails the run.
START_DEADLINE_S = 15
JOB_START_GRACE_S = 3
RUN_RESYNC_S = 3

GROUP = "kyai.io/v1alpha1"
IN_USE = "kyai.io/in-use"
#: Rows the engine stand-in answers slowly (one at a time): the run stays Generating a while.
SLOW_ROWS = [
    {"instruction": f"Capital number {i}?", "groundTruthResponse": "Paris"} for i in range(10)
]


@pytest.fixture(scope="module")
def inuse_operator(
    request: pytest.FixtureRequest,
    cluster: DevClusterThread | None,
    kubectl: Kubectl,
    double: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    if cluster is None:
        pytest.skip("the engine stand-ins run in the devcluster only")
    running = pod_network_operator(
        cluster, kubectl.kubeconfig, tmp_path_factory.mktemp("operator"), double.base_url,
        KYAI_WORKER_START_TIMEOUT_SECONDS=str(START_DEADLINE_S),
        KYAI_JOB_START_GRACE_SECONDS=str(JOB_START_GRACE_S),
        KYAI_RUN_RESYNC_SECONDS=str(RUN_RESYNC_S),
    )  # fmt: skip
    running.start()
    yield running
    running.stop()


def served(namespace: str, rules: Path) -> list[dict[str, Any]]:
    """An EngineArgsSet and a served vLLM Workload whose stand-in answers each row in 0.5 s."""
    return [
        {
            "apiVersion": GROUP,
            "kind": "EngineArgsSet",
            "metadata": {"name": "flags", "namespace": namespace},
            "spec": {
                "framework": "vllm",
                "args": {"max-model-len": 8192},
                "env": [{"name": "KYAI_STANDIN_RULES", "value": str(rules)}],
            },
        },
        {
            "apiVersion": GROUP,
            "kind": "Workload",
            "metadata": {"name": "cand", "namespace": namespace},
            "spec": {
                "framework": "vllm",
                "model": "Qwen/Qwen3-8B",
                "engineArgsSetRef": {"name": "flags"},
            },
        },
    ]


def test_an_engine_args_set_in_use_is_held_until_the_run_is_done(
    kubectl: Kubectl,
    inuse_operator: Operator,
    double: LLMDouble,
    namespace: str,
    tmp_path: Path,
) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"content": "Paris", "delay_s": 0.5}]))
    kubectl.apply(snapshot("capitals", namespace, SLOW_ROWS), *served(namespace, rules))
    kubectl.wait_for("workload", "cand", namespace, phase_is("Ready"), timeout=90)
    kubectl.apply(run("busy", namespace, double, generation={"concurrency": 1}))
    kubectl.wait_for("evaluationrun", "busy", namespace, phase_is("Generating"))
    template = kubectl.get("deployment", "cand-engine", namespace)["spec"]["template"]

    kubectl.run("delete", "engineargsset", "flags", "-n", namespace, "--wait=false")
    held = kubectl.get("engineargsset", "flags", namespace)
    assert held["metadata"].get("deletionTimestamp")
    assert IN_USE in held["metadata"]["finalizers"], held["metadata"]
    # A new run cannot start on it while it is being deleted: it waits, saying why.
    kubectl.apply(run("late", namespace, double))
    late = kubectl.wait_for(
        "evaluationrun", "late", namespace,
        lambda o: "flags" in ((o.get("status") or {}).get("message") or ""),
    )  # fmt: skip
    assert late["status"]["phase"] == "Pending", late["status"]
    assert "being deleted" in late["status"]["message"], late["status"]

    done = finished(kubectl, "busy", namespace)
    assert done["status"]["phase"] == "Succeeded", (done["status"], inuse_operator.logs())
    assert done["status"]["questions"] == len(SLOW_ROWS)
    assert done["status"]["avgScore"] == 1.0, done["status"]
    # The engine kept serving what the run measured: its pod template never changed.
    assert kubectl.get("deployment", "cand-engine", namespace)["spec"]["template"] == template

    freed = kubectl.wait_gone("engineargsset", "flags", namespace)
    assert freed, "the EngineArgsSet was never freed"
    missing = kubectl.wait_for(
        "workload", "cand", namespace,
        lambda o: condition(o, "Ready")["reason"] == "EngineArgsSetNotFound",
    )  # fmt: skip
    assert missing["status"]["phase"] == "Pending"


def test_a_judge_secret_deleted_mid_run_fails_the_run_after_the_deadline(
    kubectl: Kubectl, inuse_operator: Operator, double: LLMDouble, namespace: str
) -> None:
    slow = [{"instruction": f"Question {i}, slow please?", "groundTruthResponse": "done"}
            for i in range(10)]  # fmt: skip
    kubectl.apply(
        secret("judge-key", namespace, token="sk-inuse-canary"),
        snapshot("capitals", namespace, slow), workload("cand", namespace, double),
        run("keyed", namespace, double, judge=keyed_judge(double.base_url),
            generation={"concurrency": 1}),
    )  # fmt: skip
    kubectl.wait_for("evaluationrun", "keyed", namespace, phase_is("Generating"))
    kubectl.run("delete", "secret", "judge-key", "-n", namespace)
    deleted = time.monotonic()

    reported = kubectl.wait_for(
        "evaluationrun", "keyed", namespace,
        lambda o: condition(o, "Progressing")["reason"] == "SecretNotFound"
        if (o.get("status") or {}).get("conditions") else False,
        timeout=60,
    )  # fmt: skip
    assert "judge-key" in reported["status"]["message"], reported["status"]
    assert not kubectl.items("jobs", namespace, "-l", "app.kubernetes.io/component=judge")

    done = finished(kubectl, "keyed", namespace, timeout=START_DEADLINE_S + 90)
    assert done["status"]["phase"] == "Failed", (done["status"], inuse_operator.logs())
    ready = condition(done, "Ready")
    assert ready["reason"] == "SecretNotFound", ready
    assert "judge-key" in ready["message"] and f"{START_DEADLINE_S} s" in ready["message"]
    # Not failed before the deadline it names.
    assert time.monotonic() - deleted >= START_DEADLINE_S
    assert "sk-inuse-canary" not in json.dumps(done)


@pytest.fixture
def slow_judge() -> Iterator[LLMDouble]:
    """A judge that takes the run's key and answers slowly: its pod stays running a while."""
    double = LLMDouble(models=[ModelSpec("judge")], api_key="sk-inuse-canary", latency_s=60)
    with double.start_in_thread() as running:
        yield running


def test_a_judge_pod_that_loses_its_secret_is_reported_then_fails_the_run(
    kubectl: Kubectl,
    inuse_operator: Operator,
    double: LLMDouble,
    slow_judge: LLMDouble,
    namespace: str,
) -> None:
    # The judge Job runs; its Secret is deleted and its pod is gone (a node drained); the
    # next pod cannot start (CreateContainerConfigError): the run says so, then fails at the
    # start deadline.
    kubectl.apply(
        secret("judge-key", namespace, token="sk-inuse-canary"),
        snapshot("capitals", namespace), workload("cand", namespace, double),
        run("retried", namespace, double, judge=keyed_judge(slow_judge.base_url),
            jobs={"backoffLimit": 4}),
    )  # fmt: skip
    running = kubectl.wait_for(
        "job", "retried-judge", namespace, lambda job: (job.get("status") or {}).get("ready")
    )
    assert running["status"]["ready"] == 1
    kubectl.run("delete", "secret", "judge-key", "-n", namespace)
    kubectl.run("delete", "pod", "-n", namespace, "-l", "job-name=retried-judge", "--wait=false")

    reported = kubectl.wait_for(
        "evaluationrun", "retried", namespace,
        lambda o: any(found["type"] == "Progressing" and found["reason"] == "WorkerNotStarting"
                      for found in (o.get("status") or {}).get("conditions") or []),
        timeout=120,
    )  # fmt: skip
    assert reported["status"]["phase"] == "Judging", reported["status"]
    message = condition(reported, "Progressing")["message"]
    assert "CreateContainerConfigError" in message and "judge-key" in message, message

    done = finished(kubectl, "retried", namespace, timeout=START_DEADLINE_S + 90)
    assert done["status"]["phase"] == "Failed", (done["status"], inuse_operator.logs())
    ready = condition(done, "Ready")
    assert ready["reason"] == "WorkerNotStarting", ready
    assert "CreateContainerConfigError" in ready["message"], ready
    assert f"{START_DEADLINE_S} s" in ready["message"], ready
    assert "sk-inuse-canary" not in json.dumps(done)
