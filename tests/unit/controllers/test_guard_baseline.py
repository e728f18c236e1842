"""The non-inferiority gate and the metric gates, word for word, and `kyai compare`'s levels
(issue 36's mutation pass)."""

from __future__ import annotations

from typing import Any

import pytest

from kyai.api import EvaluationRunStatus, NonInferiority, Thresholds
from kyai.cli import main
from kyai.controllers import _conditions as c
from kyai.controllers._baseline import compare_with_baseline, non_inferiority
from kyai.controllers._conditions import Change
from kyai.controllers._thresholds import combine_passed, metric_gate
from kyai.controllers.runkind import Waiting

NS = "team-a"


def gate(baseline: str = "base", margin: float = 0.05) -> NonInferiority:
    return NonInferiority.model_validate({"baselineRef": {"name": baseline}, "margin": margin})


def judged(vector: list[float], key: str = "k") -> dict[str, Any]:
    return {
        "phase": "Succeeded", "avgScore": sum(vector) / len(vector), "questions": len(vector),
        "errorCount": 0, "comparisonKey": key, "scores": vector,
    }  # fmt: skip


def status(body: dict[str, Any]) -> EvaluationRunStatus:
    return EvaluationRunStatus.model_validate(body)


class Runs:
    """The cache of EvaluationRuns the gate reads (``Services.cached``)."""

    def __init__(self, **runs: dict[str, Any]) -> None:
        self.runs = runs

    async def cached(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert (kind, namespace) == ("EvaluationRun", NS)
        return self.runs.get(name)


async def compare_cand(runs: Runs) -> tuple[Change, Any]:
    """Run cand (two questions, one right) against its gate's baseline base."""
    return await compare_with_baseline(runs, NS, "cand", gate(), status(judged([1.0, 0.0])))  # type: ignore[arg-type]


def not_comparable(message: str) -> Change:
    """The gate's verdict when no comparison can be made (the run still passes)."""
    return Change(c.PASSED, False, c.NOT_COMPARABLE, message)


def run(baseline: str | None, body: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"workloadRef": {"name": "w"}, "snapshotRef": {"name": "s"}}
    if baseline is not None:
        spec["thresholds"] = {"nonInferiority": {"baselineRef": {"name": baseline}, "margin": 0.1}}
    return {"metadata": {"namespace": NS}, "spec": spec, "status": body}


async def test_a_baseline_waiting_for_a_run_that_does_not_exist_is_waited_for() -> None:
    # cand -> base -> gone (missing): no circle; the run waits for base to succeed.
    runs = Runs(base=run("gone", {"phase": "Pending"}))
    with pytest.raises(Waiting) as waiting:
        await compare_cand(runs)
    assert waiting.value.reason == c.BASELINE_NOT_READY
    assert waiting.value.message == (
        "waiting for the baseline EvaluationRun base to succeed (it is Pending) before the "
        "non-inferiority comparison"
    )


async def test_a_baseline_without_a_phase_is_pending_and_a_failed_one_says_so() -> None:
    runs = Runs(base=run(None, {}))
    with pytest.raises(Waiting) as waiting:
        await compare_cand(runs)
    assert "(it is Pending)" in waiting.value.message
    runs = Runs(base=run(None, {"phase": "Failed"}))
    with pytest.raises(Waiting) as waiting:
        await compare_cand(runs)
    assert (waiting.value.reason, waiting.value.message) == (
        c.BASELINE_FAILED,
        "the baseline EvaluationRun base failed (no message), so no comparison can be made: "
        "re-create it, or name a baseline that succeeded",
    )


async def test_baselines_in_a_circle_are_named_in_order() -> None:
    runs = Runs(base=run("mid", judged([1.0, 0.0])), mid=run("cand", judged([1.0, 0.0])))
    found, result = await compare_cand(runs)
    assert result is None
    assert found == not_comparable(
        "the baselines go round in a circle (cand -> base -> mid -> cand): each run would wait "
        "for the next; name a baseline that does not wait for this run",
    )


def test_other_keys_are_named_in_the_refusal() -> None:
    found, _ = non_inferiority(gate(), status(judged([1.0, 0.0], key="k1")),
                               status(judged([1.0, 0.0], key="k2")), run="cand")  # fmt: skip
    assert found == not_comparable(
        "not compared with the baseline base: the comparison keys differ (this run k1, base "
        "k2); runs of different keys answer different questions (dataset, prompts, judge or "
        "scoring)",
    )


def test_runs_of_one_question_are_not_compared() -> None:
    found, result = non_inferiority(gate(), status(judged([1.0])), status(judged([0.0])), run="c")
    assert result is None
    assert found == not_comparable(
        "not compared with base: baseline: 1 question(s); an interval or a test needs at "
        "least 2 (the sample standard deviation of fewer is undefined)",
    )


def test_a_metric_gate_word_for_word() -> None:
    names = ("t/acc", "t/f1", "t/em")
    thresholds = Thresholds.model_validate({"metrics": dict.fromkeys(names, 0.5)})
    met, shown = metric_gate(thresholds, {"t/acc": 1.0, "t/f1": 0.5, "t/em": 0.9})
    assert (met, shown) == (Change(c.PASSED, True, c.THRESHOLDS_MET, "every threshold is met"), {})
    missed, shown = metric_gate(thresholds, {"t/acc": 0.4, "t/f1": -1.0})
    assert missed == Change(
        c.PASSED, False, c.THRESHOLDS_MISSED,
        "t/acc 0.4000 < 0.5; t/f1 is missing; t/em is missing",
    )  # fmt: skip
    assert shown == {"t/f1": -1.0, "t/em": -1.0}


def test_combined_gates_join_their_messages_and_put_unknown_reasons_last() -> None:
    one = Change(c.PASSED, True, c.THRESHOLDS_MET, "every threshold is met")
    two = Change(c.PASSED, True, c.THRESHOLDS_MET, "non-inferior to base")
    assert combine_passed(one, two) == Change(
        c.PASSED, True, c.THRESHOLDS_MET, "every threshold is met; non-inferior to base"
    )
    odd = Change(c.PASSED, False, "SomethingElse", "odd")
    missed = Change(c.PASSED, False, c.THRESHOLDS_MISSED, "t/acc 0.4000 < 0.5")
    assert combine_passed(odd, missed) == Change(
        c.PASSED, False, c.THRESHOLDS_MISSED, "t/acc 0.4000 < 0.5; odd"
    )


@pytest.mark.parametrize(
    ("flag", "value", "complaint"),
    [
        ("--alpha", "1", "1.0 is not strictly between 0 and 1"),
        ("--alpha", "1.5", "1.5 is not strictly between 0 and 1"),
        ("--non-inferiority", "1.5", "1.5 is not in [0, 1] (a score difference: 0.02 is 2 points)"),
    ],
)
def test_compare_refuses_levels_and_margins_outside_their_range(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, complaint: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "a", "b", flag, value])
    assert exit_.value.code == 2
    assert complaint in capsys.readouterr().err


@pytest.mark.parametrize("margin", ["0", "1"])
def test_compare_takes_margins_of_0_and_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, margin: str
) -> None:
    # The margin is accepted: the refusal is then of the missing runs, not of the flag.
    status = main(
        ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--non-inferiority", margin]
    )
    assert status == 2
    assert "--non-inferiority" not in capsys.readouterr().err
