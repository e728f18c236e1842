"""Manifests of an EvaluationRun's children: results PVC, worker RBAC, generation and judge Jobs.

Pure functions: spec in, dict manifests out. Names are deterministic (``<run>-generate``,
``<run>-judge``, ``<run>-results``, ``<run>-worker``) so that a restarted operator finds what
it created and never creates a Job twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kyai._exitcodes import EXIT_UNREACHABLE, EXIT_USAGE
from kyai.api import GeneratePlan, JudgesPlan, SecretEnv
from kyai.builders._common import (
    LABEL_NAME_MAX,
    WORKER_TMP_PATH,
    WorkerSecurity,
    child_name,
    label_value,
    owner_reference,
    standard_labels,
    worker_security_context,
)
from kyai.builders.worker_args import (
    GRADERS_MOUNT,
    PREPROCESS_KEY,
    RESULTS_MOUNT,
    SNAPSHOT_MOUNT,
)
from kyai.constants import (
    GROUP,
    KINDS,
    LABEL_COMPONENT,
    LABEL_RUN,
    TERMINATION_MESSAGE_ENV,
)
from kyai.gateway import JUDGE_COMPONENT, token_mount, token_volume

TMP_MOUNT = WORKER_TMP_PATH

#: Where a worker container writes its final error (Kubernetes' default path).
TERMINATION_MESSAGE_PATH = "/dev/termination-log"

#: The ``kyai`` exit statuses a retry cannot mend: bad input (2), an endpoint that failed its
#: check before anything was sent (3). A worker pod ending so fails its Job at once.
FAIL_AT_ONCE_EXIT_CODES: tuple[int, ...] = (EXIT_USAGE, EXIT_UNREACHABLE)


def fail_at_once_policy(container: Mapping[str, Any]) -> dict[str, Any]:
    """A Job's ``podFailurePolicy``: ``container`` exiting 2 or 3 fails the Job (``FailJob``).

    Kubernetes' batch/v1 shape: the rule names the container, its values sorted and unique
    (the API server refuses others), and needs ``restartPolicy: Never`` in the template.
    Other failures are counted against ``backoffLimit`` as without a policy.
    """
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": container["name"],
                    "operator": "In",
                    "values": sorted(set(FAIL_AT_ONCE_EXIT_CODES)),
                },
            }
        ]
    }


def generation_job_name(run: str) -> str:
    """The generation Job's name."""
    return child_name(run, "-generate", limit=LABEL_NAME_MAX)


def judge_job_name(run: str) -> str:
    """The judge Job's name."""
    return child_name(run, "-judge", limit=LABEL_NAME_MAX)


def results_claim_name(run: str) -> str:
    """The name of the PVC the operator creates for a run's results."""
    return child_name(run, "-results")


def graders_config_map_name(run: str) -> str:
    """The ConfigMap holding a run's Python grader declarations."""
    return child_name(run, "-graders")


def worker_name(run: str) -> str:
    """The name of the run's worker ServiceAccount, Role and RoleBinding."""
    return child_name(run, "-worker")


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


