"""Python graders: the seed's declaration, contracts, return handling, examples and hostile code.

The seed examples live verbatim in data/python_grader/seed_*.txt (cut from the seed document
unchanged) and run here exactly as written.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kyai.datasets import Row
from kyai.graders._python import (
    GraderDeclarationError,
    PreprocessError,
    PythonGrader,
    PythonPreprocessor,
    interpret_result,
    primary_score,
)
from kyai.graders._types import Grade, GradeInput, GradingContext, ModelBridge

DATA = Path(__file__).parent / "data" / "python_grader"


def seed(name: str) -> str:
    return (DATA / f"seed_{name}").read_text(encoding="utf-8")


def context(bridge: ModelBridge | None = None, concurrency: int = 2) -> GradingContext:
    return GradingContext(
        dataset="qa_exact_match",
        candidate_model="openai:gpt-4.1-mini",
        run_id="eval_run_abc123",
        concurrency=concurrency,
        bridge=bridge,
    )


def row(index: int, target: str, instruction: str = "2+2?", **metadata: Any) -> Row:
    return Row(
        index=index,
        row_id=f"r{index}",
        instruction=instruction,
        ground_truth_response=target,
        metadata=metadata,
    )


def inputs(pairs: Sequence[tuple[str, str]]) -> list[GradeInput]:
    """(answer, target) pairs → inputs."""
    return [
        GradeInput(row=row(i, target), response=answer) for i, (answer, target) in enumerate(pairs)
    ]


def grader(source: str, **fields: Any) -> PythonGrader:
    return PythonGrader.from_declaration({"grader": {"type": "python", "source": source, **fields}})


async def grade(g: PythonGrader, items: Sequence[GradeInput], ctx: GradingContext | None = None):  # type: ignore[no-untyped-def]
    return await g.grade(items, ctx or context())


# --- declaration -----------------------------------------------------------------------------


async def test_seed_inline_declaration_as_written() -> None:
    decl = json.loads(seed("declaration_inline.json"))
    g = PythonGrader.from_declaration(decl)
    assert g.name == "python:sample"
    assert g.execution == "per_sample"
    assert g.model_access is False
    outcome = await grade(g, inputs([("4", "4"), ("5", "4"), ("4\n", "4")]))
    assert [x.score for x in outcome.grades] == [1.0, 0.0, 1.0]
    assert [dict(x.scores) for x in outcome.grades] == [
        {"score": 1.0},
        {"score": 0.0},
        {"score": 1.0},
    ]
    assert outcome.metrics == {"score": pytest.approx(2 / 3)}


def test_seed_file_id_declarations_point_to_file() -> None:
    for name in ("declaration_model_backed.json", "declaration_preprocess.json"):
        decl = json.loads(seed(name))
        with pytest.raises(GraderDeclarationError, match=r"file_id.*'file'"):
            if "grader" in decl:
                PythonGrader.from_declaration(decl)
            else:
                PythonPreprocessor.from_declaration(decl)


def test_file_declaration_relative_to_base_dir(tmp_path: Path) -> None:
    (tmp_path / "graders").mkdir()
    (tmp_path / "graders" / "judge.py").write_text(seed("llm_judge.py.txt"))
    decl = json.loads(seed("declaration_model_backed.json"))
    del decl["grader"]["file_id"]
    decl["grader"]["file"] = "graders/judge.py"
    (tmp_path / "grader.json").write_text(json.dumps(decl))
    g = PythonGrader.from_file(tmp_path / "grader.json")
    assert g.name == "python:model_backed"
    assert g.execution == "per_sample"
    assert g.model_access is True
    assert g.identity["max_model_calls"] == 4
    same = PythonGrader.from_declaration(decl, base_dir=tmp_path)
    assert same.identity == g.identity
    with pytest.raises(GraderDeclarationError, match=r"grader\.file: cannot read"):
        PythonGrader.from_declaration(decl, base_dir=tmp_path / "elsewhere")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"timeout_seconds": 0},
            "grader.timeout_seconds: Input should be greater than or equal to 1",
        ),
        (
            {"timeout_seconds": 601},
            "grader.timeout_seconds: Input should be less than or equal to 600",
        ),
        (
            {"max_model_calls": 501},
            "grader.max_model_calls: Input should be less than or equal to 500",
        ),
        ({"max_model_calls": -1}, "grader.max_model_calls"),
        (
            {"contract": "stream"},
            "grader.contract: Input should be 'sample', 'batch' or 'model_backed'",
        ),
        ({"execution": "sometimes"}, "grader.execution"),
        ({"model_access": "openai"}, "grader.model_access"),
        ({"type": "javascript"}, "grader.type: Input should be 'python'"),
        ({"metric_id": ""}, "grader.metric_id"),
        ({"colour": "red"}, "grader.colour: Extra inputs are not permitted"),
        ({"file": "x.py"}, "Give exactly one of 'source' and 'file'"),
        ({"metrics": "acc"}, "grader.metrics"),
    ],
)
def test_declaration_errors_name_the_field(fields: dict[str, Any], message: str) -> None:
    decl = {"grader": {"type": "python", "source": "def grade(s, i):\n    return 1.0\n", **fields}}
    with pytest.raises(GraderDeclarationError) as info:
        PythonGrader.from_declaration(decl)
    assert message in str(info.value)


def test_declaration_errors_for_source_problems() -> None:
    with pytest.raises(GraderDeclarationError, match="does not compile"):
        grader("def grade(sample, item:\n")
    with pytest.raises(GraderDeclarationError, match="no top-level function 'grade'"):
        grader("def grade_batch(samples):\n    return {}\n")
    with pytest.raises(GraderDeclarationError, match="no top-level function 'grade_batch'"):
        grader(seed("single_score.py.txt"), contract="batch")
    with pytest.raises(GraderDeclarationError, match="Give exactly one of 'source' and 'file'"):
        PythonGrader.from_declaration({"type": "python"})
    with pytest.raises(GraderDeclarationError, match="grader: Field required"):
        PythonGrader.from_declaration({"preprocess": {"type": "python", "source": ""}})
    with pytest.raises(GraderDeclarationError, match="both inside"):
        PythonGrader.from_declaration(
            {
                "grader": {
                    "type": "python",
                    "source": "def grade(s, i):\n    return 1.0\n",
                    "preprocess": {"type": "python", "source": "def transform(r):\n    return r\n"},
                },
                "preprocess": {"type": "python", "source": "def transform(r):\n    return r\n"},
            }
        )


def test_defaults_by_contract() -> None:
    sample = grader("def grade(s, i):\n    return 1.0\n")
    batch = grader(seed("batch_metrics.py.txt"), contract="batch")
    judge = grader(seed("llm_judge.py.txt"), contract="model_backed")
    batch_judge = grader("def grade_batch(samples, ctx):\n    return {}\n", contract="model_backed")
    no_access = grader(seed("llm_judge.py.txt"), contract="model_backed", model_access="none")
    assert (sample.execution, sample.model_access) == ("per_sample", False)
    assert (batch.execution, batch.model_access) == ("aggregate", False)
    assert (judge.execution, judge.model_access) == ("per_sample", True)
    assert (batch_judge.execution, batch_judge.model_access) == ("aggregate", True)
    assert no_access.model_access is False
    assert sample.identity["metric_id"] == "score"
    assert sample.identity["timeout_seconds"] == 120
    assert sample.identity["max_model_calls"] == 64


def test_identity_follows_the_source_and_settings() -> None:
    a = grader("def grade(s, i):\n    return 1.0\n")
    b = grader("def grade(s, i):\n    return 0.0\n")
    c = grader("def grade(s, i):\n    return 1.0\n", metric_id="acc")
    assert a.identity != b.identity
    assert a.identity != c.identity
    assert a.identity == grader("def grade(s, i):\n    return 1.0\n").identity


# --- return handling (the seed's rules, table-driven) ----------------------------------------

NAN = float("nan")


@pytest.mark.parametrize(
    ("value", "scores", "error"),
    [
        (0.5, {"score": 0.5}, None),
        (1, {"score": 1.0}, None),
        (NAN, {}, "non-finite"),
        (float("inf"), {}, "non-finite"),
        (True, {}, "boolean"),
        (False, {}, "boolean"),
        ("1.0", {}, "str"),
        (None, {}, "None"),
        ([1.0], {}, "list"),
        ({"$unserializable": "set", "repr": "{1}"}, {}, "set"),
        ({"score": 1.0}, {}, "without a 'scores' object"),
        ({"scores": {}}, {}, "no finite numeric score"),
        ({"scores": {"a": True, "b": "1", "c": NAN}}, {}, "no finite numeric score"),
        ({"scores": {"a": 1, "b": NAN, "c": False}}, {"a": 1.0}, None),
        ({"scores": {"a": 0.25}, "judge": {"why": "x"}}, {"a": 0.25}, None),
    ],
)
def test_interpret_result(value: Any, scores: dict[str, float], error: str | None) -> None:
    got_scores, _, _, got_error = interpret_result(value, metric_id="score")
    assert got_scores == scores
    if error is None:
        assert got_error is None
    else:
        assert got_error is not None and error in got_error


def test_interpret_result_keeps_judge_and_dropped() -> None:
    scores, judge, dropped, error = interpret_result(
        {"scores": {"a": 1.0, "b": True}, "judge": {"k": [1, 2]}}, metric_id="score"
    )
    assert (scores, judge, error) == ({"a": 1.0}, {"k": [1, 2]}, None)
    assert dropped == {"b": True}


@pytest.mark.parametrize(
    ("scores", "declared", "expected"),
    [
        ({"score": 0.2, "x": 0.9}, None, 0.2),
        ({"x": 0.9}, ["y"], 0.9),
        ({"x": 0.9, "y": 0.1}, ["z", "y"], 0.1),
        ({"x": 0.9, "y": 0.1}, None, 0.9),
        ({}, None, None),
    ],
)
def test_primary_score(
    scores: dict[str, float], declared: list[str] | None, expected: float | None
) -> None:
    assert primary_score(scores, metric_id="score", declared=declared) == expected


# --- the sample contract: the seed's examples and recipes as written --------------------------


async def test_seed_single_score() -> None:
    outcome = await grade(grader(seed("single_score.py.txt")), inputs([("4", "4"), ("four", "4")]))
    assert [g.score for g in outcome.grades] == [1.0, 0.0]


async def test_seed_multiple_scores_with_judge() -> None:
    g = grader(seed("multiple_scores.py.txt"))
    outcome = await grade(g, inputs([("The capital is Paris", "paris"), (" PARIS ", "paris")]))
    first, second = outcome.grades
    assert dict(first.scores) == {"exact_match": 0.0, "contains_target": 1.0}
    assert first.details["judge"] == {"output": "the capital is paris", "target": "paris"}
    assert first.score == 0.0  # two metrics, none declared: the first returned (exact_match)
    assert dict(second.scores) == {"exact_match": 1.0, "contains_target": 1.0}
    assert second.score == 1.0
    declared = grader(seed("multiple_scores.py.txt"), metrics=["contains_target"])
    outcome = await grade(declared, inputs([("The capital is Paris", "paris")]))
    assert outcome.grades[0].score == 1.0


@pytest.mark.parametrize(
    ("recipe", "pairs", "expected"),
    [
        ("exact_match", [("Paris", "Paris"), ("paris", "Paris"), (" Paris\n", "Paris")], [1, 0, 1]),
        ("case_insensitive", [("PARIS", "paris"), ("Lyon", "paris")], [1, 0]),
        ("numeric_tolerance", [("3.14159", "3.14"), ("3.2", "3.14"), ("pi", "3.14")], [1, 0, 0]),
    ],
)
async def test_seed_recipes(recipe: str, pairs: list[tuple[str, str]], expected: list[int]) -> None:
    outcome = await grade(grader(seed(f"{recipe}.py.txt")), inputs(pairs))
    assert [g.score for g in outcome.grades] == [float(x) for x in expected]
    assert all(g.error_kind is None for g in outcome.grades)


async def test_seed_numeric_tolerance_keeps_absolute_error() -> None:
    outcome = await grade(grader(seed("numeric_tolerance.py.txt")), inputs([("3.14159", "3.14")]))
    scores = outcome.grades[0].scores
    assert scores["numeric_match"] == 1.0
    assert scores["absolute_error"] == pytest.approx(0.00159)
    assert outcome.metrics["absolute_error"] == pytest.approx(0.00159)


async def test_seed_token_f1() -> None:
    pairs = [
        ("the cat sat", "The cat sat on the mat"),  # P = 1, R = 3/6 → F1 = 2/3
        ("dogs bark", "The cat sat"),
        ("", ""),
    ]
    outcome = await grade(grader(seed("token_f1.py.txt")), inputs(pairs))
    assert [g.score for g in outcome.grades] == [pytest.approx(2 / 3), 0.0, 1.0]
    assert outcome.metrics == {"token_f1": pytest.approx((2 / 3 + 0 + 1) / 3)}


async def test_sample_and_item_fields() -> None:
    source = (
        "def grade(sample, item):\n"
        "    return {'scores': {'ok': 1.0}, 'judge': {'sample': sample, 'item': item}}\n"
    )
    r = row(0, "B", instruction="Q?\n\nA. x\nB. y", choices=["x", "y"], category="bio")
    outcome = await grade(grader(source), [GradeInput(row=r, response="  Answer: B \n")])
    judge = outcome.grades[0].details["judge"]
    assert judge["sample"] == {
        "output_text": "  Answer: B \n",
        "extracted_output": "Answer: B",
        "model": "openai:gpt-4.1-mini",
        "prompt": "Q?\n\nA. x\nB. y",
        "task_id": "qa_exact_match",
        "run_id": "eval_run_abc123",
        "sample_id": "r0",
    }
    assert judge["item"] == {
        "choices": ["x", "y"],
        "category": "bio",
        "instruction": "Q?\n\nA. x\nB. y",
        "ground_truth_response": "B",
        "external_row_id": "r0",
        "prompt": "Q?\n\nA. x\nB. y",
        "target": "B",
        "reference_answer": "B",
        "task_id": "qa_exact_match",
    }
    assert outcome.grades[0].extracted == "Answer: B"


async def test_scores_outside_zero_one_do_not_count() -> None:
    outcome = await grade(grader("def grade(s, i):\n    return 7.5\n"), inputs([("a", "b")]))
    (g,) = outcome.grades
    assert g.score == 0.0
    assert g.error_kind == "grader_score_out_of_range"
    assert dict(g.scores) == {"score": 7.5}


async def test_candidate_failures_are_not_graded() -> None:
    g = grader("import os\ndef grade(s, i):\n    return 1.0\n")
    items = [GradeInput(row=row(0, "x"), response="", candidate_failed=True)]
    outcome = await grade(g, items)
    assert outcome.grades[0].error_kind == "candidate_error"
    assert outcome.grades[0].score == 0.0


# --- the batch contract -----------------------------------------------------------------------


async def test_seed_batch_metrics_only() -> None:
    g = grader(seed("batch_metrics.py.txt"), contract="batch")
    outcome = await grade(g, inputs([("positive", "positive"), ("negative", "positive")]))
    assert outcome.metrics == {"accuracy": 0.5}
    assert all(x.score == 0.0 and x.error_kind is None for x in outcome.grades)
    assert "no score for this sample" in outcome.grades[0].details["note"]


async def test_seed_batch_sample_updates() -> None:
    g = grader(seed("batch_updates.py.txt"), contract="batch")
    outcome = await grade(
        g, inputs([("positive", "positive"), ("negative", "positive"), ("neutral", "neutral")])
    )
    assert outcome.metrics == {"batch_accuracy": pytest.approx(2 / 3)}
    assert [x.score for x in outcome.grades] == [1.0, 0.0, 1.0]
    assert all(x.details["judge"] == {"checked_in_batch": True} for x in outcome.grades)
    assert dict(outcome.grades[1].scores) == {"batch_correct": 0.0}


async def test_seed_macro_f1_with_grade_batch() -> None:
    g = grader(seed("macro_f1.py.txt"), contract="batch", metrics=["macro_f1"])
    pairs = [("pos", "pos"), ("pos", "neg"), ("pos", "pos"), ("neg", "neg")]
    outcome = await grade(g, inputs(pairs))
    # neg: tp 1, fp 0, fn 1 → F1 2/3; pos: tp 2, fp 1, fn 0 → F1 0.8; macro = 11/15.
    assert outcome.metrics == {"macro_f1": pytest.approx((2 / 3 + 0.8) / 2)}
    assert [x.score for x in outcome.grades] == [1.0, 0.0, 1.0, 1.0]


async def test_batch_drops_undeclared_and_invalid_metrics() -> None:
    source = (
        "def grade_batch(samples):\n"
        "    metrics = {'accuracy': 0.5, 'drift': 0.1, 'bad': float('nan'), 'flag': True}\n"
        "    return {'metrics': metrics,\n"
        "            'samples': [{'sample_id': s['sample_id'], 'scores': {'accuracy': 1.0},\n"
        "                         'extracted_output': s['output_text'].upper(), 'judge': None}\n"
        "                        for s in samples] + [{'sample_id': 'nobody'}, {'x': 1}]}\n"
    )
    outcome = await grade(
        grader(source, contract="batch", metrics=["accuracy", "bad"]), inputs([("a", "A")])
    )
    assert outcome.metrics == {"accuracy": 0.5}
    (g,) = outcome.grades
    assert g.score == 1.0
    assert g.extracted == "A"
    notes = " | ".join(g.details["batch_notes"])
    assert "'drift' dropped" in notes and "'bad' dropped" in notes and "samples[2]" in notes


async def test_batch_failure_zeroes_every_row() -> None:
    g = grader(
        "def grade_batch(samples):\n    return {'metrics': {'x': float('inf')}}\n", contract="batch"
    )
    outcome = await grade(g, inputs([("a", "a"), ("b", "b")]))
    assert [x.error_kind for x in outcome.grades] == ["grader_invalid_result"] * 2
    assert outcome.metrics == {}
    crash = grader("def grade_batch(samples):\n    raise RuntimeError('boom')\n", contract="batch")
    outcome = await grade(crash, inputs([("a", "a")]))
    assert outcome.grades[0].error_kind == "grader_exception"
    assert "boom" in (outcome.grades[0].message or "")
    assert "RuntimeError" in outcome.grades[0].details["judge"]["error"]["traceback"]


async def test_batch_sees_failed_candidates_as_empty_but_scores_them_zero() -> None:
    source = (
        "def grade_batch(samples):\n"
        "    return {'samples': [{'sample_id': s['sample_id'], 'scores': {'seen': 1.0},\n"
        "                         'judge': {'text': s['output_text']}} for s in samples]}\n"
    )
    items = [
        GradeInput(row=row(0, "a"), response="", candidate_failed=True),
        GradeInput(row=row(1, "b"), response="b"),
    ]
    outcome = await grade(grader(source, contract="batch"), items)
    assert [x.score for x in outcome.grades] == [0.0, 1.0]
    assert outcome.grades[0].error_kind == "candidate_error"
    assert outcome.grades[0].details["judge"] == {"text": ""}


# --- model-backed graders with a fake bridge ---------------------------------------------------


class FakeBridge:
    """Canned Responses / Embeddings answers; records every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []

    async def responses_create(self, **request: Any) -> dict[str, Any]:
        self.requests.append(("responses", request))
        verdict = "correct" if "Previsão: Paris" in request["input"] else "incorrect"
        body = {"verdict": verdict, "rationale": f"judged {verdict}"}
        return {"id": f"resp_{len(self.requests)}", "output_text": json.dumps(body)}

    async def embeddings_create(self, **request: Any) -> dict[str, Any]:
        self.requests.append(("embeddings", request))
        vectors = {"Paris": [3.0, 4.0], "paris": [3.0, 4.0], "Lyon": [4.0, 3.0], "": [0.0, 0.0]}
        return {
            "model": "fake-embedding",
            "data": [{"embedding": vectors[text]} for text in request["input"]],
        }

    def bridge(self) -> ModelBridge:
        return ModelBridge(self.responses_create, self.embeddings_create)


