import asyncio
from typing import Any

import pytest

from kyai.api.evaluationrun import MAX_METRICS
from kyai.evaluation import ProgressUpdate
from kyai.evaluation._report import (
    MAX_STATUS_SCORES,
    ReportError,
    StatusReporter,
    result_status,
    run_metrics,
)


def update(done: int, total: int = 10, errors: int = 0) -> ProgressUpdate:
    return ProgressUpdate("generate", done, total, errors, 1.0)


async def test_progress_is_throttled_and_the_last_one_is_sent() -> None:
    sent: list[dict[str, Any]] = []
    async with StatusReporter(sent.append, interval_s=3600) as reporter:
        for done in range(1, 6):
            reporter.listener(update(done))
        await asyncio.sleep(0.05)
        assert sent == []  # nothing before the interval or the end
    assert len(sent) == 1
    progress = sent[0]["status"]["progress"]
    assert (progress["phase"], progress["done"], progress["total"]) == ("generate", 5, 10)
    assert progress["updatedAt"].endswith("Z")


async def test_completion_is_sent_at_once() -> None:
    sent: list[dict[str, Any]] = []
    async with StatusReporter(sent.append, interval_s=3600) as reporter:
        reporter.listener(update(10, errors=2))
        for _ in range(50):
            if sent:
                break
            await asyncio.sleep(0.01)
        assert sent and sent[0]["status"]["progress"]["errors"] == 2


async def test_progress_failures_do_not_stop_the_run(caplog: pytest.LogCaptureFixture) -> None:
    def broken(body: dict[str, Any]) -> None:
        raise RuntimeError("API server down")

    async with StatusReporter(broken, interval_s=3600) as reporter:
        reporter.listener(update(3))
    assert "API server down" in caplog.text


async def sent_soon(sent: list[dict[str, Any]], count: int) -> None:
    for _ in range(100):
        if len(sent) >= count:
            return
        await asyncio.sleep(0.01)


async def test_a_retry_is_reported_at_once_and_its_end_too() -> None:
    sent: list[dict[str, Any]] = []
    retrying = "candidate unreachable: connection refused; attempt 1 of 6, next in 1 s"
    async with StatusReporter(sent.append, interval_s=3600) as reporter:
        reporter.listener(update(2))
        await asyncio.sleep(0.05)
        assert sent == []  # counts alone wait for the interval
        reporter.listener(ProgressUpdate("generate", 2, 10, 0, 1.0, retrying))
        await sent_soon(sent, 1)
        assert sent[-1]["status"]["progress"]["message"] == retrying  # at once
        reporter.listener(
            ProgressUpdate("generate", 2, 10, 0, 1.0, retrying.replace("1 of", "2 of"))
        )
        await asyncio.sleep(0.05)
        assert len(sent) == 1  # a changed message waits for the interval
        reporter.listener(update(3))
        await sent_soon(sent, 2)
        # Retrying is over: said at once (null removes the message from the status).
        assert sent[-1]["status"]["progress"]["message"] is None
        assert sent[-1]["status"]["progress"]["done"] == 3


async def test_the_checks_are_reported_in_phase_preflight() -> None:
    sent: list[dict[str, Any]] = []
    failure = "JudgeUnreachable: --judge-endpoint: Cannot reach http://j/v1/models (...)"
    async with StatusReporter(sent.append, interval_s=3600) as reporter:
        reporter.checking("judge unreachable: connection refused; attempt 1 of 4, next in 1 s")
        await sent_soon(sent, 1)
        reporter.checking(failure)
    progress = sent[-1]["status"]["progress"]
    # The counts of an earlier phase are removed; the message leads with the reason.
    assert progress["phase"] == "preflight" and progress["message"] == failure
    assert progress["done"] is None and progress["total"] is None and progress["errors"] is None
    assert len(sent) == 2