def graders_config_map(
    owner: Mapping[str, Any],
    graders: Mapping[str, Mapping[str, Any]],
    preprocess: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ConfigMap of the Python declarations: one ``<judge>.json`` per Python grader.

    The judge Job mounts it; so does the generation Job for spec.preprocessors' declaration
    (key ``PREPROCESS_KEY``).
    """
    run = owner["metadata"]["name"]
    data = {
        f"{name}.json": json.dumps(declaration, indent=2) for name, declaration in graders.items()
    }
    if preprocess is not None:
        data[PREPROCESS_KEY] = json.dumps(preprocess, indent=2)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(owner, graders_config_map_name(run), "judge"),
        "data": data,
    }


@dataclass(frozen=True)
class WorkerJob:
    """What differs between the generation and the judge Job."""

    name: str
    component: str
    args: Sequence[str]
    secrets: Sequence[SecretEnv] = ()
    snapshot_config_map: str | None = None
    snapshot_claim: str | None = None
    extra_volumes: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    extra_mounts: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


def _worker_container(
    job: WorkerJob, image: str, image_pull_policy: str, security: WorkerSecurity
) -> dict[str, Any]:
    """The one container of a worker Job: ``kyai <args>`` with its mounts and secrets."""
    mounts: list[dict[str, Any]] = [
        {"name": "results", "mountPath": RESULTS_MOUNT},
        *security.volume_mounts,
    ]
    if job.snapshot_config_map or job.snapshot_claim:
        mounts.append({"name": "snapshot", "mountPath": SNAPSHOT_MOUNT, "readOnly": True})
    mounts.extend(dict(mount) for mount in job.extra_mounts)
    return {
        "name": job.component,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        # The image's entrypoint is ``kyai``: no command, so that a stand-in image (or the
        # devcluster's --entrypoint) runs in its place with the same arguments.
        "args": list(job.args),
        "env": [
            {"name": "HOME", "value": TMP_MOUNT},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": TERMINATION_MESSAGE_ENV, "value": TERMINATION_MESSAGE_PATH},
            *(secret.env_entry() for secret in job.secrets),
        ],
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"memory": "2Gi"},
        },
        "volumeMounts": mounts,
        "securityContext": security.container,
        # The worker writes its last error there; if it could not, the log's tail is used.
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def worker_job(
    owner: Mapping[str, Any],
    job: WorkerJob,
    *,
    image: str,
    image_pull_policy: str,
    results_claim: str,
    backoff_limit: int,
    active_deadline_seconds: int | None,
    queue: Mapping[str, str] | None = None,
    suspend: bool = False,
) -> dict[str, Any]:
    """A generation, judge or lm-eval Job running the project's image.

    Its ``podFailurePolicy`` (:func:`fail_at_once_policy`) fails the Job at the first pod whose
    worker exits 2 (bad input) or 3 (an endpoint failed its check, nothing sent): a retry would
    fail alike, and the operator takes the run's reason from that pod's termination message.

    ``queue``: the Kueue labels the Job carries (:func:`kyai.builders.queue.queue_labels`);
    ``suspend``: created suspended, for Kueue to start it once it admits it (as Kueue expects
    of a queued Job's creator).
    """
    run = owner["metadata"]["name"]
    security = worker_security_context()
    volumes: list[dict[str, Any]] = [
        {"name": "results", "persistentVolumeClaim": {"claimName": results_claim}},
        *security.volumes,
    ]
    if job.snapshot_config_map:
        volumes.append({"name": "snapshot", "configMap": {"name": job.snapshot_config_map}})
    elif job.snapshot_claim:
        volumes.append(
            {
                "name": "snapshot",
                "persistentVolumeClaim": {"claimName": job.snapshot_claim, "readOnly": True},
            }
        )
    volumes.extend(dict(volume) for volume in job.extra_volumes)
    container = _worker_container(job, image, image_pull_policy, security)
    spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "podFailurePolicy": fail_at_once_policy(container),
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
    if suspend:
        spec["suspend"] = True
    metadata = _metadata(owner, job.name, job.component)
    metadata["labels"].update(queue or {})
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def generation_job(run: str, plan: GeneratePlan) -> WorkerJob:
    """The generation Job of a plan: the candidate's key and the snapshot mounted."""
    return WorkerJob(
        name=generation_job_name(run),
        component="generate",
        args=plan.generation_args,
        secrets=[plan.candidate_secret] if plan.candidate_secret else [],
        snapshot_config_map=plan.snapshot_config_map,
        snapshot_claim=plan.snapshot_claim,
        extra_volumes=[{"name": "graders", "configMap": {"name": graders_config_map_name(run)}}]
        if plan.preprocess
        else (),
        extra_mounts=[{"name": "graders", "mountPath": GRADERS_MOUNT, "readOnly": True}]
        if plan.preprocess
        else (),
    )


def judge_job(run: str, judges: JudgesPlan, args: Sequence[str]) -> WorkerJob:
    """The judge Job of a plan: the judge's key, and the graders' declarations if any.

    Behind the judge gateway (``llm.gateway_token``) the pod holds no key: it mounts a
    projected ServiceAccount token for the gateway's audience instead, which the worker reads
    (``--judge-api-key-file``) at each request the file changed for.
    """
    volumes: list[Mapping[str, Any]] = []
    mounts: list[Mapping[str, Any]] = []
    if judges.graders:
        volumes.append({"name": "graders", "configMap": {"name": graders_config_map_name(run)}})
        mounts.append({"name": "graders", "mountPath": GRADERS_MOUNT, "readOnly": True})
    llm = judges.llm
    if llm is not None and llm.gateway_token is not None:
        token = llm.gateway_token
        volumes.append(
            token_volume(audience=token.audience, expiration_seconds=token.expiration_seconds)
        )
        mounts.append(token_mount())
    return WorkerJob(
        name=judge_job_name(run),
        component=JUDGE_COMPONENT,
        args=args,
        secrets=[llm.secret] if llm is not None and llm.secret else [],
        extra_volumes=tuple(volumes),
        extra_mounts=tuple(mounts),
    )


def endpoint_ports(judges: JudgesPlan) -> list[int]:
    """The TCP port of the judge endpoint, when the judge pod needs one."""
    if judges.llm is None:
        return []
    parts = urlsplit(judges.llm.endpoint)
    return [parts.port or (443 if parts.scheme == "https" else 80)]


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
            "podSelector": {"matchLabels": {LABEL_RUN: label_value(run), LABEL_COMPONENT: "judge"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [
                {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"ports": [{"protocol": "TCP", "port": port} for port in ports]},
            ],
        },
    }