async def test_seed_llm_as_judge() -> None:
    fake = FakeBridge()
    g = grader(seed("llm_judge.py.txt"), contract="model_backed", max_model_calls=4)
    outcome = await grade(
        g, inputs([("Paris", "Paris"), ("Lyon", "Paris")]), context(fake.bridge())
    )
    good, bad = outcome.grades
    assert (good.score, bad.score) == (1.0, 0.0)
    assert dict(good.scores) == {"judge_score": 1.0}
    assert good.details["judge"]["verdict"] == "correct"
    assert good.details["judge"]["rationale"] == "judged correct"
    assert good.details["judge"]["response_id"].startswith("resp_")
    assert good.details["model_calls"][0]["model"] == "meetkai:functionary-pt"
    kinds = {kind for kind, _ in fake.requests}
    assert kinds == {"responses"}
    request = fake.requests[0][1]
    assert request["temperature"] == 0
    assert request["text"] == {"format": {"type": "json_object"}}
    assert request["metadata"] == {"judge": "reference_binary"}
    assert "Referência: Paris" in request["input"]


async def test_seed_embedding_similarity() -> None:
    fake = FakeBridge()
    g = grader(seed("embedding_similarity.py.txt"), contract="model_backed")
    outcome = await grade(
        g, inputs([("Paris", "paris"), ("Lyon", "Paris")]), context(fake.bridge())
    )
    same, other = outcome.grades
    assert same.score == pytest.approx(1.0)
    assert other.score == pytest.approx(24 / 25)  # cos between (4, 3) and (3, 4)
    assert dict(other.scores) == {"semantic_similarity": pytest.approx(0.96)}
    assert same.details["judge"] == {"embedding_model": "fake-embedding"}


