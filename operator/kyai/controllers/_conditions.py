"""Conditions as Kubernetes API conventions describe them, and the reasons the operator uses.

A condition keeps its ``lastTransitionTime`` while its status does not change; every
condition records the ``observedGeneration`` it was computed from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kyai._clock import now as now  # re-exported: c.now() in the controllers
from kyai.api import Condition, ConditionStatus

# Condition types.
READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
PASSED = "Passed"

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
