"""Conditions as Kubernetes API conventions describe them, and the reasons the operator uses.

A condition keeps its ``lastTransitionTime`` while its status does not change; every
condition records the ``observedGeneration`` it was computed from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from kyai._clock import now as now  # re-exported: c.now() in the controllers
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
JUDGE_NOT_CONFIGURED = "JudgeNotConfigured"
JUDGE_NOT_READY = "JudgeNotReady"
GENERATING = "Generating"
JUDGING = "Judging"
GENERATION_FAILED = "GenerationFailed"
JUDGING_FAILED = "JudgingFailed"
RESULT_MISSING = "ResultMissing"
WORKER_NOT_STARTING = "WorkerNotStarting"
SECRET_NOT_FOUND = "SecretNotFound"
FORBIDDEN = "Forbidden"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
THRESHOLDS_MET = "ThresholdsMet"
THRESHOLDS_MISSED = "ThresholdsMissed"


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    *,
    generation: int | None,
) -> list[dict[str, Any]]:
    """A new list with ``type_`` set; the transition time moves only when the status does."""
    value: ConditionStatus = "Unknown" if status is None else ("True" if status else "False")
    result: list[dict[str, Any]] = []
    previous: Condition | None = None
    for condition in conditions or ():
        if condition.get("type") == type_:
            previous = Condition.model_validate(condition)
        else:
            result.append(dict(condition))
    since = now()
    if previous is not None and previous.status == value:
        since = previous.last_transition_time
    updated = Condition(
        type=type_,
        status=value,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )
    index = next((i for i, c in enumerate(conditions or ()) if c.get("type") == type_), len(result))
    result.insert(index, updated.model_dump(mode="json", by_alias=True))
    return result


def get_condition(
    conditions: Sequence[Mapping[str, Any]] | None, type_: str
) -> Mapping[str, Any] | None:
    """The condition of a type, if set."""
    for condition in conditions or ():
        if condition.get("type") == type_:
            return condition
    return None


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
}
#: Phases that cannot progress without a change by a person (kstatus ``Stalled``).
STALLED_PHASES: Mapping[str, frozenset[str]] = {
    "EvaluationRun": frozenset({"Failed"}),
    "Workload": frozenset({"Failed"}),
    "Snapshot": frozenset({"Failed"}),
    "EngineArgsSet": frozenset({"Invalid"}),
}
#: Waiting reasons for an object that does not exist: Stalled once the grace period is over.
MISSING_REFERENCE = frozenset(
    {WORKLOAD_NOT_FOUND, SNAPSHOT_NOT_FOUND, SOURCE_RUN_NOT_FOUND, ENGINE_ARGS_NOT_FOUND}
)
#: How long a missing reference is waited for before the object is called Stalled.
MISSING_REFERENCE_GRACE_SECONDS = 300.0


def _age_seconds(since: str | None, at: str) -> float:
    if not since:
        return 0.0
    try:
        start = datetime.fromisoformat(since.replace("Z", "+00:00"))
        end = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
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
) -> list[tuple[str, bool, str, str]]:
    """``Reconciling`` and ``Stalled`` for an object of ``kind`` in ``phase``.

    kstatus reads an object as InProgress while ``Reconciling`` is True, Failed while
    ``Stalled`` is True, and Current otherwise (with ``observedGeneration`` caught up), so
    both are always written, False when they do not hold. ``reason``/``message`` are those
    of the phase (the ``Ready`` condition's). A wait for an object that does not exist
    (``MISSING_REFERENCE``) turns Stalled once the object is older than the grace period.
    """
    reconciling = phase in RECONCILING_PHASES.get(kind, frozenset())
    stalled = phase in STALLED_PHASES.get(kind, frozenset())
    if (
        reconciling
        and reason in MISSING_REFERENCE
        and _age_seconds(created, at or now()) >= MISSING_REFERENCE_GRACE_SECONDS
    ):
        reconciling, stalled = False, True
        message = f"{message} (for more than {MISSING_REFERENCE_GRACE_SECONDS:.0f}s)"
    return [
        (
            RECONCILING,
            reconciling,
            reason if reconciling else phase,
            message if reconciling else "",
        ),
        (STALLED, stalled, reason if stalled else phase, message if stalled else ""),
    ]