async def test_model_calls_are_limited_and_sanitised() -> None:
    fake = FakeBridge()
    source = (
        "def grade(sample, item, ctx):\n"
        "    for n in range(5):\n"
        "        ctx.responses_create(model='auto', input='Previsão: Paris', stream=True,\n"
        "                             background=True, store=False)\n"
        "    return 1.0\n"
    )
    g = grader(source, contract="model_backed", max_model_calls=4)
    outcome = await grade(g, inputs([("a", "b")]), context(fake.bridge()))
    (result,) = outcome.grades
    assert result.error_kind == "grader_exception"
    assert "call limit (4 per run)" in (result.message or "")
    assert len(fake.requests) == 4
    assert all(set(req) == {"model", "input"} for _, req in fake.requests)


async def test_model_access_none_refuses_calls() -> None:
    fake = FakeBridge()
    g = grader(seed("llm_judge.py.txt"), contract="model_backed", model_access="none")
    outcome = await grade(g, inputs([("Paris", "Paris")]), context(fake.bridge()))
    assert outcome.grades[0].error_kind == "grader_exception"
    assert "needs model access" in (outcome.grades[0].message or "")
    assert fake.requests == []


async def test_model_backed_without_a_bridge_fails_the_rows() -> None:
    g = grader(seed("llm_judge.py.txt"), contract="model_backed")
    outcome = await grade(g, inputs([("Paris", "Paris")]), context(None))
    assert outcome.grades[0].error_kind == "grader_exception"
    assert "no model access" in (outcome.grades[0].message or "")


