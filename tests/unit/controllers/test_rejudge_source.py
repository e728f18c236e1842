"""A re-judge records its source run's rows, and a gate refuses a baseline of other rows.

A re-judge (``spec.generationFrom``) never generates: its rows are its source's. It records
the source's ``datasetSha256`` when it starts (the identity of the rows, in order), so that a
non-inferiority gate or a comparison can refuse a baseline that answered other rows, even of
the same comparison key and question count. Against the in-memory API of test_worker_pods.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

from kyai.api import EvaluationRunStatus
from kyai.builders import evaluation as build
from kyai.controllers import _conditions as c

sys.path.insert(0, str(Path(__file__).parent))
from test_non_inferiority import BASE, JUDGE, SHA, baseline, finish, step
from test_worker_pods import JUDGE_KEY, NS, RUN_NAME, condition, obj, world

SOURCE_SHA = "ef" * 32


def source(sha: str) -> dict[str, object]:
    return obj(
        "EvaluationRun", "src",
        {"workloadRef": {"name": "cand"}, "snapshotRef": {"name": "snap"}},
        {"phase": "Succeeded", "resultsClaim": "src-results", "resultsPath": "/results/src",
         "workload": "cand", "snapshot": "snap", "model": "m", "dataset": "capitals",
         "datasetVersion": "custom", "datasetSha256": sha, "questions": len(BASE),
         "comparisonKey": "k"},
    )  # fmt: skip


def rejudge_spec() -> dict[str, object]:
    return {
        "generationFrom": {"runRef": {"name": "src"}},
        "judge": JUDGE,
        "thresholds": {"nonInferiority": {"baselineRef": {"name": "base"}, "margin": 0.05}},
    }


async def judged_rejudge(source_sha: str) -> EvaluationRunStatus:
    svc, kube = world(copy.deepcopy(JUDGE_KEY), source(source_sha), baseline("Succeeded"))
    kube.put(obj("EvaluationRun", RUN_NAME, rejudge_spec(), {}))
    status = await step(svc, kube)
    assert status.phase == "Judging", status.message
    # Recorded when it starts, from the source alone.
    assert status.dataset_sha256 == source_sha
    assert (status.workload, status.snapshot, status.dataset) == ("cand", "snap", "capitals")
    # The judge worker's result carries no sha256 of its own: the recorded one stays.
    kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"].update(
        {"avgScore": 0.7, "questions": len(BASE), "errorCount": 0, "comparisonKey": "k",
         "scores": list(BASE)}
    )  # fmt: skip
    finish(kube, build.judge_job_name(RUN_NAME))
    return await step(svc, kube)


async def test_a_rejudge_records_its_sources_rows_and_is_compared_on_them() -> None:
    status = await judged_rejudge(SHA)  # the baseline's rows
    assert status.phase == "Succeeded" and status.dataset_sha256 == SHA
    value, reason, _ = condition(status, c.PASSED)
    assert (value, reason) == ("True", c.THRESHOLDS_MET)


async def test_a_rejudge_of_other_rows_is_not_compared_with_the_baseline() -> None:
    """Same comparison key, same question count, other rows: NotComparable, both named."""
    status = await judged_rejudge(SOURCE_SHA)
    assert status.phase == "Succeeded" and status.dataset_sha256 == SOURCE_SHA
    value, reason, said = condition(status, c.PASSED)
    assert (value, reason) == ("False", c.NOT_COMPARABLE)
    assert SOURCE_SHA in said and SHA in said
    assert status.non_inferiority is None
