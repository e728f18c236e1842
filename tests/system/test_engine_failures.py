"""A served engine that cannot serve is on its Workload at once, in its own words.

The operator deploys a vLLM Workload whose EngineArgsSet passes a misspelt flag through
``extraArgs`` (never checked: the escape hatch): the engine (the devcluster's stand-in, which
parses the command line with vLLM's own options) exits with vLLM's usage error and the kubelet
restarts it. The Workload's Ready condition says ``EngineCrashing`` with the exit code and the
container's last log lines within seconds, not at the start-up deadline; at
``spec.restartLimit`` restarts it is Failed (Stalled) and the run waiting on it fails naming
it; once the flag is fixed the engine serves and the Workload is Ready again.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from system.helpers import Kubectl, Operator
from system.test_operator import snapshot
from system.test_served_workloads import ROWS, served_operator

__all__ = ["served_operator"]  # the module's operator, as a fixture here too

pytestmark = pytest.mark.timeout(300)

TYPO = ["--tensor-paralel-size", "1"]


def objects(namespace: str, extra_args: list[str], restart_limit: int) -> list[dict[str, Any]]:
    group = "kyai.io/v1alpha1"
    return [
        snapshot("capitals", namespace, ROWS),
        {
            "apiVersion": group,
            "kind": "EngineArgsSet",
            "metadata": {"name": "typo", "namespace": namespace},
            "spec": {"framework": "vllm", "args": {"max-model-len": 4096}, "extraArgs": extra_args},
        },
        {
            "apiVersion": group,
            "kind": "Workload",
            "metadata": {"name": "crashing", "namespace": namespace},
            "spec": {
                "framework": "vllm",
                "model": "Qwen/Qwen3-8B",
                "engineArgsSetRef": {"name": "typo"},
                "restartLimit": restart_limit,
            },
        },
    ]


def ready(obj: dict[str, Any]) -> dict[str, Any]:
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
    return found[0] if found else {}


def stalled(obj: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Stalled" and c["status"] == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def test_a_crashing_engine_is_reported_at_once_then_fails_its_runs_then_recovers(
    kubectl: Kubectl, served_operator: Operator, namespace: str
) -> None:
    started = time.monotonic()
    run = {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {"name": "waits", "namespace": namespace},
        "spec": {"workloadRef": {"name": "crashing"}, "snapshotRef": {"name": "capitals"}},
    }
    kubectl.apply(*objects(namespace, TYPO, restart_limit=3), run)
    crashing = kubectl.wait_for(
        "workload", "crashing", namespace,
        lambda o: ready(o).get("reason") == "EngineCrashing", timeout=90,
    )  # fmt: skip
    reported = time.monotonic() - started
    message = ready(crashing)["message"]
    assert crashing["status"]["phase"] == "Deploying", crashing["status"]
    assert "exited with code 2" in message, message
    # The container's own last words, from its log.
    assert "vllm: error: unrecognized arguments: --tensor-paralel-size 1" in message, message
    assert not stalled(crashing)
    # At spec.restartLimit restarts it stops waiting: Failed, Stalled, still in its words.
    failed = kubectl.wait_for(
        "workload", "crashing", namespace,
        lambda o: (o.get("status") or {}).get("phase") == "Failed", timeout=120,
    )  # fmt: skip
    assert stalled(failed) and ready(failed)["reason"] == "EngineCrashing"
    assert "spec.restartLimit is 3" in ready(failed)["message"]
    stalled_after = time.monotonic() - started
    # The run that waited for it fails now, naming it: woken by the Workload's new state,
    # not by the resync (every 20 s).
    run = kubectl.wait_for(
        "evaluationrun", "waits", namespace,
        lambda o: (o.get("status") or {}).get("phase") == "Failed", timeout=60,
    )  # fmt: skip
    run_failed = time.monotonic() - started
    assert run_failed - stalled_after < 10, (stalled_after, run_failed)
    assert ready(run)["reason"] == "WorkloadFailed"
    assert ready(run)["message"].startswith("the Workload crashing cannot serve: EngineCrashing")
    # Fixed, the engine serves and the Workload is Ready again: the report is cleared.
    kubectl.apply(*objects(namespace, [], restart_limit=3)[1:2])
    recovered = kubectl.wait_for(
        "workload", "crashing", namespace,
        lambda o: (o.get("status") or {}).get("phase") == "Ready", timeout=120,
    )  # fmt: skip
    assert not stalled(recovered) and ready(recovered)["reason"] == "Serving"
    print(
        f"\ncrash reported {reported:.1f} s after apply; Failed at the restart limit after "
        f"{stalled_after:.1f} s, its run {run_failed:.1f} s; Ready again "
        f"{time.monotonic() - started:.1f} s after apply"
    )