async def test_failing_bridge_call_is_reported() -> None:
    async def broken(**request: Any) -> dict[str, Any]:
        raise ConnectionError("judge endpoint down")

    g = grader(seed("llm_judge.py.txt"), contract="model_backed")
    outcome = await grade(g, inputs([("Paris", "Paris")]), context(ModelBridge(broken, broken)))
    (result,) = outcome.grades
    assert result.error_kind == "grader_exception"
    assert "judge endpoint down" in (result.message or "")
    assert result.details["model_calls"][0]["error"] == "ConnectionError: judge endpoint down"


# --- preprocessors ----------------------------------------------------------------------------


async def test_seed_transform() -> None:
    p = PythonPreprocessor.from_declaration(
        {"preprocess": {"type": "python", "source": seed("transform.py.txt")}}
    )
    rows = [
        row(0, "4", question="  2+2?  ", answer=4),
        row(1, "6", question="3+3?\n", answer=" 6 "),
    ]
    out = await p.apply(rows)
    assert [dict(r.metadata) for r in out] == [
        {"question": "2+2?", "answer": "4"},
        {"question": "3+3?", "answer": "6"},
    ]
    assert [(r.index, r.row_id, r.instruction, r.ground_truth_response) for r in out] == [
        (0, "r0", "2+2?", "4"),
        (1, "r1", "2+2?", "6"),
    ]


