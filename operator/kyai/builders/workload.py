"""A Workload's serving engine: its Deployment and Service manifests.

The Deployment runs the framework's server (see :mod:`kyai.engines`) on port 8000 named
``http``, with the GPUs, CPU and memory asked for, a memory-backed ``/dev/shm``, the HuggingFace
token from its Secret, the model cache claim mounted at ``HF_HOME``, and probes on the engine's
health route: a startup probe patient enough for a model download, then readiness and liveness.
Its pod template carries the EngineArgsSet's hash, so editing the EngineArgsSet rolls it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kyai.api.engineargsset import EngineArgsSetSpec
from kyai.api.workload import WorkloadSpec
from kyai.builders._common import (
    ManifestError,
    dns_label,
    engine_container_security_context,
    engine_pod_security_context,
    hashed_object,
    label_value,
    spec_hash,
    standard_labels,
)
from kyai.builders.queue import queue_labels
from kyai.constants import (
    ANNOTATION_ENGINE_ARGS_HASH,
    ENGINE_PORT,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_WORKLOAD,
)
from kyai.engines import EngineArgsError, engine_command, engine_env, engine_for
from kyai.settings import OperatorSettings

#: The engine container's name and its port's name.
ENGINE_CONTAINER = "engine"
PORT_NAME = "http"
#: ``app.kubernetes.io/component`` of the engine's objects.
COMPONENT = "engine"
#: Volume names.
SHM_VOLUME = "dshm"
CACHE_VOLUME = "model-cache"

#: Probe timing. The startup probe's failure threshold follows the Workload's
#: ``probes.startupTimeoutSeconds``; once it has passed, readiness and liveness take over.
PROBE_PERIOD_SECONDS = 10
PROBE_TIMEOUT_SECONDS = 5
READINESS_FAILURE_THRESHOLD = 3
LIVENESS_PERIOD_SECONDS = 30
LIVENESS_TIMEOUT_SECONDS = 10
LIVENESS_FAILURE_THRESHOLD = 5
#: Extra time the Deployment controller allows beyond the startup timeout before it reports
#: ``Progressing=False`` (ProgressDeadlineExceeded).
PROGRESS_DEADLINE_MARGIN_SECONDS = 600


def engine_name(workload_name: str) -> str:
    """The name of a Workload's Deployment and Service (an RFC 1035 label)."""
    return dns_label(workload_name, suffix="-engine")


def workload_endpoint(workload_name: str, namespace: str) -> str:
    """The in-cluster OpenAI-compatible base URL of a Workload's engine."""
    return f"http://{engine_name(workload_name)}.{namespace}.svc:{ENGINE_PORT}/v1"


def workload_metrics_url(workload_name: str, namespace: str, path: str) -> str:
    """The in-cluster URL of a Workload's engine metrics route (``path``: ``/metrics``)."""
    return f"http://{engine_name(workload_name)}.{namespace}.svc:{ENGINE_PORT}{path}"


def workload_selector(workload_name: str) -> dict[str, str]:
    """The labels selecting a Workload's engine pods.

    Deployment selectors are immutable, so nothing that can change (the framework, say) is
    part of them.
    """
    return {
        LABEL_INSTANCE: label_value(workload_name),
        LABEL_COMPONENT: COMPONENT,
        LABEL_WORKLOAD: label_value(workload_name),
    }


def workload_labels(workload_name: str, spec: WorkloadSpec) -> dict[str, str]:
    """All labels of a Workload's engine objects (the selector's plus name, part-of, ...)."""
    return standard_labels(
        name=spec.engine,
        instance=workload_name,
        component=COMPONENT,
        extra={LABEL_WORKLOAD: workload_name},
    )


def engine_args_hash(eas_spec: EngineArgsSetSpec | None) -> str:
    """The hash recorded in the pod template (``kyai.io/engine-args-hash``)."""
    return spec_hash(eas_spec)


