"""``spec.thresholds.nonInferiority``: Passed from the paired comparison with a baseline run.

Against the in-memory API of test_worker_pods: the candidate run generates and is judged,
then waits for its baseline (BaselineNotReady; Stalled at once when the baseline Failed,
after the grace when it does not exist), is woken when the baseline finishes, and sets
Passed from :func:`kyai.stats.compare` on both runs' per-question scores.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kyai.api import EvaluationRunSpec, EvaluationRunStatus, pack_scores
from kyai.builders import evaluation as build
from kyai.controllers import _conditions as c
from kyai.controllers._baseline import message, non_inferiority
from kyai.controllers.evaluationrun import RunEngine, run_references
from kyai.controllers.runkind import Reference
from kyai.controllers.scheduling import Scheduler
from kyai.stats import compare

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import JUDGE_KEY, NS, RUN_NAME, MemoryKube, condition, obj, stamp, world

JUDGE = {"type": "llm", "llm": {"endpoint": "http://j/v1", "model": "judge",
                                "apiKeySecretRef": {"name": "judge-key"}}}  # fmt: skip
SHA = "ab" * 32
#: The baseline right on 70 of 100 questions; the candidate's vectors below.
BASE = [1.0] * 70 + [0.0] * 30
SAME = list(BASE)
WORSE = [1.0] * 50 + [0.0] * 50  # loses 20 questions: clearly inferior
CLOSE = [1.0] * 67 + [0.0] * 33  # loses 3: the interval's low end is about -7.2 points


def spec(margin: float = 0.05, baseline: str = "base", **thresholds: Any) -> dict[str, Any]:
    return {
        "workloadRef": {"name": "cand"},
        "snapshotRef": {"name": "snap"},
        "judge": JUDGE,
        "thresholds": {
            "nonInferiority": {"baselineRef": {"name": baseline}, "margin": margin},
            **thresholds,
        },
    }


def judged(vector: list[float], key: str = "k", **extra: Any) -> dict[str, Any]:
    return {
        "avgScore": sum(vector) / len(vector), "questions": len(vector), "errorCount": 0,
        "comparisonKey": key, "datasetSha256": SHA, "scores": vector, **extra,
    }  # fmt: skip


def baseline(phase: str, scores: list[float] = BASE, **status: Any) -> dict[str, Any]:
    body = judged(scores) if phase == "Succeeded" else {}
    body.update(phase=phase, message=f"the baseline is {phase}", **status)
    return obj("EvaluationRun", "base", {"workloadRef": {"name": "cand"}}, body)


async def step(svc: Any, kube: MemoryKube) -> EvaluationRunStatus:
    run = await kube.get("EvaluationRun", NS, RUN_NAME)
    assert run is not None
    await RunEngine(svc, run).reconcile()
    fresh = await kube.get("EvaluationRun", NS, RUN_NAME)
    assert fresh is not None
    return EvaluationRunStatus.model_validate(fresh["status"])


def finish(kube: MemoryKube, job: str) -> None:
    kube.objects[("Job", NS, job)]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]
    }


async def judged_run(
    run_spec: dict[str, Any], vector: list[float], *extra: dict[str, Any], **result: Any
) -> tuple[Any, MemoryKube, EvaluationRunStatus]:
    """The candidate generated and judged (its worker's result in status), then looked at."""
    svc, kube = world(copy.deepcopy(JUDGE_KEY), *extra, missing_reference_grace_seconds=60)
    kube.put(obj("EvaluationRun", RUN_NAME, run_spec, {}))
    status = await step(svc, kube)
    assert status.phase == "Generating", status.message
    finish(kube, build.generation_job_name(RUN_NAME))
    status = await step(svc, kube)
    assert status.phase == "Judging", status.message
    kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"].update(judged(vector, **result))
    finish(kube, build.judge_job_name(RUN_NAME))
    return svc, kube, await step(svc, kube)


def passed(status: EvaluationRunStatus) -> tuple[str, str, str]:
    return condition(status, c.PASSED)


async def test_the_run_waits_for_its_baseline_and_is_woken_when_it_succeeds() -> None:
    svc, kube, status = await judged_run(spec(), SAME, baseline("Generating"))
    assert status.phase == "Judging" and status.avg_score == 0.7  # its own score is there
    ready, reason, said = condition(status, c.READY)
    assert (ready, reason) == ("False", c.BASELINE_NOT_READY)
    assert "baseline EvaluationRun base to succeed (it is Generating)" in said
    assert "avgScore 0.7 over 100 questions" in said
    assert condition(status, c.PROGRESSING)[0] == "False"
    assert condition(status, c.RECONCILING)[0] == "True"
    assert condition(status, c.STALLED)[0] == "False"
    assert not any(cond.type == c.PASSED for cond in status.conditions)
    # Looked at again: the same wait, nothing written.
    version = kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"]
    assert (await step(svc, kube)).message == status.message
    assert kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"] == version
    # Held in its phase, the run is in the index of waiting runs; its baseline wakes it.
    assert ("EvaluationRun", NS, RUN_NAME) in svc.pending
    kube.put(baseline("Succeeded"))
    await Scheduler(svc).reference_changed("EvaluationRun", NS, "base", {"phase": "Succeeded"})
    done = EvaluationRunStatus.model_validate(
        kube.objects[("EvaluationRun", NS, RUN_NAME)]["status"]
    )
    assert done.phase == "Succeeded" and passed(done)[:2] == ("True", c.THRESHOLDS_MET)
    assert ("EvaluationRun", NS, RUN_NAME) not in svc.pending


async def test_a_failed_baseline_stalls_the_run_until_one_succeeds() -> None:
    svc, kube, status = await judged_run(spec(), SAME, baseline("Failed"))
    assert status.phase == "Judging"
    stalled, reason, said = condition(status, c.STALLED)
    assert (stalled, reason) == ("True", c.BASELINE_FAILED)
    assert "the baseline EvaluationRun base failed (the baseline is Failed)" in said
    assert condition(status, c.RECONCILING)[0] == "False"
    kube.put(baseline("Succeeded"))  # re-created under the same name, and succeeded
    status = await step(svc, kube)
    assert status.phase == "Succeeded" and condition(status, c.STALLED)[0] == "False"
    assert passed(status)[0] == "True"


async def test_a_missing_baseline_is_stalled_after_the_grace() -> None:
    svc, kube, status = await judged_run(spec(baseline="nowhere"), SAME)
    _, reason, said = condition(status, c.READY)
    assert reason == c.BASELINE_NOT_FOUND and "nowhere" in said
    assert condition(status, c.STALLED)[0] == "False"  # the run is younger than the grace
    kube.objects[("EvaluationRun", NS, RUN_NAME)]["metadata"]["creationTimestamp"] = stamp(120)
    status = await step(svc, kube)
    stalled, reason, said = condition(status, c.STALLED)
    assert (stalled, reason) == ("True", c.BASELINE_NOT_FOUND) and "(for more than 60s)" in said


async def test_runs_of_other_keys_are_not_compared() -> None:
    _, _, status = await judged_run(spec(), SAME, baseline("Succeeded"), key="other-key")
    assert status.phase == "Succeeded"  # the run itself succeeded
    value, reason, said = passed(status)
    assert (value, reason) == ("False", c.NOT_COMPARABLE)
    assert "this run other-key" in said and "base k" in said and "comparison keys differ" in said
    assert status.non_inferiority is None


async def test_other_rows_are_not_compared() -> None:
    other = baseline("Succeeded", datasetSha256="cd" * 32)
    _, _, status = await judged_run(spec(), SAME, other)
    value, reason, said = passed(status)
    assert (value, reason) == ("False", c.NOT_COMPARABLE) and "cd" * 32 in said
    _, _, status = await judged_run(spec(), SAME[:50], baseline("Succeeded"))
    assert passed(status)[1] == c.NOT_COMPARABLE and "50 questions, base 100" in passed(status)[2]


@pytest.mark.parametrize(
    ("scores", "margin", "expected"),
    [(SAME, 0.05, True), (CLOSE, 0.10, True), (CLOSE, 0.05, False), (WORSE, 0.05, False)],
)
async def test_passed_is_the_paired_comparisons_verdict(
    scores: list[float], margin: float, expected: bool
) -> None:
    _, _, status = await judged_run(spec(margin), scores, baseline("Succeeded"))
    assert status.phase == "Succeeded"
    truth = compare(BASE, scores, non_inferiority=margin)
    assert truth.non_inferior is expected
    value, reason, said = passed(status)
    assert value == str(expected)
    assert reason == (c.THRESHOLDS_MET if expected else c.THRESHOLDS_MISSED)
    figures = status.non_inferiority
    assert figures is not None and figures.baseline == "base" and figures.margin == margin
    assert figures.test == truth.test == "mcnemar-exact" and figures.questions == 100
    assert truth.interval is not None and figures.interval_method == "bonett-price"
    assert (figures.low, figures.high, figures.p_value) == (
        truth.interval.low, truth.interval.high, truth.p_value,
    )  # fmt: skip
    assert figures.mean_difference == truth.mean_difference
    assert figures.standard_error == truth.standard_error
    assert f"{truth.interval.low:+.4f}" in said and "McNemar exact p =" in said
    assert "(Bonett-Price)" in said
    assert ("NOT shown non-inferior" in said) is not expected


@pytest.mark.parametrize(
    ("questions", "margin", "expected"),
    [(3, 0.05, False), (3, 0.5, False), (100, 0.05, True), (100, 0.02, False)],
)
async def test_runs_that_agree_on_every_question_prove_only_what_their_size_allows(
    questions: int, margin: float, expected: bool
) -> None:
    # The issue: no discordant question. Three questions prove nothing (about ±55 points);
    # a hundred leave about ±2.7 points, within 5 points but not within 2.
    scores = [0.0] * questions
    _, _, status = await judged_run(spec(margin), scores, baseline("Succeeded", scores))
    assert status.phase == "Succeeded"
    value, reason, said = passed(status)
    assert (value, reason) == (
        str(expected),
        c.THRESHOLDS_MET if expected else c.THRESHOLDS_MISSED,
    ), said
    figures = status.non_inferiority
    assert figures is not None and figures.low is not None and figures.high is not None
    assert figures.low < 0 < figures.high and figures.standard_error
    half = {3: 0.554, 100: 0.0272}[questions]
    assert figures.high == pytest.approx(half, abs=5e-4) and figures.non_inferior is expected


async def test_continuous_scores_use_the_paired_t_test() -> None:
    base = [0.5 + (i % 5) / 10 for i in range(40)]
    cand = [s - (0.02 if i % 2 else 0.0) for i, s in enumerate(base)]  # -0.01 on average
    _, _, status = await judged_run(spec(0.04), cand, baseline("Succeeded", base))
    figures = status.non_inferiority
    truth = compare(base, cand, non_inferiority=0.04)
    assert figures is not None and figures.test == "paired-t" and figures.interval_method == "t"
    assert truth.interval is not None and figures.low == truth.interval.low
    assert figures.non_inferior is True and "paired t p =" in passed(status)[2]
    assert "(t)" in passed(status)[2]


@pytest.mark.parametrize("questions", [3, 100])
async def test_continuous_differences_that_are_all_equal_give_no_verdict(questions: int) -> None:
    # Every difference the same (here 0, or -0.01 below): no variance is seen, so none is
    # estimated; the gate cannot pass on a zero-width interval, whatever the margin.
    base = [0.25 + (i % 3) / 4 for i in range(questions)]
    for cand in (list(base), [s - 0.01 for s in base]):
        _, _, status = await judged_run(spec(0.05), cand, baseline("Succeeded", base))
        assert status.phase == "Succeeded"  # the run itself succeeded
        value, reason, said = passed(status)
        assert (value, reason) == ("False", c.NOT_ESTIMABLE), said
        assert said.startswith("no verdict against base with a margin of 0.05: every one of")
        assert "cannot be estimated" in said and "the gate does not pass" in said
        figures = status.non_inferiority
        assert figures is not None and figures.non_inferior is None
        assert figures.low is None and figures.high is None and figures.p_value is None
        assert figures.not_estimable is not None and figures.questions == questions
    # A score gate beside it: one Passed, False, keeping the reason.
    _, _, status = await judged_run(
        spec(0.05, avgScore=0.1), list(base), baseline("Succeeded", base)
    )
    assert passed(status)[:2] == ("False", c.NOT_ESTIMABLE)


async def test_packed_scores_compare_like_listed_ones() -> None:
    base = [float(i % 10 < 7) for i in range(1200)]
    packed = pack_scores(base, dataset_sha256=SHA)
    assert packed is not None
    packed_baseline = baseline("Succeeded", base, scoresPacked=packed.to_k8s())
    del packed_baseline["status"]["scores"]
    cand = [float(i % 10 < 6) for i in range(1200)]
    cand_packed = pack_scores(cand, dataset_sha256=SHA)
    assert cand_packed is not None
    _, _, status = await judged_run(
        spec(0.05), cand, packed_baseline, scores=None, scoresPacked=cand_packed.to_k8s()
    )
    truth = compare(base, cand, non_inferiority=0.05)
    figures = status.non_inferiority
    assert figures is not None and figures.questions == 1200 and figures.low == truth.interval.low
    assert passed(status)[0] == "False"


async def test_a_baseline_without_scores_says_so() -> None:
    big = baseline("Succeeded", questions=50_000)
    del big["status"]["scores"]
    _, _, status = await judged_run(spec(), SAME, big)
    value, reason, said = passed(status)
    assert (value, reason) == ("False", c.NOT_COMPARABLE)  # 100 questions here, 50,000 there
    _, _, status = await judged_run(spec(), SAME, big, scores=None, questions=50_000)
    value, reason, said = passed(status)
    assert (value, reason) == ("False", c.SCORES_UNAVAILABLE)
    assert "status of this run: its 50,000 scores do not fit" in said
    few = baseline("Succeeded")
    del few["status"]["scores"]
    _, _, status = await judged_run(spec(), SAME, few)
    value, reason, said = passed(status)
    assert (value, reason) == ("False", c.SCORES_UNAVAILABLE)
    assert "no per-question scores in the status of the baseline base" in said


async def test_the_score_gates_and_the_comparison_say_one_passed() -> None:
    _, _, status = await judged_run(spec(0.05, avgScore=0.9), SAME, baseline("Succeeded"))
    value, reason, said = passed(status)
    assert (value, reason) == ("False", c.THRESHOLDS_MISSED)
    assert "avgScore 0.7000 < 0.9" in said and "non-inferior" not in said  # only the misses
    _, _, status = await judged_run(spec(0.05, avgScore=0.5), SAME, baseline("Succeeded"))
    value, reason, said = passed(status)
    assert value == "True" and "every threshold is met" in said and "non-inferior to base" in said


async def test_a_run_is_not_its_own_baseline() -> None:
    _, _, status = await judged_run(spec(baseline=RUN_NAME), SAME)
    assert status.phase == "Succeeded"  # it does not wait for itself
    assert passed(status) == ("False", c.NOT_COMPARABLE, "a run is not its own baseline")


async def test_baselines_in_a_circle_do_not_wait_for_each_other() -> None:
    mutual = baseline("Judging")
    mutual["spec"] = spec(baseline=RUN_NAME)
    _, _, status = await judged_run(spec(), SAME, mutual)
    assert status.phase == "Succeeded"
    value, reason, said = passed(status)
    assert (value, reason) == ("False", c.NOT_COMPARABLE)
    assert f"go round in a circle ({RUN_NAME} -> base -> {RUN_NAME})" in said
    # Three runs: this one -> base -> third -> this one.
    first = baseline("Judging")
    first["spec"] = spec(baseline="third")
    third = obj("EvaluationRun", "third", spec(baseline=RUN_NAME), {"phase": "Generating"})
    _, _, status = await judged_run(spec(), SAME, first, third)
    assert passed(status)[1] == c.NOT_COMPARABLE and "-> third ->" in passed(status)[2]
    # A chain that ends (third names no baseline) is waited for as usual.
    third["spec"] = spec()
    del third["spec"]["thresholds"]
    _, _, status = await judged_run(spec(), SAME, first, third)
    assert status.phase == "Judging" and condition(status, c.READY)[1] == c.BASELINE_NOT_READY


def test_lm_eval_runs_cannot_be_gated_on_per_question_scores() -> None:
    with pytest.raises(ValidationError, match="lmEval runs do not have"):
        EvaluationRunSpec.model_validate(
            {"workloadRef": {"name": "w"}, "lmEval": {"tasks": [{"name": "gsm8k"}]},
             "thresholds": {"nonInferiority": {"baselineRef": {"name": "b"}, "margin": 0.1}}}
        )  # fmt: skip
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        EvaluationRunSpec.model_validate(spec(margin=2))


def test_the_baseline_is_a_reference_of_the_run() -> None:
    svc, _ = world()
    run = obj("EvaluationRun", "cand-run", spec(), {})
    assert Reference("EvaluationRun", "base") in run_references(svc, run)
    plain = obj(
        "EvaluationRun", "plain", {k: v for k, v in spec().items() if k != "thresholds"}, {}
    )
    assert Reference("EvaluationRun", "base") not in run_references(svc, plain)


def test_the_message_states_the_figures() -> None:
    status = EvaluationRunStatus.model_validate(judged(CLOSE))
    base = EvaluationRunStatus.model_validate(judged(BASE))
    gate = EvaluationRunSpec.model_validate(spec(0.1)).thresholds
    assert gate is not None and gate.non_inferiority is not None
    change, figures = non_inferiority(gate.non_inferiority, status, base, run=RUN_NAME)
    assert figures is not None and change.message == message(figures)
    assert change.message.startswith("non-inferior to base with a margin of 0.1: the interval's")
    assert "difference (this run - base) -0.0300" in change.message
    assert "95% interval" in change.message and "100 paired questions" in change.message