async def test_seed_transform_batch_from_the_seed_declaration(tmp_path: Path) -> None:
    (tmp_path / "prep.py").write_text(seed("transform_batch.py.txt"))
    decl = json.loads(seed("declaration_preprocess.json"))
    del decl["preprocess"]["file_id"]
    decl["preprocess"]["file"] = "prep.py"
    p = PythonPreprocessor.from_declaration(decl, base_dir=tmp_path)
    rows = [row(0, "a", skip=True), row(1, "b", difficulty="hard"), row(2, "c")]
    out = await p.apply(rows)
    assert [(r.index, r.row_id) for r in out] == [(0, "r1"), (1, "r2")]
    assert [r.metadata["difficulty"] for r in out] == ["hard", "unknown"]
    assert p.identity["contract"] == "batch"


async def test_grader_carries_its_preprocessor() -> None:
    g = PythonGrader.from_declaration(
        {
            "grader": {"type": "python", "source": seed("exact_match.py.txt")},
            "preprocess": {
                "type": "python",
                "contract": "sample",
                "source": seed("transform.py.txt"),
            },
        }
    )
    assert g.preprocessor is not None
    assert g.identity["preprocess"]["contract"] == "sample"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def transform(row):\n    return None\n", "is None, not a dict"),
        (
            "def transform(row):\n    row['instruction'] = 5\n    return row\n",
            "no string 'instruction'",
        ),
        ("def transform(row):\n    row['x'] = {1}\n    return row\n", "not a valid row"),
        ("def transform(row):\n    raise KeyError('question')\n", "KeyError"),
    ],
)
async def test_preprocessor_failures_raise(source: str, message: str) -> None:
    p = PythonPreprocessor.from_declaration({"type": "python", "source": source})
    with pytest.raises(PreprocessError, match=message):
        await p.apply([row(0, "a")])