SUMMARY = {
    "avg_score": 0.5,
    "avg_latency_ms": 12.5,
    "count": 4,
    "errors": {"judge_unparseable": 1},
    "error_count": 1,
    "comparison_key": "abcd",
    "judge_model": "j",
    "dataset": "d",
    "dataset_version": "custom",
    "dataset_sha256": "f" * 64,
    "scores": [1.0, 0.0, 1.0, 0.0],
}


async def test_final_result_fields() -> None:
    sent: list[dict[str, Any]] = []
    async with StatusReporter(sent.append) as reporter:
        await reporter.final(SUMMARY)
    status = sent[0]["status"]
    assert status == {
        "avgScore": 0.5,
        "avgLatencyMs": 12.5,
        "questions": 4,
        "errors": {"judge_unparseable": 1},
        "errorCount": 1,
        "comparisonKey": "abcd",
        "judgeModel": "j",
        "dataset": "d",
        "datasetVersion": "custom",
        "datasetSha256": "f" * 64,
        "scores": [1.0, 0.0, 1.0, 0.0],
        # Issue 13: the judge's score is a named metric too (thresholds.metrics gates it).
        "metrics": {"judge/avg_score": 0.5},
    }


def test_run_metrics_name_every_judges_metrics_and_stay_bounded() -> None:
    single = {
        **SUMMARY,
        "judge_name": "ifeval",
        "metrics": {"prompt_level_strict_acc": 0.25, "inst level/loose": 0.5},
    }
    assert run_metrics(single) == {
        "ifeval/avg_score": 0.5,
        "ifeval/inst_level_loose": 0.5,  # unsafe characters become "_"
        "ifeval/prompt_level_strict_acc": 0.25,
    }
    several = {
        **SUMMARY,
        "judges": [
            {"name": "llm", "avg_score": 0.5},
            {
                "name": "py",
                "avg_score": 1 / 3,
                "metrics": {"exact_match": 1 / 3, "invalid_rows": 4},
            },
        ],
    }
    assert run_metrics(several) == {
        "llm/avg_score": 0.5,
        "py/avg_score": 1 / 3,
        "py/exact_match": 1 / 3,
        "py/invalid_rows": 4.0,
    }
    many = {**single, "metrics": {f"m{i:03}": float(i) for i in range(200)}}
    assert len(run_metrics(many)) == MAX_METRICS == 64
    assert result_status(many)["metrics"] == run_metrics(many)


def test_scores_left_out_of_status_for_huge_snapshots() -> None:
    big = {**SUMMARY, "scores": [0.0] * (MAX_STATUS_SCORES + 1)}
    assert "scores" not in result_status(big)


async def test_final_result_must_get_through(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_sleep(seconds: float) -> None:
        return None

    monkeypatch.setattr("kyai.evaluation._report.asyncio.sleep", no_sleep)
    calls = 0

    def broken(body: dict[str, Any]) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("forbidden")

    reporter = StatusReporter(broken)
    with pytest.raises(ReportError, match="forbidden"):
        await reporter.final(SUMMARY)
    assert calls == 5


async def test_leaving_right_after_a_wake_sends_it_and_ends() -> None:
    """A failure reported as the worker leaves (the wake and the cancellation together) is
    sent once, and leaving ends: the sender must not outlive its cancellation."""
    sent: list[dict[str, Any]] = []

    async def leave_at_once() -> None:
        async with StatusReporter(sent.append, interval_s=0.2) as reporter:
            await asyncio.sleep(0)  # the sender waits for its wake
            reporter.checking("JudgeUnreachable: --judge-endpoint: Cannot reach ...")

    leaving = asyncio.create_task(leave_at_once())
    done, _ = await asyncio.wait({leaving}, timeout=3)
    if not done:  # still there: stop it, then fail
        leaving.cancel()
        await asyncio.wait({leaving}, timeout=3)
    assert done, "the reporter did not end when left"
    assert [patch["status"]["progress"]["message"] for patch in sent] == [
        "JudgeUnreachable: --judge-endpoint: Cannot reach ..."
    ]
