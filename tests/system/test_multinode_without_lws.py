"""A Workload on several nodes in a cluster without LeaderWorkerSet (no ``--lws``).

The operator watches LeaderWorkerSets only where their CRD exists; a Workload with
``nodes: 2`` says the cluster lacks LeaderWorkerSet (Stalled), and nothing is made for it.
"""

from __future__ import annotations

from typing import Any

import pytest

from system.helpers import Kubectl, Operator

pytestmark = pytest.mark.timeout(120)


def test_a_workload_on_two_nodes_says_the_cluster_lacks_leader_worker_set(
    kubectl: Kubectl, operator: Operator, namespace: str
) -> None:
    workload = {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "big", "namespace": namespace},
        "spec": {"framework": "sglang", "model": "Qwen/Qwen3-8B", "nodes": 2},
    }
    kubectl.apply(
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "EngineArgsSet",
            "metadata": {"name": "tp2", "namespace": namespace},
            "spec": {"framework": "sglang", "args": {"tp": 2}},
        },
        {**workload, "spec": {**workload["spec"], "engineArgsSetRef": {"name": "tp2"}}},
    )

    def stalled(obj: dict[str, Any]) -> bool:
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Stalled" and c["status"] == "True" for c in conditions)

    status = kubectl.wait_for("workload", "big", namespace, stalled, timeout=30)["status"]
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert ready["reason"] == "LeaderWorkerSetNotInstalled", status
    assert "lacks LeaderWorkerSet" in status["message"] and "spec.nodes is 2" in status["message"]
    for kind in ("services", "deployments", "pods"):
        assert kubectl.items(kind, namespace) == [], kind