# --- hostile graders: every one scores 0 with a reason, and the run finishes ------------------

HOSTILE = """
import os, socket

def grade(sample, item):
    what = item["target"]
    if what == "environment":
        return float(os.environ["KYAI_TEST_SECRET"] == "hunter2")
    if what == "socket":
        socket.create_connection(("127.0.0.1", int(item["port"])), timeout=2)
        return 1.0
    if what == "fork":
        while True:
            os.fork()
    if what == "memory":
        return float(len(bytearray(8 * 1024 ** 3)) > 0)
    if what == "loop":
        while True:
            pass
    if what == "write":
        open(item["outside"], "w").write("pwned")
        return 1.0
    if what == "nan":
        return float("nan")
    if what == "true":
        return True
    if what == "kill-parent":
        import signal
        os.kill(os.getppid(), signal.SIGKILL)
        return 1.0
    if what == "fine":
        return 1.0
"""

EXPECTED_KINDS = {
    "environment": ("grader_exception", "KeyError"),
    "socket": ("grader_exception", "PermissionError"),
    "fork": ("grader_exception", "PermissionError"),
    "memory": ("grader_memory_limit", "MemoryError"),
    "loop": ("grader_timeout", "did not finish"),
    "write": ("grader_exception", "PermissionError"),
    "nan": ("grader_invalid_result", "non-finite"),
    "true": ("grader_invalid_result", "boolean"),
    "kill-parent": ("grader_exception", "PermissionError"),
    "fine": (None, ""),
}


