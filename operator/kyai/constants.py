"""Names shared by the operator, its workers and its manifests: one place, no string drift."""

from __future__ import annotations

#: The API group and version of every KYAI custom resource.
GROUP = "kyai.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: Kind → (plural, singular, short names), the CRDs' names.
KINDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "EngineArgsSet": ("engineargssets", "engineargsset", ("eas",)),
    "Workload": ("workloads", "workload", ("wl",)),
    "Snapshot": ("snapshots", "snapshot", ("snap",)),
    "EvaluationRun": ("evaluationruns", "evaluationrun", ("er",)),
    "EvaluationSweep": ("evaluationsweeps", "evaluationsweep", ("esw", "sweep")),
    "EvaluationSchedule": ("evaluationschedules", "evaluationschedule", ("esched",)),
}

#: The category ``kubectl get kyai`` lists.
CATEGORY = "kyai"

#: Label keys set on every child object.
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_WORKLOAD = f"{GROUP}/workload"
LABEL_RUN = f"{GROUP}/evaluation-run"
LABEL_SNAPSHOT = f"{GROUP}/snapshot"
LABEL_PHASE = f"{GROUP}/phase"
#: On an EvaluationSweep's runs, derived Workloads and table ConfigMap: the sweep's name.
LABEL_SWEEP = f"{GROUP}/sweep"
#: On the runs an EvaluationSchedule makes: the schedule's name.
LABEL_SCHEDULE = f"{GROUP}/schedule"
#: On those runs: why the run was made (schedule, change, request).
ANNOTATION_SCHEDULE_TRIGGER = f"{GROUP}/schedule-trigger"
#: On an EvaluationSchedule: make a run now (any value; the operator acts once and removes it).
ANNOTATION_RUN_NOW = f"{GROUP}/run-now"
#: On a sweep's run: the hash of its cell (workload, engine-args set, snapshot).
LABEL_SWEEP_CELL = f"{GROUP}/sweep-cell"
#: On a sweep's derived Workload (and its runs): the hash of (workload, engine-args set).
LABEL_SWEEP_VARIANT = f"{GROUP}/sweep-variant"

#: Annotation keys.
ANNOTATION_ENGINE_ARGS_HASH = f"{GROUP}/engine-args-hash"
ANNOTATION_SPEC_HASH = f"{GROUP}/spec-hash"
#: On a sweep's run and derived Workload: the names its cell is made of (label values may
#: be cut; these are whole).
ANNOTATION_SWEEP_WORKLOAD = f"{GROUP}/sweep-workload"
ANNOTATION_SWEEP_ENGINE_ARGS_SET = f"{GROUP}/sweep-engine-args-set"
ANNOTATION_SWEEP_SNAPSHOT = f"{GROUP}/sweep-snapshot"
#: On a sweep's run: the hash of the spec.run block it was made from.
ANNOTATION_SWEEP_RUN_HASH = f"{GROUP}/sweep-run-hash"

#: The finalizer and the prefix kopf uses for its own bookkeeping annotations.
FINALIZER = f"{GROUP}/finalizer"
#: On a Snapshot or Workload while a started, unfinished EvaluationRun uses it (as
#: Kubernetes' ``kubernetes.io/pvc-protection``): deleting it waits until no run needs it.
IN_USE_FINALIZER = f"{GROUP}/in-use"
KOPF_PREFIX = f"operator.{GROUP}"

#: The name the operator gives itself in managed-by labels and events.
MANAGER = "kyai-operator"

#: The port every engine serves on inside its pod.
ENGINE_PORT = 8000

#: The environment variable telling ``kyai generate/judge`` where to write its final error
#: (a worker container's ``terminationMessagePath``; Kubernetes keeps at most 4096 bytes).
TERMINATION_MESSAGE_ENV = "KYAI_TERMINATION_MESSAGE_PATH"

#: The audience of the projected ServiceAccount token a judge pod shows the judge gateway
#: (a token for the API server is refused there, and this one is useless against the API
#: server).
JUDGE_GATEWAY_AUDIENCE = "kyai-judge-gateway"

#: The shortest lifetime the API server issues a projected ServiceAccount token for (seconds).
MIN_PROJECTED_TOKEN_SECONDS = 600

#: The error code (``error.code``) of the judge gateway's answer when the default judge
#: refused the platform's API key (401 or 403 upstream): the platform's problem, never the
#: caller's, and not cured by asking again. Workers stop early on it and say whose it is.
GATEWAY_REFUSED_KEY = "UpstreamRefusedKey"
