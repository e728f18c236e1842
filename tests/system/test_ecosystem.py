"""Issue 12 against a running operator: kstatus conditions through the real ``kubectl wait``,
Argo CD's health checks on the statuses real runs go through, and the operator's /metrics."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from kyai_testing import LLMDouble
from system.helpers import Kubectl, Operator
from system.test_operator import ROWS, condition, phase_is, run, snapshot, workload

pytest.importorskip("lupa", reason="lupa (the dev extra) runs the Lua health checks")

from system.argocd_health import health

SLOW_ROWS = [{"instruction": f"slow question {i}", "groundTruthResponse": "done"} for i in range(6)]


@contextmanager
def watching(kubectl: Kubectl, namespace: str) -> Iterator[list[dict[str, Any]]]:
    """Every version of every EvaluationRun of ``namespace`` that ``kubectl get -w`` shows."""
    seen: list[dict[str, Any]] = []
    process = subprocess.Popen(
        ["kubectl", "get", "evaluationruns", "-n", namespace, "-w", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "KUBECONFIG": str(kubectl.kubeconfig)},
    )

    def read() -> None:
        assert process.stdout is not None
        decoder = json.JSONDecoder()
        buffer = ""
        for line in process.stdout:
            buffer += line
            while buffer.strip():
                try:
                    obj, end = decoder.raw_decode(buffer.lstrip())
                except json.JSONDecodeError:
                    break
                seen.append(obj)
                buffer = buffer.lstrip()[end:]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield seen
    finally:
        process.terminate()
        process.wait(timeout=10)
        reader.join(timeout=10)
        assert process.stdout is not None
        process.stdout.close()


def first(seen: list[dict[str, Any]], name: str, phase: str) -> dict[str, Any]:
    for obj in seen:
        if obj["metadata"]["name"] == name and (obj.get("status") or {}).get("phase") == phase:
            return obj
    phases = [(o["metadata"]["name"], (o.get("status") or {}).get("phase")) for o in seen]
    raise AssertionError(f"{name} was never seen {phase}: {phases}")


def status_of(obj: dict[str, Any], type_: str) -> str:
    return str(condition(obj, type_)["status"])


def test_kubectl_wait_argo_health_and_metrics_on_real_runs(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    with watching(kubectl, namespace) as seen:
        kubectl.apply(
            snapshot("capitals", namespace, SLOW_ROWS),
            snapshot("four", namespace, ROWS),  # scores 0.5
            run("good", namespace, double, generation={"concurrency": 2}),
            run("missed", namespace, double, snapshotRef={"name": "four"},
                thresholds={"avgScore": 0.9}),
            # A judge endpoint without a model: the operator refuses the run (InvalidSpec).
            run("bad", namespace, double,
                judge={"type": "llm", "llm": {"endpoint": double.base_url}}),
        )  # fmt: skip
        pending = kubectl.wait_for(
            "evaluationrun", "good", namespace, lambda o: phase_is("Pending")(o)
            and condition(o, "Ready")["reason"] == "WorkloadNotFound",
        )  # fmt: skip
        kubectl.apply(workload("cand", namespace, double))
        # The real kubectl: Ready for a success, Stalled for a failure.
        waited = kubectl.run(
            "wait", "--for=condition=Ready", "er/good", "er/missed", "-n", namespace,
            "--timeout=55s",
        )  # fmt: skip
        assert waited.returncode == 0, waited.stderr
        stalled = kubectl.run(
            "wait", "--for=condition=Stalled", "er/bad", "-n", namespace, "--timeout=30s"
        )
        assert stalled.returncode == 0, stalled.stderr
        # A success is never Stalled, a failure never Ready: waiting for those times out.
        never = kubectl.run(
            "wait", "--for=condition=Ready", "er/bad", "-n", namespace, "--timeout=2s",
            check=False,
        )  # fmt: skip
        assert never.returncode != 0
        good = kubectl.get("evaluationrun", "good", namespace)
        missed = kubectl.get("evaluationrun", "missed", namespace)
        bad = kubectl.get("evaluationrun", "bad", namespace)
    assert good["status"]["phase"] == "Succeeded" and bad["status"]["phase"] == "Failed"
    generating, judging = first(seen, "good", "Generating"), first(seen, "good", "Judging")

    # kstatus: Reconciling while work goes on, Stalled for the failure; phase and Passed kept.
    for obj in (pending, generating, judging):
        assert (status_of(obj, "Reconciling"), status_of(obj, "Stalled")) == ("True", "False")
    assert (status_of(good, "Reconciling"), status_of(good, "Stalled")) == ("False", "False")
    assert (status_of(bad, "Stalled"), status_of(bad, "Ready")) == ("True", "False")
    assert condition(bad, "Stalled")["reason"] == "InvalidSpec"
    assert condition(bad, "Stalled")["observedGeneration"] == bad["metadata"]["generation"]
    assert status_of(missed, "Passed") == "False" and status_of(missed, "Ready") == "True"

    # Argo CD's health of each real status.
    assert health(pending) == {
        "status": "Progressing",
        "message": "Pending: " + pending["status"]["message"],
    }
    assert health(generating)["status"] == "Progressing"
    assert health(generating)["message"].startswith("Generating")
    assert health(judging)["status"] == "Progressing"
    assert health(judging)["message"].startswith("Judging")
    assert health(good) == {"status": "Healthy", "message": good["status"]["message"]}
    missed_health = health(missed)
    assert missed_health["status"] == "Degraded"
    assert missed_health["message"] == "Thresholds missed: avgScore 0.5000 < 0.9"
    assert health(bad) == {
        "status": "Degraded",
        "message": condition(bad, "Stalled")["message"],
    }
    assert "spec.judge.llm.model" in health(bad)["message"]
    wl = kubectl.get("workload", "cand", namespace)
    snap = kubectl.get("snapshot", "capitals", namespace)
    assert health(wl)["status"] == health(snap)["status"] == "Healthy"
    assert kubectl.run("wait", "--for=condition=Ready", "wl/cand", "snap/capitals", "-n",
                       namespace, "--timeout=10s").returncode == 0  # fmt: skip

    # /metrics: seconds (the deprecated ms series is gone), and the operator's own series.
    metrics = operator.metrics()
    lines = metrics.splitlines()
    latency = next(
        line for line in lines
        if line.startswith("kyai_evaluation_latency_seconds{") and 'run="good"' in line
    )  # fmt: skip
    assert float(latency.rsplit(" ", 1)[1]) > 0.3  # the 0.4 s answers
    assert "kyai_evaluation_latency_ms" not in metrics
    assert any(line.startswith("kyai_operator_build_info{") for line in lines)
    for kind in ("EvaluationRun", "Workload", "Snapshot"):
        assert f'kyai_operator_reconcile_total{{kind="{kind}",result="success"}}' in metrics
        assert f'kyai_operator_reconcile_duration_seconds_count{{kind="{kind}"}}' in metrics
    assert "process_resident_memory_bytes" in metrics
