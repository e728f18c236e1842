"""Conditions as Kubernetes API conventions describe them, and the reasons the operator uses.

A condition keeps its ``lastTransitionTime`` while its status does not change; every
condition records the ``observedGeneration`` it was computed from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kyai._clock import now as now  # re-exported: c.now() in the controllers
from kyai._clock import parse_time
from kyai.api import Condition, ConditionStatus

# Condition types.
READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
PASSED = "Passed"
# kstatus (sigs.k8s.io/cli-utils/pkg/kstatus): "abnormal-true" conditions.
RECONCILING = "Reconciling"
STALLED = "Stalled"

# Reasons (CamelCase, one vocabulary for all kinds).
INVALID_SPEC = "InvalidSpec"
OWNED_FLAG = "OwnedFlag"
#: An EngineArgsSet's flag the engine version's table refuses (unknown, bad value, a false
#: the engine cannot honour).
INVALID_FLAGS = "InvalidFlags"
#: Flags checked against another version's table (the image's version has none): warnings.
UNCHECKED_FLAGS = "UncheckedFlags"
VALID = "Valid"
ENGINE_ARGS_NOT_FOUND = "EngineArgsSetNotFound"
ENGINE_ARGS_INVALID = "EngineArgsSetInvalid"
FRAMEWORK_MISMATCH = "FrameworkMismatch"
DEPLOYING = "Deploying"
ENDPOINT_UNREACHABLE = "EndpointUnreachable"
SERVING = "Serving"
MODEL_NOT_SERVED = "ModelNotServed"
RESOLVING = "Resolving"
RESOLVED = "Resolved"
SOURCE_UNAVAILABLE = "SourceUnavailable"
INVALID_DATA = "InvalidData"
TOO_LARGE = "TooLarge"
SPEC_IMMUTABLE = "SpecImmutable"
WORKLOAD_NOT_FOUND = "WorkloadNotFound"
WORKLOAD_NOT_READY = "WorkloadNotReady"
SNAPSHOT_NOT_FOUND = "SnapshotNotFound"
SNAPSHOT_NOT_READY = "SnapshotNotReady"
SOURCE_RUN_NOT_FOUND = "SourceRunNotFound"
SOURCE_RUN_NOT_READY = "SourceRunNotReady"
SOURCE_RUN_FAILED = "SourceRunFailed"
#: A re-judge whose chain of source runs comes round again (to itself, or to re-judges that
#: re-judge each other): none of them can ever start.
CIRCULAR_REJUDGE = "CircularRejudge"
ENGINE_NOT_STARTING = "EngineNotStarting"
#: A served engine's container exits and restarts (CrashLoopBackOff, Error, OOMKilled).
ENGINE_CRASHING = "EngineCrashing"
#: A served engine's image cannot be pulled (ErrImagePull, ImagePullBackOff, ...).
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
#: The scheduler cannot place a served engine's pod (its own words, e.g. Insufficient GPUs).
UNSCHEDULABLE = "Unschedulable"
#: A run's Workload cannot serve and will not without a change (Stalled): the run fails.
WORKLOAD_FAILED = "WorkloadFailed"
JUDGE_NOT_CONFIGURED = "JudgeNotConfigured"
JUDGE_NOT_READY = "JudgeNotReady"
#: A run that names no judge in a namespace ``defaultJudge.namespaceSelector`` leaves out.
DEFAULT_JUDGE_NOT_ALLOWED = "DefaultJudgeNotAllowed"
#: A run that names no judge, outside the namespace of the default judge's key, without the
#: judge gateway (the key is never copied into a tenant's namespace).
DEFAULT_JUDGE_NEEDS_GATEWAY = "DefaultJudgeNeedsGateway"
GENERATING = "Generating"
JUDGING = "Judging"
GENERATION_FAILED = "GenerationFailed"
JUDGING_FAILED = "JudgingFailed"
#: An endpoint a run needs failed the worker's check before any request was sent (``kyai``
#: exits 3 with the reason first in its termination message).
ENDPOINT_CHECK_REASONS = frozenset(
    f"{who}{what}"
    for who in ("Candidate", "Judge")
    for what in ("Unreachable", "ModelNotServed", "KeyRefused")
)
#: The operator checks the endpoints a run calls (its judges) before a Job: one did not answer
#: yet and is asked again.
CHECKING_ENDPOINTS = "CheckingEndpoints"
_ENDPOINT_CHECK = re.compile(r"\bkyai [a-z-]+: error: ([A-Za-z]+): ")


def endpoint_check_reason(message: str) -> str | None:
    """The reason a worker's endpoint check gave (``JudgeUnreachable``, ...), if it did."""
    found = _ENDPOINT_CHECK.search(message)
    if found is None or found.group(1) not in ENDPOINT_CHECK_REASONS:
        return None
    return found.group(1)