def startup_failure_threshold(spec: WorkloadSpec) -> int:
    """Startup probe failures allowed: the startup timeout divided by the probe period."""
    return math.ceil(spec.probes.startup_timeout_seconds / PROBE_PERIOD_SECONDS)


def _probes(spec: WorkloadSpec) -> dict[str, dict[str, Any]]:
    http_get = {"path": engine_for(spec.engine).health_path, "port": PORT_NAME}
    return {
        "startupProbe": {
            "httpGet": dict(http_get),
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": PROBE_TIMEOUT_SECONDS,
            "failureThreshold": startup_failure_threshold(spec),
        },
        "readinessProbe": {
            "httpGet": dict(http_get),
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": PROBE_TIMEOUT_SECONDS,
            "failureThreshold": READINESS_FAILURE_THRESHOLD,
        },
        "livenessProbe": {
            "httpGet": dict(http_get),
            "periodSeconds": LIVENESS_PERIOD_SECONDS,
            "timeoutSeconds": LIVENESS_TIMEOUT_SECONDS,
            "failureThreshold": LIVENESS_FAILURE_THRESHOLD,
        },
    }


def _resources(spec: WorkloadSpec) -> dict[str, dict[str, str]]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    wanted = spec.resources
    if wanted.gpus:
        # Extended resources must have equal requests and limits.
        requests[wanted.gpu_resource_name] = limits[wanted.gpu_resource_name] = str(wanted.gpus)
    if wanted.cpu is not None:
        requests["cpu"] = wanted.cpu  # no CPU limit: throttling a busy engine only slows it
    if wanted.memory is not None:
        requests["memory"] = limits["memory"] = wanted.memory
    resources: dict[str, dict[str, str]] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return resources


def _volumes(spec: WorkloadSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}}
    ]
    mounts: list[dict[str, Any]] = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    if spec.model_cache is not None:
        cache = spec.model_cache
        volumes.append(
            {
                "name": CACHE_VOLUME,
                "persistentVolumeClaim": {
                    "claimName": cache.claim_name,
                    "readOnly": cache.read_only,
                },
            }
        )
        mounts.append(
            {"name": CACHE_VOLUME, "mountPath": cache.mount_path, "readOnly": cache.read_only}
        )
    return volumes, mounts


def _engine_container(
    spec: WorkloadSpec, eas_spec: EngineArgsSetSpec | None, settings: OperatorSettings
) -> dict[str, Any]:
    image = engine_image(spec, settings)
    command = engine_command(spec, eas_spec, image=image)
    volumes_mounts = _volumes(spec)[1]
    container: dict[str, Any] = {
        "name": ENGINE_CONTAINER,
        "image": image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": command.command,
        "args": command.args,
        "ports": [{"name": PORT_NAME, "containerPort": ENGINE_PORT, "protocol": "TCP"}],
        "env": engine_env(spec, eas_spec),
        "resources": _resources(spec),
        "volumeMounts": volumes_mounts,
        **_probes(spec),
        "securityContext": engine_container_security_context(),
    }
    if not container["env"]:
        del container["env"]
    return container


def engine_image(spec: WorkloadSpec, settings: OperatorSettings) -> str:
    """The image a Workload's engine runs: ``spec.image``, else the operator's default."""
    return spec.image or settings.engine_image(spec.engine)


def _check(spec: WorkloadSpec) -> None:
    if spec.endpoint is not None:
        raise ManifestError(
            "The Workload has spec.endpoint: it is served elsewhere, so it has no engine "
            "Deployment or Service."
        )