async def test_hostile_graders_score_zero_with_a_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KYAI_TEST_SECRET", "hunter2")
    connections: list[object] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(object())
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    outside = tmp_path / "outside.txt"
    items = [
        GradeInput(row=row(i, what, port=port, outside=str(outside)), response="x")
        for i, what in enumerate(EXPECTED_KINDS)
    ]
    # A generous limit: only the endless loop may reach it, even on a loaded machine.
    g = grader(HOSTILE, timeout_seconds=5)
    try:
        outcome = await grade(g, items, context(concurrency=4))
    finally:
        server.close()
        await server.wait_closed()
    got: dict[str, Grade] = dict(zip(EXPECTED_KINDS, outcome.grades, strict=True))
    for what, (kind, needle) in EXPECTED_KINDS.items():
        result = got[what]
        assert result.error_kind == kind, (what, result)
        if kind is None:
            assert result.score == 1.0
            continue
        assert result.score == 0.0, what
        assert needle in (result.message or ""), (what, result.message)
        assert result.details["judge"]["error"]["message"]
    assert math.isnan(got["nan"].details["judge"]["invalid_result"])
    assert got["true"].details["judge"]["invalid_result"] is True
    assert connections == []
    assert not outside.exists()


async def test_huge_output_and_odd_returns() -> None:
    source = (
        "def grade(sample, item):\n"
        "    what = item['target']\n"
        "    if what == 'print':\n"
        "        while True:\n"
        "            print('spam' * 1000)\n"
        "    if what == 'set':\n"
        "        return {1, 2}\n"
        "    if what == 'string':\n"
        "        return '1.0'\n"
        "    if what == 'exit':\n"
        "        import os\n"
        "        os._exit(0)\n"
    )
    g = grader(source, timeout_seconds=30)
    outcome = await grade(g, inputs([("x", "print"), ("x", "set"), ("x", "string"), ("x", "exit")]))
    kinds = [x.error_kind for x in outcome.grades]
    assert kinds == [
        "grader_output_limit",
        "grader_invalid_result",
        "grader_invalid_result",
        "grader_crash",
    ]
    assert "a set" in (outcome.grades[1].message or "")
    assert outcome.grades[2].details["judge"]["invalid_result"] == "1.0"


