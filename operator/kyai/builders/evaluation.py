"""Manifests of an EvaluationRun's children: results PVC, worker RBAC, generation and judge Jobs.

Pure functions: spec in, dict manifests out. Names are deterministic (``<run>-generate``,
``<run>-judge``, ``<run>-results``, ``<run>-worker``) so that a restarted operator finds what
it created and never creates a Job twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kyai.builders._common import (
    WORKER_TMP_PATH,
    owner_reference,
    standard_labels,
    worker_security_context,
)
from kyai.constants import (
    GROUP,
    KINDS,
    LABEL_COMPONENT,
    LABEL_RUN,
)

#: Where the worker containers find things.
SNAPSHOT_MOUNT = "/etc/kyai/snapshot"
RESULTS_MOUNT = "/results"
TMP_MOUNT = WORKER_TMP_PATH

#: Environment variables the workers read secrets from (named by --api-key-env flags).
CANDIDATE_KEY_ENV = "KYAI_CANDIDATE_API_KEY"
JUDGE_KEY_ENV = "KYAI_JUDGE_API_KEY"


def generation_job_name(run: str) -> str:
    """The generation Job's name."""
    return f"{run}-generate"


def judge_job_name(run: str) -> str:
    """The judge Job's name."""
    return f"{run}-judge"


def results_claim_name(run: str) -> str:
    """The name of the PVC the operator creates for a run's results."""
    return f"{run}-results"


def worker_name(run: str) -> str:
    """The name of the run's worker ServiceAccount, Role and RoleBinding."""
    return f"{run}-worker"


def run_labels(run: str, component: str) -> dict[str, str]:
    """The labels of every child of a run."""
    return standard_labels(name="kyai", instance=run, component=component, extra={LABEL_RUN: run})


def _metadata(owner: Mapping[str, Any], name: str, component: str) -> dict[str, Any]:
    run = owner["metadata"]["name"]
    return {
        "name": name,
        "namespace": owner["metadata"]["namespace"],
        "labels": run_labels(run, component),
        "ownerReferences": [owner_reference(owner)],
    }


def results_claim(
    owner: Mapping[str, Any], *, size: str, storage_class: str | None
) -> dict[str, Any]:
    """The PVC holding generations.jsonl, judgements.jsonl and summary.json."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(owner, results_claim_name(owner["metadata"]["name"]), "results"),
        "spec": spec,
    }


def worker_rbac(owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A ServiceAccount that may read its run and patch its run's status, nothing else."""
    run = owner["metadata"]["name"]
    name = worker_name(run)
    plural = KINDS["EvaluationRun"][0]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _metadata(owner, name, "worker"),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(owner, name, "worker"),
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": [plural],
                    "resourceNames": [run],
                    "verbs": ["get"],
                },
                {
                    "apiGroups": [GROUP],
                    "resources": [f"{plural}/status"],
                    "resourceNames": [run],
                    "verbs": ["get", "patch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(owner, name, "worker"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": name,
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": name,
                    "namespace": owner["metadata"]["namespace"],
                }
            ],
        },
    ]


@dataclass(frozen=True)
class SecretEnv:
    """An environment variable filled from a Secret key."""

    env: str
    secret: str
    key: str

    def to_k8s(self) -> dict[str, Any]:
        """The container env entry."""
        return {
            "name": self.env,
            "valueFrom": {"secretKeyRef": {"name": self.secret, "key": self.key}},
        }


@dataclass(frozen=True)
class WorkerJob:
    """What differs between the generation and the judge Job."""

    name: str
    component: str
    args: Sequence[str]
    secrets: Sequence[SecretEnv] = ()
    snapshot_config_map: str | None = None
    extra_volumes: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    extra_mounts: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


def worker_job(
    owner: Mapping[str, Any],
    job: WorkerJob,
    *,
    image: str,
    image_pull_policy: str,
    results_claim: str,
    backoff_limit: int,
    active_deadline_seconds: int | None,
) -> dict[str, Any]:
    """A generation or judge Job running the project's image."""
    run = owner["metadata"]["name"]
    security = worker_security_context()
    volumes: list[dict[str, Any]] = [
        {"name": "results", "persistentVolumeClaim": {"claimName": results_claim}},
        *security.volumes,
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "results", "mountPath": RESULTS_MOUNT},
        *security.volume_mounts,
    ]
    if job.snapshot_config_map:
        volumes.append({"name": "snapshot", "configMap": {"name": job.snapshot_config_map}})
        mounts.append({"name": "snapshot", "mountPath": SNAPSHOT_MOUNT, "readOnly": True})
    volumes.extend(dict(volume) for volume in job.extra_volumes)
    mounts.extend(dict(mount) for mount in job.extra_mounts)
    container: dict[str, Any] = {
        "name": job.component,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["kyai"],
        "args": list(job.args),
        "env": [
            {"name": "HOME", "value": TMP_MOUNT},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            *(secret.to_k8s() for secret in job.secrets),
        ],
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"memory": "2Gi"},
        },
        "volumeMounts": mounts,
        "securityContext": security.container,
    }
    spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "template": {
            "metadata": {"labels": run_labels(run, job.component)},
            "spec": {
                "restartPolicy": "Never",
                "serviceAccountName": worker_name(run),
                "automountServiceAccountToken": True,
                "enableServiceLinks": False,
                "securityContext": security.pod,
                "containers": [container],
                "volumes": volumes,
            },
        },
    }
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = active_deadline_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(owner, job.name, job.component),
        "spec": spec,
    }


#: Egress a judge pod running graders keeps: DNS, and TCP to the API server's usual ports
#: (status reports). The model endpoints it needs are added per run.
JUDGE_EGRESS_PORTS: tuple[int, ...] = (443, 6443)


def judge_network_policy(owner: Mapping[str, Any], endpoint_ports: Sequence[int]) -> dict[str, Any]:
    """A NetworkPolicy for a judge pod that runs grader code: no egress but what it needs.

    The sandbox already denies sockets to grader code (seccomp); this is the cluster's second
    wall, for the judge Job's pod as a whole: DNS, the API server, and the judge endpoint's
    port when an LLM judge or a model-backed grader needs it.
    """
    run = owner["metadata"]["name"]
    ports = sorted({*JUDGE_EGRESS_PORTS, *endpoint_ports})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(owner, judge_job_name(run), "judge"),
        "spec": {
            "podSelector": {"matchLabels": {LABEL_RUN: run, LABEL_COMPONENT: "judge"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [
                {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"ports": [{"protocol": "TCP", "port": port} for port in ports]},
            ],
        },
    }