RESULT_MISSING = "ResultMissing"
#: An EvaluationSchedule: its newest finished run compared with its baseline.
REGRESSED = "Regressed"
#: Its Ready reasons: runs are made on schedule, or new runs are held (spec.suspend).
SCHEDULED = "Scheduled"
SUSPENDED = "Suspended"
#: Regressed's reasons: shown worse than the margin, not shown worse, no verdict.
WORSE_THAN_MARGIN = "WorseThanMargin"
NOT_SHOWN_WORSE = "NotShownWorse"
WORKER_NOT_STARTING = "WorkerNotStarting"
#: Kueue has not admitted a Job or engine pod (its Kueue Workload not QuotaReserved/Admitted).
WAITING_FOR_QUOTA = "WaitingForQuota"
#: Kueue evicted a Job or engine pod to make room for another; it waits to be admitted again.
PREEMPTED = "Preempted"
#: A run's Job is suspended, and no Kueue queue will start it.
JOB_SUSPENDED = "JobSuspended"
#: Waiting for Kueue (or a suspended Job): the time never counts against a start-up deadline.
QUEUED = frozenset({WAITING_FOR_QUOTA, PREEMPTED, JOB_SUSPENDED})
#: A Workload on several nodes (spec.nodes > 1) in a cluster without LeaderWorkerSet's CRD.
LEADER_WORKER_SET_NOT_INSTALLED = "LeaderWorkerSetNotInstalled"
SECRET_NOT_FOUND = "SecretNotFound"
CLAIM_NOT_FOUND = "ClaimNotFound"
FORBIDDEN = "Forbidden"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
THRESHOLDS_MET = "ThresholdsMet"
THRESHOLDS_MISSED = "ThresholdsMissed"
BASELINE_NOT_FOUND = "BaselineNotFound"
BASELINE_NOT_READY = "BaselineNotReady"
BASELINE_FAILED = "BaselineFailed"
NOT_COMPARABLE = "NotComparable"
SCORES_UNAVAILABLE = "ScoresUnavailable"
#: A paired comparison whose interval cannot be estimated (continuous scores whose
#: differences are all equal): no verdict, so the non-inferiority gate does not pass.
NOT_ESTIMABLE = "NotEstimable"
#: An EvaluationSweep whose Workloads and EngineArgsSets give no cell (no shared framework).
NO_CELLS = "NoCells"


@dataclass(frozen=True)
class Change:
    """A condition to set: its type, status (None: Unknown), reason and message."""

    type: str
    status: bool | None
    reason: str
    message: str


def set_condition(
    conditions: Sequence[Condition], change: Change, *, generation: int | None
) -> list[Condition]:
    """A new list with ``change`` applied; the transition time moves only when the status does.

    A new type goes at the end; an existing one keeps its place.
    """
    value: ConditionStatus = (
        "Unknown" if change.status is None else ("True" if change.status else "False")
    )
    previous = find_condition(conditions, change.type)
    since = (
        previous.last_transition_time
        if previous is not None and previous.status == value
        else now()
    )
    updated = Condition(
        type=change.type,
        status=value,
        reason=change.reason,
        message=change.message,
        last_transition_time=since,
        observed_generation=generation,
    )
    if previous is None:
        return [*conditions, updated]
    return [updated if found.type == change.type else found for found in conditions]


def find_condition(conditions: Sequence[Condition], type_: str) -> Condition | None:
    """The condition of a type, if set."""
    return next((found for found in conditions if found.type == type_), None)


def validation_message(error: Exception) -> str:
    """A pydantic ValidationError as one line naming each field (cluster field names)."""
    from pydantic import ValidationError

    if not isinstance(error, ValidationError):
        return str(error)
    parts = []
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        parts.append(f"spec.{location}: {message}" if location else message)
    return "; ".join(parts)