def engine_pod_spec(
    spec: WorkloadSpec, eas_spec: EngineArgsSetSpec | None, settings: OperatorSettings
) -> dict[str, Any]:
    """The engine pod: one container, its volumes, and the Workload's scheduling fields."""
    pod_spec: dict[str, Any] = {
        # Service links put <SERVICE>_PORT variables in the environment; vLLM reads every
        # VLLM_* variable as a setting (see kyai.engines.vllm).
        "enableServiceLinks": False,
        # The engine never talks to the Kubernetes API.
        "automountServiceAccountToken": False,
        "securityContext": engine_pod_security_context(),
        "containers": [_engine_container(spec, eas_spec, settings)],
        "volumes": _volumes(spec)[0],
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = [dict(toleration) for toleration in spec.tolerations]
    if spec.affinity:
        pod_spec["affinity"] = dict(spec.affinity)
    return pod_spec


def workload_deployment(
    name: str,
    namespace: str,
    spec: WorkloadSpec,
    eas_spec: EngineArgsSetSpec | None,
    settings: OperatorSettings,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Deployment serving Workload ``name`` with ``eas_spec``'s flags.

    ``owner`` is the Workload as read from the API server (a kopf Body or dict); when given,
    the Deployment gets a controller owner reference to it. The Deployment's
    ``kyai.io/spec-hash`` annotation hashes its spec, so a reconciler can tell whether the
    object in the cluster is current without comparing fields the API server defaulted.

    Raises :class:`~kyai.builders.ManifestError` for a Workload with an endpoint and
    :class:`~kyai.engines.EngineArgsError` for flags the engine cannot take.

    The Workload's Kueue labels (or the operator's ``default_queue_name``) go on the
    Deployment and its pod template (:func:`kyai.builders.queue.queue_labels`).
    """
    _check(spec)
    # Kueue's labels on the Deployment and its pods (its pod integration admits them one
    # by one, each gated by ``kueue.x-k8s.io/admission`` until it fits the quota).
    queue = queue_labels(owner or {}, settings.default_queue_name)
    labels = {**workload_labels(name, spec), **queue}
    deployment_spec: dict[str, Any] = {
        "replicas": spec.replicas,
        "selector": {"matchLabels": workload_selector(name)},
        "progressDeadlineSeconds": spec.probes.startup_timeout_seconds
        + PROGRESS_DEADLINE_MARGIN_SECONDS,
        "revisionHistoryLimit": 3,
        "template": {
            "metadata": {
                "labels": labels,
                "annotations": {ANNOTATION_ENGINE_ARGS_HASH: engine_args_hash(eas_spec)},
            },
            "spec": engine_pod_spec(spec, eas_spec, settings),
        },
    }
    if spec.resources.gpus:
        # A surge pod would wait for GPUs the old pod holds: replace pods one at a time.
        deployment_spec["strategy"] = {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        }
    return hashed_object(
        "apps/v1",
        "Deployment",
        name=engine_name(name),
        namespace=namespace,
        labels=labels,
        spec=deployment_spec,
        owner=owner,
    )


def workload_service(
    name: str,
    namespace: str,
    spec: WorkloadSpec,
    owner: Mapping[str, Any] | None = None,
    *,
    selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ClusterIP Service in front of Workload ``name``'s engine pods (port 8000, ``http``).

    ``selector`` narrows the pods it selects (a multi-node Workload's: its groups' leaders);
    by default every engine pod of the Workload (:func:`workload_selector`).

    Raises :class:`~kyai.builders.ManifestError` for a Workload with an endpoint.
    """
    _check(spec)
    service_spec: dict[str, Any] = {
        "type": "ClusterIP",
        "selector": dict(selector) if selector is not None else workload_selector(name),
        "ports": [
            {"name": PORT_NAME, "port": ENGINE_PORT, "targetPort": PORT_NAME, "protocol": "TCP"}
        ],
    }
    return hashed_object(
        "v1",
        "Service",
        name=engine_name(name),
        namespace=namespace,
        labels=workload_labels(name, spec),
        spec=service_spec,
        owner=owner,
    )


__all__ = [
    "CACHE_VOLUME",
    "COMPONENT",
    "ENGINE_CONTAINER",
    "PORT_NAME",
    "SHM_VOLUME",
    "EngineArgsError",
    "engine_args_hash",
    "engine_image",
    "engine_name",
    "engine_pod_spec",
    "startup_failure_threshold",
    "workload_deployment",
    "workload_endpoint",
    "workload_labels",
    "workload_selector",
    "workload_service",
]