# --- run-level metrics count invalid and errored rows as 0 (seed 001, issue 13) -------------


_TWO_VALID_FOUR_INVALID = """
def grade(sample, item):
    answer = sample["output_text"]
    if answer == "ok":
        return {"scores": {"exact_match": 1.0}}
    if answer == "nan":
        return {"scores": {"exact_match": float("nan")}}
    if answer == "text":
        return "not a score"
    if answer == "range":
        return {"scores": {"exact_match": 7.0}}
    return None
"""


async def test_invalid_rows_count_zero_in_run_metrics() -> None:
    answers = ["ok", "ok", "nan", "text", "range", "none"]
    outcome = await grade(
        grader(_TWO_VALID_FOUR_INVALID, metric_id="exact_match"),
        inputs([(a, "x") for a in answers]),
    )
    kinds = [g.error_kind for g in outcome.grades]
    assert kinds[:2] == [None, None]
    assert all(kind is not None for kind in kinds[2:]), kinds
    assert outcome.metrics["exact_match"] == pytest.approx(2 / 6)
    assert outcome.metrics["invalid_rows"] == 4.0
    assert "errored_rows" not in outcome.metrics
    # The run metric agrees with the mean of the row scores (what avg_score reads).
    assert outcome.metrics["exact_match"] == pytest.approx(
        sum(g.score for g in outcome.grades) / len(outcome.grades)
    )


async def test_errored_rows_count_zero_and_are_counted() -> None:
    source = (
        "def grade(sample, item):\n"
        "    if sample['output_text'] == 'boom':\n"
        "        raise RuntimeError('boom')\n"
        "    return {'scores': {'acc': 1.0}}\n"
    )
    outcome = await grade(grader(source), inputs([("a", "a"), ("boom", "a"), ("b", "b")]))
    assert outcome.metrics["acc"] == pytest.approx(2 / 3)
    assert outcome.metrics["errored_rows"] == 1.0
    assert "invalid_rows" not in outcome.metrics
