"""Waits that end: what a newcomer hit (issue 25), each with the operator's timers shortened.

- A built-in Snapshot that cannot be fetched is Pending with the reason and the advice, and
  is tried again on its schedule; kopf's progress annotation is one the API server takes
  (it was ``operator.kyai.io/_register_snapshots._locals_.snapshot``: 422s, then throttling).
- A re-judge of a run that Failed is Stalled at once, with the source's failure, and goes on
  once the source is re-created and succeeds.
- A Workload waiting for a Secret or a claim that does not exist is Stalled after the grace
  period; an engine pod that cannot start is quoted in the Workload's condition.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble
from system.conftest import e2e_kubeconfig
from system.helpers import Kubectl, Operator, secret
from system.test_operator import condition, condition_reason, phase_is, run, snapshot, workload

pytestmark = pytest.mark.timeout(240)

#: The grace period before a missing reference is Stalled, shortened for the tests.
GRACE_S = 6


@pytest.fixture(scope="module")
def quick_operator(
    request: pytest.FixtureRequest,
    cluster: DevClusterThread | None,
    kubectl: Kubectl,
    double: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    if e2e_kubeconfig(request.config) is not None or cluster is None:
        pytest.skip("the operator's timers are shortened by its environment (devcluster only)")
    running = Operator(
        kubectl.kubeconfig,
        tmp_path_factory.mktemp("operator"),
        env={
            "KYAI_DEFAULT_JUDGE_ENDPOINT": double.base_url,
            "KYAI_DEFAULT_JUDGE_MODEL": "judge",
            "HF_HUB_OFFLINE": "1",
            "KYAI_SNAPSHOT_RETRY_SECONDS": "1",
            "KYAI_MISSING_REFERENCE_GRACE_SECONDS": str(GRACE_S),
            "KYAI_WORKLOAD_POLL_SECONDS": "1",
        },
    )
    running.start()
    yield running
    running.stop()


def status_of(obj: dict[str, Any], type_: str) -> str:
    return str(condition(obj, type_)["status"])


def stalled(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Stalled" and c["status"] == "True" for c in conditions)


def test_a_builtin_snapshot_without_network_is_pending_and_retried(
    kubectl: Kubectl, quick_operator: Operator, namespace: str
) -> None:
    kubectl.apply(
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Snapshot",
            "metadata": {"name": "humaneval-v1", "namespace": namespace},
            "spec": {"builtin": "humaneval", "version": "v1"},
        }
    )

    def retried(obj: dict[str, Any]) -> bool:
        progress = (obj["metadata"].get("annotations") or {}).get("operator.kyai.io/snapshot")
        return progress is not None and json.loads(progress).get("retries", 0) >= 2

    # Retried 1 s, then 2 s after the first try (KYAI_SNAPSHOT_RETRY_SECONDS=1, doubling).
    pending = kubectl.wait_for("snapshot", "humaneval-v1", namespace, retried, timeout=60)
    assert pending["status"]["phase"] == "Pending"
    assert condition(pending, "Ready")["reason"] == "SourceUnavailable"
    message = pending["status"]["message"]
    assert "HuggingFace" in message and "spec.source" in message and "mirror" in message
    # Waiting for the network is not a stall: kstatus says it is still in progress.
    assert status_of(pending, "Reconciling") == "True"
    assert status_of(pending, "Stalled") == "False"
    log = quick_operator.logs()
    assert "422" not in log and "Invalid value" not in log, log[-3000:]


def test_a_rejudge_of_a_failed_run_is_stalled_at_once_and_recovers(
    kubectl: Kubectl, quick_operator: Operator, double: LLMDouble, namespace: str
) -> None:
    # A judge endpoint without a model: refused when the run starts (Failed at once).
    no_model = {"type": "llm", "llm": {"endpoint": double.base_url}}
    broken = run("source", namespace, double, judge=no_model)
    kubectl.apply(
        snapshot("capitals", namespace),
        workload("cand", namespace, double),
        broken,
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "EvaluationRun",
            "metadata": {"name": "again", "namespace": namespace},
            "spec": {"generationFrom": {"runRef": {"name": "source"}}},
        },
    )
    failed = kubectl.wait_for("er", "source", namespace, phase_is("Failed"), timeout=60)
    started = time.monotonic()
    waiting = kubectl.wait_for("er", "again", namespace, stalled, timeout=30)
    assert time.monotonic() - started < 30
    assert waiting["status"]["phase"] == "Pending"
    assert condition(waiting, "Stalled")["reason"] == "SourceRunFailed"
    assert failed["status"]["message"] in condition(waiting, "Stalled")["message"]
    assert status_of(waiting, "Reconciling") == "False"

    # The source re-created as it should have been: the re-judge goes on by itself.
    kubectl.run("delete", "er", "source", "-n", namespace, "--wait=true")
    kubectl.apply(run("source", namespace, double))
    kubectl.wait_for("er", "source", namespace, phase_is("Succeeded"), timeout=120)
    done = kubectl.wait_for("er", "again", namespace, phase_is("Succeeded", "Failed"), timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert status_of(done, "Stalled") == "False"
    # Its columns show what it scored: the source's Workload and Snapshot.
    assert (done["status"]["workload"], done["status"]["snapshot"]) == ("cand", "capitals")


def test_a_workload_waiting_for_a_missing_secret_stalls_after_the_grace_period(
    kubectl: Kubectl, quick_operator: Operator, double: LLMDouble, namespace: str
) -> None:
    remote = workload("remote", namespace, double)
    remote["spec"]["endpoint"]["apiKeySecretRef"] = {"name": "remote-key", "key": "api-key"}
    served: dict[str, Any] = {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "gated", "namespace": namespace},
        "spec": {
            "framework": "vllm",
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "hfTokenSecretRef": {"name": "hf-token", "key": "token"},
            "modelCache": {"claimName": "hf-cache"},
        },
    }
    kubectl.apply(remote, served)
    first = kubectl.wait_for("workload", "remote", namespace, phase_is("Pending"))
    assert condition(first, "Ready")["reason"] == "SecretNotFound"
    assert status_of(first, "Stalled") == "False"  # within the grace period
    for name in ("remote", "gated"):
        late = kubectl.wait_for("workload", name, namespace, stalled, timeout=GRACE_S + 30)
        assert condition(late, "Stalled")["reason"] == "SecretNotFound", late["status"]
        assert f"more than {GRACE_S}s" in condition(late, "Stalled")["message"]
        assert status_of(late, "Reconciling") == "False"
    gated = kubectl.get("workload", "gated", namespace)
    assert "spec.hfTokenSecretRef" in gated["status"]["message"]

    # The Secrets arrive: the endpoint Workload is Ready; the served one now lacks its claim.
    kubectl.apply(secret("remote-key", namespace, **{"api-key": "k"}))
    kubectl.apply(secret("hf-token", namespace, token="hf_x"))
    ready = kubectl.wait_for("workload", "remote", namespace, phase_is("Ready"), timeout=30)
    assert status_of(ready, "Stalled") == "False"
    claim = kubectl.wait_for(
        "workload",
        "gated",
        namespace,
        lambda obj: condition_reason(obj, "Ready") == "ClaimNotFound",
        timeout=30,
    )
    assert "spec.modelCache.claimName" in claim["status"]["message"]


def test_an_engine_pod_that_cannot_start_is_quoted_in_the_workload(
    kubectl: Kubectl, quick_operator: Operator, namespace: str
) -> None:
    kubectl.apply(
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": "nopull", "namespace": namespace},
            "spec": {
                "framework": "vllm",
                "model": "Qwen/Qwen3-0.6B",
                "image": "registry.invalid/nobody/vllm:none",
            },
        }
    )
    stuck = kubectl.wait_for(
        "workload",
        "nopull",
        namespace,
        lambda obj: condition_reason(obj, "Ready") == "ImagePullBackOff",
        timeout=60,
    )
    message = stuck["status"]["message"]
    assert message.startswith("the engine cannot start: pod nopull-engine-"), message
    assert "ErrImagePull" in message or "ImagePullBackOff" in message, message
    assert stuck["status"]["phase"] == "Deploying"
