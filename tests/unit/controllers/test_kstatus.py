"""kstatus conditions (Reconciling, Stalled) derived by the one status writer for every kind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kyai.api import (
    EngineArgsSetStatus,
    EvaluationRunStatus,
    SnapshotStatus,
    StatusBase,
    WorkloadStatus,
)
from kyai.controllers import _conditions as c
from kyai.controllers._conditions import Change
from kyai.controllers._services import Services
from kyai.controllers._status import StatusWriter
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings


class PatchRecorder:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def patch(
        self, kind: str, namespace: str, name: str, body: dict[str, Any], *, subresource: str
    ) -> dict[str, Any]:
        self.bodies.append(body["status"])
        return {"kind": kind, "metadata": {"name": name, "namespace": namespace}, **body}


def iso(delta: timedelta = timedelta()) -> str:
    return (datetime.now(UTC) + delta).isoformat(timespec="seconds").replace("+00:00", "Z")


def writer(kind: str, *, created: str | None = None) -> tuple[StatusWriter, PatchRecorder]:
    kube = PatchRecorder()
    svc = Services(kube, OperatorSettings(), RunMetrics())  # type: ignore[arg-type]
    meta = {"name": "x", "namespace": "n", "generation": 2, "creationTimestamp": created or iso()}
    return StatusWriter(svc, {"kind": kind, "metadata": meta, "spec": {}}), kube


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {cond["type"]: cond for cond in status["conditions"]}


STATUS = {
    "EvaluationRun": EvaluationRunStatus,
    "Workload": WorkloadStatus,
    "Snapshot": SnapshotStatus,
    "EngineArgsSet": EngineArgsSetStatus,
}

CASES = [
    ("EvaluationRun", "Pending", c.WORKLOAD_NOT_READY, "True", "False"),
    ("EvaluationRun", "Generating", c.GENERATING, "True", "False"),
    ("EvaluationRun", "Judging", c.JUDGING, "True", "False"),
    ("EvaluationRun", "Succeeded", c.SUCCEEDED, "False", "False"),
    ("EvaluationRun", "Failed", c.GENERATION_FAILED, "False", "True"),
    ("Workload", "Pending", c.ENGINE_ARGS_INVALID, "True", "False"),
    ("Workload", "Deploying", c.DEPLOYING, "True", "False"),
    ("Workload", "Ready", c.SERVING, "False", "False"),
    ("Workload", "Failed", c.INVALID_SPEC, "False", "True"),
    ("Snapshot", "Resolving", c.RESOLVING, "True", "False"),
    ("Snapshot", "Ready", c.RESOLVED, "False", "False"),
    ("Snapshot", "Failed", c.INVALID_DATA, "False", "True"),
    ("EngineArgsSet", "Ready", c.VALID, "False", "False"),
    ("EngineArgsSet", "Invalid", c.OWNED_FLAG, "False", "True"),
]


@pytest.mark.parametrize(("kind", "phase", "reason", "reconciling", "stalled"), CASES)
async def test_each_phase_sets_reconciling_and_stalled(
    kind: str, phase: str, reason: str, reconciling: str, stalled: str
) -> None:
    status_writer, kube = writer(kind)
    ready = phase in ("Ready", "Succeeded")
    model = STATUS[kind](
        phase=phase,
        message=f"the {phase} message",
        conditions=status_writer.conditions(Change(c.READY, ready, reason, f"the {phase} message")),
    )
    await status_writer.patch(model)
    (body,) = kube.bodies
    found = conditions(body)
    assert found["Ready"]["status"] == ("True" if ready else "False")
    assert found["Reconciling"]["status"] == reconciling
    assert found["Stalled"]["status"] == stalled
    for type_ in ("Reconciling", "Stalled"):
        assert found[type_]["observedGeneration"] == 2
        if found[type_]["status"] == "True":  # the phase's reason and message
            assert found[type_]["reason"] == reason
            assert found[type_]["message"] == f"the {phase} message"
        else:
            assert found[type_]["reason"] == phase
    assert body["phase"] == phase  # the phase stays


async def test_writes_without_phase_or_conditions_are_left_alone() -> None:
    status_writer, kube = writer("Snapshot")
    await status_writer.patch(SnapshotStatus(phase="Failed", message="m"))
    await status_writer.patch(
        StatusBase(conditions=status_writer.conditions(Change(c.DEGRADED, True, "R", "m")))
    )
    assert "conditions" not in kube.bodies[0]
    assert {cond["type"] for cond in kube.bodies[1]["conditions"]} == {"Degraded"}


async def test_transition_time_moves_only_when_the_status_does() -> None:
    status_writer, kube = writer("EvaluationRun")
    for phase, reason in (("Generating", c.GENERATING), ("Judging", c.JUDGING)):
        await status_writer.patch(
            EvaluationRunStatus(
                phase=phase,  # type: ignore[arg-type]
                message=phase,
                conditions=status_writer.conditions(Change(c.READY, False, reason, phase)),
            )
        )
    first, second = (conditions(body)["Reconciling"] for body in kube.bodies)
    assert (first["reason"], second["reason"]) == (c.GENERATING, c.JUDGING)
    assert first["lastTransitionTime"] == second["lastTransitionTime"]


async def test_a_missing_reference_stalls_after_the_grace_period() -> None:
    message = "the Workload cand does not exist"
    young, _ = writer("EvaluationRun", created=iso())
    old, _ = writer(
        "EvaluationRun",
        created=iso(-timedelta(seconds=c.MISSING_REFERENCE_GRACE_SECONDS + 5)),
    )
    for status_writer in (young, old):
        await status_writer.patch(
            EvaluationRunStatus(
                phase="Pending",
                message=message,
                conditions=status_writer.conditions(
                    Change(c.READY, False, c.WORKLOAD_NOT_FOUND, message)
                ),
            )
        )
    assert conditions(young.status)["Reconciling"]["status"] == "True"
    assert conditions(young.status)["Stalled"]["status"] == "False"
    stalled = conditions(old.status)["Stalled"]
    assert stalled["status"] == "True" and stalled["reason"] == c.WORKLOAD_NOT_FOUND
    assert message in stalled["message"] and "300s" in stalled["message"]
    assert conditions(old.status)["Reconciling"]["status"] == "False"
    # Once written, nothing more is due; a young one has nothing due either.
    assert not old.stall_due() and not young.stall_due()


async def test_stall_due_when_the_grace_period_passes_without_a_write() -> None:
    created = iso(-timedelta(seconds=c.MISSING_REFERENCE_GRACE_SECONDS + 5))
    status_writer, _ = writer("Workload", created=created)
    # A status written while the object was young: Reconciling, not Stalled.
    status_writer.status = {
        "phase": "Pending",
        "message": "the EngineArgsSet fast does not exist",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": c.ENGINE_ARGS_NOT_FOUND,
             "message": "m", "lastTransitionTime": created},
            {"type": "Stalled", "status": "False", "reason": "Pending", "message": "",
             "lastTransitionTime": created},
        ],
    }  # fmt: skip
    assert status_writer.stall_due()
    status_writer.status["conditions"][0]["reason"] = c.ENGINE_ARGS_INVALID  # exists, invalid
    assert not status_writer.stall_due()


@pytest.mark.parametrize("reason", [c.SECRET_NOT_FOUND, c.CLAIM_NOT_FOUND])
def test_a_missing_secret_or_claim_is_a_missing_reference(reason: str) -> None:
    old = iso(-timedelta(seconds=c.MISSING_REFERENCE_GRACE_SECONDS + 5))
    for kind, phase in (("Workload", "Deploying"), ("Workload", "Pending")):
        reconciling, stalled = c.kstatus_changes(kind, phase, reason, "m", created=old)
        assert (reconciling.status, stalled.status) == (False, True)
        young = c.kstatus_changes(kind, phase, reason, "m", created=iso())
        assert (young[0].status, young[1].status) == (True, False)


def test_the_grace_period_is_a_setting() -> None:
    ten_seconds_ago = iso(-timedelta(seconds=10))
    changes = c.kstatus_changes(
        "Workload", "Pending", c.SECRET_NOT_FOUND, "m", created=ten_seconds_ago, grace=5
    )
    assert changes[1].status is True and "more than 5s" in changes[1].message
    default = c.kstatus_changes("Workload", "Pending", c.SECRET_NOT_FOUND, "m",
                                created=ten_seconds_ago)  # fmt: skip
    assert default[1].status is False


def test_a_source_run_that_failed_stalls_at_once_and_only_while_it_holds() -> None:
    just_now = iso()
    waiting = c.kstatus_changes("EvaluationRun", "Pending", c.SOURCE_RUN_FAILED, "m",
                                created=just_now)  # fmt: skip
    assert (waiting[0].status, waiting[1].status) == (False, True)
    assert waiting[1].reason == c.SOURCE_RUN_FAILED and waiting[1].message == "m"
    judging = c.kstatus_changes("EvaluationRun", "Judging", c.JUDGING, "", created=just_now)
    assert (judging[0].status, judging[1].status) == (True, False)


def test_an_endpoint_check_failure_is_read_from_the_workers_words() -> None:
    from kyai.controllers._conditions import endpoint_check_reason

    said = (
        "the judge Job r-judge failed: pod r-judge-x exited with code 3: kyai judge: error: "
        "JudgeUnreachable: --judge-endpoint: Cannot reach http://j/v1/models (4 attempts in "
        "7.0 s): connection refused (Job: BackoffLimitExceeded)"
    )
    assert endpoint_check_reason(said) == "JudgeUnreachable"
    assert endpoint_check_reason(said.replace("JudgeUnreachable", "CandidateKeyRefused")) == (
        "CandidateKeyRefused"
    )
    # Another error of the worker, or a reason it does not give, is no endpoint check.
    assert endpoint_check_reason("kyai judge: error: --grader: no such file") is None
    assert endpoint_check_reason("kyai judge: error: Traceback: boom") is None