#: Phases in which an object is still being worked on, per kind (kstatus ``Reconciling``).
RECONCILING_PHASES: Mapping[str, frozenset[str]] = {
    "EvaluationRun": frozenset({"Pending", "Generating", "Judging"}),
    "Workload": frozenset({"Pending", "Deploying"}),
    "Snapshot": frozenset({"Pending", "Resolving"}),
    "EngineArgsSet": frozenset(),
    "EvaluationSweep": frozenset({"Pending", "Running"}),
    "EvaluationSchedule": frozenset(),
}
#: Phases that cannot progress without a change by a person (kstatus ``Stalled``).
STALLED_PHASES: Mapping[str, frozenset[str]] = {
    "EvaluationRun": frozenset({"Failed"}),
    "Workload": frozenset({"Failed"}),
    "Snapshot": frozenset({"Failed"}),
    "EngineArgsSet": frozenset({"Invalid"}),
    "EvaluationSweep": frozenset({"Failed"}),
    "EvaluationSchedule": frozenset({"Invalid"}),
}
#: Waiting reasons for an object that does not exist: Stalled once the grace period is over.
MISSING_REFERENCE = frozenset(
    {
        WORKLOAD_NOT_FOUND,
        SNAPSHOT_NOT_FOUND,
        SOURCE_RUN_NOT_FOUND,
        BASELINE_NOT_FOUND,
        ENGINE_ARGS_NOT_FOUND,
        SECRET_NOT_FOUND,
        CLAIM_NOT_FOUND,
    }
)
# Queues and sources that cannot work as they are (Kueue's queue name; a Snapshot's source).
#: A ``kueue.x-k8s.io/queue-name`` label no LocalQueue can have (Kueue's rule): Stalled at
#: once, nothing made, until the label changes.
INVALID_QUEUE_NAME = "InvalidQueueName"
#: A Snapshot's source answered that the file, dataset, revision or entry does not exist
#: (HTTP 404/410; the Hub's RepositoryNotFound, RevisionNotFound, EntryNotFound): Stalled,
#: looked at again every ``snapshot_retry_max_seconds``.
SOURCE_NOT_FOUND = "SourceNotFound"
#: A Snapshot's source refused access (HTTP 401/403; a gated or disabled Hub dataset):
#: Stalled, looked at again every ``snapshot_retry_max_seconds``.
SOURCE_FORBIDDEN = "SourceForbidden"
#: A Snapshot's source host has no address (DNS): said at once, tried again on the usual
#: schedule (a name server can come back), not Stalled.
SOURCE_UNREACHABLE = "SourceUnreachable"
#: What a Snapshot's source said, passed on to the runs waiting for it as their own reason.
SOURCE_FAILURES = frozenset({SOURCE_NOT_FOUND, SOURCE_FORBIDDEN, SOURCE_UNREACHABLE})
#: Waiting reasons that no wait can cure (a source run or baseline that Failed never
#: succeeds; re-judges in a circle never start; a sweep's spec the listed objects make
#: invalid; a namespace the default judge's selector leaves out, or a default judge that needs
#: the gateway): Stalled at once, and no longer Stalled when the cause goes (the run
#: re-created and Succeeded, the spec or objects changed, the namespace labelled, the gateway
#: set).
STALLING = frozenset(
    {
        SOURCE_RUN_FAILED,
        CIRCULAR_REJUDGE,
        BASELINE_FAILED,
        INVALID_SPEC,
        NO_CELLS,
        LEADER_WORKER_SET_NOT_INSTALLED,
        DEFAULT_JUDGE_NOT_ALLOWED,
        DEFAULT_JUDGE_NEEDS_GATEWAY,
        INVALID_QUEUE_NAME,
        SOURCE_NOT_FOUND,
        SOURCE_FORBIDDEN,
    }
)

#: How long a missing reference is waited for before the object is called Stalled (the
#: operator's ``missing_reference_grace_seconds`` setting overrides it).
MISSING_REFERENCE_GRACE_SECONDS = 300.0


def _age_seconds(since: str | None, at: str) -> float:
    start, end = parse_time(since), parse_time(at)
    if start is None or end is None:
        return 0.0
    return (end - start).total_seconds()


def kstatus_changes(
    kind: str,
    phase: str,
    reason: str,
    message: str,
    *,
    created: str | None = None,
    at: str | None = None,
    grace: float = MISSING_REFERENCE_GRACE_SECONDS,
) -> list[Change]:
    """``Reconciling`` and ``Stalled`` for an object of ``kind`` in ``phase``.

    kstatus reads an object as InProgress while ``Reconciling`` is True, Failed while
    ``Stalled`` is True, and Current otherwise (with ``observedGeneration`` caught up), so
    both are always written, False when they do not hold. ``reason``/``message`` are those
    of the phase (the ``Ready`` condition's). A wait for an object that does not exist
    (``MISSING_REFERENCE``) turns Stalled once the object is older than ``grace`` seconds; a
    wait no time can end (``STALLING``) is Stalled at once.
    """
    reconciling = phase in RECONCILING_PHASES.get(kind, frozenset())
    stalled = phase in STALLED_PHASES.get(kind, frozenset())
    if reconciling and reason in STALLING:
        reconciling, stalled = False, True
    elif (
        reconciling and reason in MISSING_REFERENCE and _age_seconds(created, at or now()) >= grace
    ):
        reconciling, stalled = False, True
        message = f"{message} (for more than {grace:.0f}s)"
    return [
        Change(
            RECONCILING,
            reconciling,
            reason if reconciling else phase,
            message if reconciling else "",
        ),
        Change(STALLED, stalled, reason if stalled else phase, message if stalled else ""),
    ]
