"""The operator as the chart's service account, with only the chart's RBAC.

The chart is installed with ``helm install --set replicas=0`` (config/rbac/role.yaml when
helm is missing) and ``kyai operator`` runs as a process with the service account's token.
The devcluster authorizes it from the stored roles and bindings, so a verb missing from the
operator's ClusterRole shows up here as it would on a real cluster.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyai_devcluster import DevClusterThread
from kyai_devcluster._cluster import kubeconfig
from kyai_devcluster._tokens import issue
from kyai_testing import LLMDouble
from system.helpers import REPO, Kubectl, Operator
from system.test_operator import phase_is, run, snapshot, workload

SA_NAMESPACE = "kyai-system"
SA_NAME = "kyai-kyai-operator"  # the chart's fullname for release "kyai"
SA_USER = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"
HELM = shutil.which("helm") or str(REPO / ".venv/bin/helm")


def operator_role(kubectl: Kubectl) -> dict[str, Any]:
    """The operator's ClusterRole as installed (the chart's, or config/rbac's)."""
    role: dict[str, Any] = json.loads(
        kubectl.run("get", "clusterrole", SA_NAME, "-o", "json").stdout
    )
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "annotations"):
        role["metadata"].pop(key, None)
    return role


def install_rbac(kubectl: Kubectl) -> None:
    if Path(HELM).exists():
        subprocess.run(
            [
                HELM,
                "install",
                "kyai",
                str(REPO / "charts/kyai-operator"),
                "-n",
                SA_NAMESPACE,
                "--create-namespace",
                "--set",
                "replicas=0",
                "--kubeconfig",
                str(kubectl.kubeconfig),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        return
    role: dict[str, Any] = yaml.safe_load((REPO / "config/rbac/role.yaml").read_text())
    role["metadata"]["name"] = SA_NAME
    kubectl.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SA_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SA_NAME, "namespace": SA_NAMESPACE},
        },
        role,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": SA_NAME},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": SA_NAME,
            },
            "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": SA_NAMESPACE}],
        },
    )


@pytest.fixture(scope="module")
def sa_kubeconfig(
    cluster: DevClusterThread, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    install_rbac(kubectl)
    config = kubeconfig(cluster.url)
    config["users"][0]["user"]["token"] = issue(cluster.cluster.token_key, SA_NAMESPACE, SA_NAME)
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def sa_operator(
    cluster: DevClusterThread,
    sa_kubeconfig: Path,
    double: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    # As strict as OpenShift: owner references need delete, blockOwnerDeletion finalizers.
    cluster.cluster.server.enforce_owner_references = True
    running = Operator(
        sa_kubeconfig,
        tmp_path_factory.mktemp("operator"),
        env={
            "KYAI_DEFAULT_JUDGE_ENDPOINT": double.base_url,
            "KYAI_DEFAULT_JUDGE_MODEL": "judge",
            "HF_HUB_OFFLINE": "1",
        },
    )
    running.start()
    yield running
    running.stop()


def test_a_run_succeeds_with_only_the_operators_rbac(
    kubectl: Kubectl, sa_operator: Operator, double: LLMDouble, namespace: str
) -> None:
    kubectl.apply(
        snapshot("capitals", namespace),
        workload("cand", namespace, double),
        run("r", namespace, double),
    )
    done = kubectl.wait_for("evaluationrun", "r", namespace, phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", (done["status"], sa_operator.logs()[-3000:])
    assert "forbidden" not in sa_operator.logs()


def test_a_sweep_succeeds_with_only_the_operators_rbac(
    kubectl: Kubectl, sa_operator: Operator, double: LLMDouble, namespace: str
) -> None:
    # Its runs carry blockOwnerDeletion owner references to the sweep: the operator needs
    # update on evaluationsweeps/finalizers, and watch/patch on the sweeps and their status.
    template = run("unused", namespace, double)["spec"]
    del template["workloadRef"], template["snapshotRef"]
    kubectl.apply(
        snapshot("capitals", namespace),
        workload("cand", namespace, double),
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "EvaluationSweep",
            "metadata": {"name": "sw", "namespace": namespace},
            "spec": {"workloads": [{"name": "cand"}], "snapshots": [{"name": "capitals"}],
                     "run": template},
        },
    )  # fmt: skip
    done = kubectl.wait_for("esw", "sw", namespace, phase_is("Succeeded", "Failed"), timeout=120)
    assert done["status"]["phase"] == "Succeeded", (done["status"], sa_operator.logs()[-3000:])
    assert "forbidden" not in sa_operator.logs()


def test_a_verb_missing_from_the_cluster_role_is_reported_as_the_403(
    kubectl: Kubectl, sa_operator: Operator, double: LLMDouble, namespace: str
) -> None:
    role = operator_role(kubectl)
    trimmed = copy.deepcopy(role)
    for rule in trimmed["rules"]:
        if rule.get("resources") == ["jobs"]:
            rule["verbs"] = [verb for verb in rule["verbs"] if verb != "create"]
    kubectl.apply(trimmed)
    try:
        kubectl.apply(
            snapshot("capitals", namespace),
            workload("cand", namespace, double),
            run("denied", namespace, double),
        )
        expected = (
            f'jobs.batch is forbidden: User "{SA_USER}" cannot create resource "jobs" in API '
            f'group "batch" in the namespace "{namespace}"'
        )
        kubectl.wait_for(
            "evaluationrun",
            "denied",
            namespace,
            lambda _: expected in sa_operator.logs(),
        )
        shown = kubectl.get("evaluationrun", "denied", namespace)
        assert shown["status"].get("phase") != "Succeeded"
        # The run says so too, not only the operator's log: Degraded/Forbidden with the 403.
        said = kubectl.wait_for(
            "evaluationrun",
            "denied",
            namespace,
            lambda obj: any(
                cond.get("type") == "Degraded"
                and cond.get("reason") == "Forbidden"
                and expected in cond.get("message", "")
                for cond in (obj.get("status") or {}).get("conditions") or []
            ),
        )
        assert said["status"].get("phase") != "Succeeded"
    finally:
        kubectl.apply(role)
    # With the verb back, the operator's retry goes through and the condition is cleared.
    done = kubectl.wait_for(
        "evaluationrun",
        "denied",
        namespace,
        lambda obj: (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
        timeout=180,
    )
    assert done["status"]["phase"] == "Succeeded", done["status"]
    degraded = [c for c in done["status"]["conditions"] if c["type"] == "Degraded"]
    assert [c["status"] for c in degraded] == ["False"], degraded
