"""Guards of Python graders (issue 14, survivors of ``make mutation`` in graders/_python):
a failed batch scores every row 0 and keeps each row's extracted answer; ill-shaped returns
are noted and ignored field by field, never crash the grading; the per-sample contract says
why a return is invalid and keeps what the grader printed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kyai.datasets import Row
from kyai.graders import GradeInput, GradingContext, GradingOutcome, ModelBridge, PythonGrader

CONTEXT = GradingContext(dataset="d", candidate_model="m", run_id="r", concurrency=1, bridge=None)


def items(*answers: str, failed: Sequence[int] = ()) -> list[GradeInput]:
    return [
        GradeInput(
            row=Row(index=i, row_id=f"r{i}", instruction="q", ground_truth_response="a"),
            response=answer,
            candidate_failed=i in failed,
        )
        for i, answer in enumerate(answers)
    ]


async def grade(body: str, inputs: list[GradeInput], **fields: Any) -> GradingOutcome:
    source = "def grade_batch(samples):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    declaration = {"grader": {"type": "python", "contract": "batch", "source": source, **fields}}
    return await PythonGrader.from_declaration(declaration).grade(inputs, CONTEXT)


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ("raise RuntimeError('boom')", "grader_exception"),
        ("return [1.0]", "grader_invalid_result"),
        ("return {'metrics': {'x': float('inf')}}", "grader_invalid_result"),
        ("return object()", "grader_invalid_result"),  # unserializable
    ],
)
async def test_a_failed_batch_scores_every_row_zero(body: str, kind: str) -> None:
    outcome = await grade(body, items(" one ", "two", "three", failed=[2]))
    assert [g.score for g in outcome.grades] == [0.0, 0.0, 0.0]
    assert [g.error_kind for g in outcome.grades] == [kind, kind, "candidate_error"]
    assert [g.extracted for g in outcome.grades] == ["one", "two", "three"]
    assert all(g.message for g in outcome.grades)
    assert outcome.metrics == {}


async def test_an_unserializable_return_is_named() -> None:
    outcome = await grade("return object()", items("a"))
    (g,) = outcome.grades
    assert g.message is not None
    assert g.message.startswith("grade_batch returned ")
    assert g.message.endswith("; it must return a dict with 'metrics' and/or 'samples'.")


async def test_a_dict_shaped_like_the_unserializable_marker_is_still_a_dict() -> None:
    # Only the exact marker {"$unserializable", "repr"} is refused; other keys are fields.
    body = "return {'$unserializable': 1, 'metrics': {'acc': 0.5}}"
    outcome = await grade(body, items("a"))
    assert outcome.metrics == {"acc": 0.5}
    assert outcome.grades[0].ok


async def test_ill_shaped_fields_are_noted_and_ignored() -> None:
    body = (
        "return {'metrics': [1, 2], 'samples': [\n"
        "    {'sample_id': 'r0', 'scores': {'acc': 1.0}},\n"
        "]}"
    )
    outcome = await grade(body, items("a", "b"))
    assert outcome.metrics == {}
    assert [g.score for g in outcome.grades] == [1.0, 0.0]
    notes = outcome.grades[0].details["batch_notes"]
    assert notes == ["'metrics' is a list, not an object; ignored."]

    samples_not_a_list = await grade(
        "return {'metrics': {'acc': 0.25}, 'samples': {'r0': 1}}", items("a")
    )
    assert samples_not_a_list.metrics == {"acc": 0.25}
    (g,) = samples_not_a_list.grades
    assert g.ok and g.score == 0.0  # metrics only: the row has no score of its own
    assert g.details["batch_notes"] == ["'samples' is a dict, not a list; ignored."]


async def test_metrics_only_and_samples_only_returns_work() -> None:
    only_metrics = await grade("return {'metrics': {'acc': 0.5}}", items("a"))
    assert only_metrics.metrics == {"acc": 0.5} and only_metrics.grades[0].ok
    assert "batch_notes" not in only_metrics.grades[0].details  # no 'samples' is no problem
    only_samples = await grade(
        "return {'samples': [{'sample_id': s['sample_id'], 'scores': {'acc': 1.0}} "
        "for s in samples]}",
        items("a", "b"),
    )
    assert only_samples.metrics == {}
    assert [g.score for g in only_samples.grades] == [1.0, 1.0]
    assert "batch_notes" not in only_samples.grades[0].details  # no 'metrics' is no problem


async def test_every_sample_update_is_read_past_a_bad_one() -> None:
    body = (
        "return {'samples': [\n"
        "    {'sample_id': 'r0'},\n"  # no scores at all
        "    {'sample_id': 'r1', 'scores': 'high'},\n"  # scores not an object
        "    {'no_id': 1},\n"
        "    {'sample_id': 'r2', 'scores': {'acc': 1.0, 'bad': float('nan')}},\n"
        "]}"
    )
    outcome = await grade(body, items("a", "b", "c"))
    assert [g.score for g in outcome.grades] == [0.0, 0.0, 1.0]
    assert list(outcome.grades[2].details["dropped_scores"]) == ["bad"]
    assert outcome.grades[2].scores == {"acc": 1.0}
    assert "samples[2] has no 'sample_id'; ignored." in outcome.grades[0].details["batch_notes"]


# --- Second pass (make mutation, graders-python): what the notes and messages say -------------


async def test_a_return_that_is_not_a_dict_is_described() -> None:
    outcome = await grade("return [1.0]", items("a"))
    assert outcome.grades[0].message == (
        "grade_batch returned a list; it must return a dict with 'metrics' and/or 'samples'."
    )


async def test_a_dropped_metric_is_noted_with_what_it_was() -> None:
    outcome = await grade("return {'metrics': {'acc': 0.5, 'bad': True}}", items("a"))
    assert outcome.metrics == {"acc": 0.5}
    assert outcome.grades[0].details["batch_notes"] == [
        "metric 'bad' dropped: a boolean (True) is not a finite number."
    ]


async def test_a_failed_batch_keeps_the_error_for_the_judge_record() -> None:
    (g,) = (await grade("raise RuntimeError('boom')", items("a"))).grades
    error = g.details["judge"]["error"]
    assert (error["kind"], error["message"]) == ("grader_exception", "RuntimeError: boom")
    assert "RuntimeError: boom" in error["traceback"]


async def test_a_batch_without_any_finite_score_fails_with_that_reason() -> None:
    (g,) = (await grade("return {'metrics': {}}", items("a"))).grades
    assert g.error_kind == "grader_invalid_result"
    assert g.message == "grade_batch returned no finite numeric metric or sample score."


async def test_sample_updates_set_the_extracted_answer_and_keep_dropped_scores() -> None:
    body = (
        "return {'samples': [\n"
        "    {'sample_id': 'r0', 'scores': {'acc': 1.0, 'bad': 'high'},\n"
        "     'extracted_output': None},\n"
        "    {'sample_id': 'r1', 'scores': {'acc': 1.0}, 'extracted_output': 5},\n"
        "]}"
    )
    first, second = (await grade(body, items(" a ", " b "))).grades
    # None clears the extracted answer; a value that is not a string is ignored.
    assert (first.extracted, second.extracted) == (None, "b")
    assert first.details["dropped_scores"] == {"bad": "high"}
    assert [first.score, second.score] == [1.0, 1.0]


# --- Per-sample grade(): messages and details (second pass, graders-python) -----------------


async def grade_one(source: str, item: GradeInput, **fields: Any) -> Any:
    declaration = {"grader": {"type": "python", "source": source, **fields}}
    outcome = await PythonGrader.from_declaration(declaration).grade([item], CONTEXT)
    return outcome.grades[0]


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (
            "'high'",
            "The grader returned a str; it must return a finite number or a dict with finite "
            "numeric 'scores'.",
        ),
        (
            "{'judge': 1}",
            "The grader returned a dict without a 'scores' object; put the numbers in "
            "{'scores': {...}}.",
        ),
        (
            "{'scores': {'a': True}}",
            "The grader returned no finite numeric score (booleans, strings, NaN and Infinity do "
            "not count).",
        ),
    ],
)
async def test_an_invalid_sample_return_says_why(returned: str, message: str) -> None:
    g = await grade_one(f"def grade(sample, item):\n    return {returned}\n", items("a")[0])
    assert (g.score, g.error_kind, g.message) == (0.0, "grader_invalid_result", message)


async def test_a_failed_candidate_row_is_not_graded() -> None:
    source = "def grade(sample, item):\n    return 1.0\n"
    g = await grade_one(source, items("a", failed=[0])[0])
    assert (g.score, g.error_kind) == (0.0, "candidate_error")
    assert g.message == "The candidate failed on this row; the grader was not run."


async def test_what_the_grader_printed_is_kept_to_its_last_2000_characters() -> None:
    source = "def grade(sample, item):\n    print('x' * 2999 + 'END')\n    return 1.0\n"
    g = await grade_one(source, items("a")[0])
    assert g.score == 1.0
    assert g.details["output_tail"] == "x" * 1996 + "END\n"


async def test_the_grader_sees_its_declared_model_call_limit() -> None:
    async def never(**_: Any) -> dict[str, Any]:
        raise AssertionError("no model call expected")

    source = (
        "def grade(sample, item, ctx):\n"
        "    return {'scores': {'score': 1.0}, 'judge': {'limit': ctx.max_model_calls}}\n"
    )
    declaration = {
        "grader": {
            "type": "python",
            "source": source,
            "contract": "model_backed",
            "max_model_calls": 3,
        }
    }
    context = GradingContext(
        dataset="d",
        candidate_model="m",
        run_id="r",
        concurrency=1,
        bridge=ModelBridge(never, never),
    )
    outcome = await PythonGrader.from_declaration(declaration).grade(items("a"), context)
    assert outcome.grades[0].details["judge"] == {"limit": 3}


async def test_an_invalid_sample_return_keeps_the_answer_and_its_error_for_the_judge_record() -> (
    None
):
    source = "def grade(sample, item):\n    return {'scores': {'a': 'high'}}\n"
    g = await grade_one(source, items(" a ")[0])
    assert g.extracted == "a"
    assert g.details["dropped_scores"] == {"a": "high"}
    assert g.details["judge"]["error"] == {"kind": "grader_invalid_result", "message": g.message}


async def test_a_sample_grader_that_fails_keeps_the_answer() -> None:
    g = await grade_one("def grade(sample, item):\n    raise ValueError('no')\n", items(" a ")[0])
    assert (g.error_kind, g.extracted) == ("grader_exception", "a")


async def test_scores_kept_beside_a_dropped_one_and_the_declared_metric_is_the_score() -> None:
    source = "def grade(sample, item):\n    return {'scores': {'a': 0.2, 'b': 0.9, 'c': 'x'}}\n"
    g = await grade_one(source, items(" a ")[0], metric_id="b")
    assert (g.score, g.scores, g.extracted) == (0.9, {"a": 0.2, "b": 0.9}, "a")
    assert g.details["dropped_scores"] == {"c": "x"}


async def test_a_score_outside_zero_to_one_counts_as_zero() -> None:
    source = "def grade(sample, item):\n    print('hi')\n    return 1.5\n"
    g = await grade_one(source, items(" a ")[0])
    assert (g.score, g.error_kind, g.extracted) == (0.0, "grader_score_out_of_range", "a")
    assert g.message == "The row's score 1.5 is outside [0, 1]; it counts as 0."
    assert (g.scores, g.details) == ({"score": 1.5}, {"output_tail": "hi\n"})


async def test_a_failed_candidate_row_of_a_batch_keeps_its_scores_and_says_why() -> None:
    body = (
        "return {'samples': [\n"
        "    {'sample_id': 'r0', 'scores': {'acc': 1.0}},\n"
        "    {'sample_id': 'r1', 'scores': {'acc': 1.0}},\n"
        "]}"
    )
    outcome = await grade(body, items(" a ", " b ", " c ", failed=[1, 2]))
    fine, failed_scored, failed_bare = outcome.grades
    assert fine.score == 1.0 and fine.ok
    for g, scores, extracted in ((failed_scored, {"acc": 1.0}, "b"), (failed_bare, {}, "c")):
        assert (g.score, g.error_kind, g.message) == (
            0.0,
            "candidate_error",
            "The candidate failed on this row.",
        )
        assert (g.scores, g.extracted) == (scores, extracted)
