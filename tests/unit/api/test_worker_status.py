"""What a worker may write into its run, and the one reporter every worker writes it with."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from kyai.api import EvaluationRunStatus, Progress, WorkerStatus
from kyai.lmeval import _report as lmeval_report
from kyai.worker_status import (
    FINAL_ATTEMPTS,
    ReportError,
    WorkerStatusReporter,
    send_final,
    worker_patch,
)


@pytest.mark.parametrize("field", ["phase", "conditions", "plan", "message", "accepted_spec"])
def test_a_worker_cannot_write_what_the_operator_owns(field: str) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        WorkerStatus.model_validate({field: None})


def test_every_worker_field_is_a_field_of_the_runs_status() -> None:
    status = EvaluationRunStatus.model_fields
    for name, field in WorkerStatus.model_fields.items():
        assert name in status and status[name].alias == field.alias


def test_the_patch_holds_the_fields_set_in_the_apis_spelling() -> None:
    body = worker_patch(WorkerStatus(avg_score=0.5, error_count=0, metrics={"a/b": 1.0}))
    assert body == {"status": {"avgScore": 0.5, "errorCount": 0, "metrics": {"a/b": 1.0}}}


async def test_progress_is_sent_stamped_and_once(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []
    async with WorkerStatusReporter(sent.append, interval_s=3600) as reporter:
        reporter.progress(Progress(phase="judge", done=1, total=2))
        reporter.progress(Progress(phase="judge", done=2, total=2), finished=True)
        for _ in range(50):
            if sent:
                break
            await asyncio.sleep(0.01)
        reporter.progress(Progress(phase="judge", done=2, total=2))  # the same again: not sent
    assert len(sent) == 1
    progress = sent[0]["status"]["progress"]
    assert progress["done"] == 2 and progress["updatedAt"].endswith("Z")


async def test_the_final_report_is_tried_then_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_sleep(seconds: float) -> None:
        return None

    monkeypatch.setattr("kyai.worker_status.asyncio.sleep", no_sleep)
    calls: list[dict[str, Any]] = []

    def flaky(body: dict[str, Any]) -> None:
        calls.append(body)
        if len(calls) < 3:
            raise RuntimeError("503")

    await send_final(flaky, WorkerStatus(avg_score=1.0))
    assert len(calls) == 3

    def refused(body: dict[str, Any]) -> None:
        raise RuntimeError("forbidden")

    with pytest.raises(ReportError, match="forbidden"):
        await send_final(refused, WorkerStatus(avg_score=1.0))


def test_lm_eval_reports_through_the_same_reporter(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, str, dict[str, Any]]] = []

    def patcher(namespace: str, name: str) -> Any:
        return lambda body: sent.append((namespace, name, body))

    monkeypatch.setattr(lmeval_report, "run_status_patcher", patcher)
    summary = {"metrics": {"gsm8k/acc,none": 0.25, "a/b": 1.0}, "thresholds": []}
    lmeval_report.report_metrics("ns", "r", summary)
    assert sent == [("ns", "r", {"status": {"metrics": {"a/b": 1.0, "gsm8k/acc,none": 0.25}}})]
    assert FINAL_ATTEMPTS == 5
