"""Guards of the API's validation rules (issue 14): each rule refuses what it must, accepts
what it must, and names the field in its message. Against the public ``kyai.api`` models."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kyai.api import (
    EngineArgsSetSpec,
    EvaluationRunSpec,
    JudgeSpec,
    PythonGrader,
    SnapshotSpec,
    Thresholds,
    WorkloadSpec,
)

REFS = {"workloadRef": {"name": "w"}, "snapshotRef": {"name": "s"}}


def refused(model: Any, data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    assert message in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "spec.workloadRef and spec.snapshotRef required (or spec.generationFrom"),
        ({"workloadRef": {"name": "w"}}, "spec.snapshotRef required"),
        ({"snapshotRef": {"name": "s"}}, "spec.workloadRef required"),
        ({**REFS, "judge": {}, "judges": [{"name": "a"}]}, "set spec.judge or spec.judges"),
        ({**REFS, "judges": [{"name": "a"}, {}]}, "each judge needs a unique name"),
        ({**REFS, "judges": [{"name": "a"}, {"name": "a"}]}, "each judge needs a unique name"),
    ],
)
def test_run_specs_refused(spec: dict[str, Any], message: str) -> None:
    refused(EvaluationRunSpec, spec, message)


@pytest.mark.parametrize(
    "spec",
    [
        REFS,
        {"generationFrom": {"runRef": {"name": "r"}}},
        {**REFS, "judges": [{}]},  # one judge needs no name
        {**REFS, "judges": [{"name": "a"}, {"name": "b", "type": "builtin"}]},
        {**REFS, "thresholds": {"avgScore": 0, "maxErrorRate": 1}},
        {**REFS, "thresholds": {"avgScore": 1, "maxErrorRate": 0}},
    ],
)
def test_run_specs_accepted(spec: dict[str, Any]) -> None:
    EvaluationRunSpec.model_validate(spec)


@pytest.mark.parametrize("field", ["avgScore", "maxErrorRate"])
@pytest.mark.parametrize("value", [-0.01, 1.01])
def test_thresholds_are_shares(field: str, value: float) -> None:
    refused(Thresholds, {field: value}, field)


@pytest.mark.parametrize(
    ("judge", "message"),
    [
        ({"type": "python"}, "judge.type python needs judge.python"),
        ({"type": "llm", "python": {"source": "x"}}, "judge.python applies only to"),
        ({"type": "builtin", "llm": {"model": "j"}}, "apply only to judge.type llm"),
        ({"type": "builtin", "workloadRef": {"name": "j"}}, "apply only to judge.type llm"),
        (
            {"llm": {"endpoint": "http://j/v1", "model": "j"}, "workloadRef": {"name": "j"}},
            "exclude each other",
        ),
        (
            {"llm": {"endpoint": "http://j/v1", "model": "j", "workloadRef": {"name": "j"}}},
            "exclude each other",
        ),
    ],
)
def test_judge_specs_refused(judge: dict[str, Any], message: str) -> None:
    refused(JudgeSpec, judge, message)


@pytest.mark.parametrize(
    "judge",
    [
        {},
        {"type": "builtin"},
        {"type": "python", "python": {"source": "def grade(s, i):\n    return 1.0\n"}},
        {"llm": {"endpoint": "http://j/v1", "model": "j"}},
        {"workloadRef": {"name": "j"}},
    ],
)
def test_judge_specs_accepted(judge: dict[str, Any]) -> None:
    JudgeSpec.model_validate(judge)


def test_python_grader_needs_exactly_one_source() -> None:
    refused(PythonGrader, {}, "exactly one of source, configMapRef")
    both = {"source": "x", "configMapRef": {"name": "c", "key": "k"}}
    refused(PythonGrader, both, "exactly one of source, configMapRef")
    PythonGrader.model_validate({"configMapRef": {"name": "c", "key": "k"}})


ROWS = {"rows": [{"instruction": "q", "groundTruthResponse": "a"}]}
PROMPTS = {"generation": "g", "judge": "j"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "spec needs builtin or source"),
        ({"source": ROWS}, "set spec.prompts.generation and spec.prompts.judge"),
        ({"source": ROWS, "prompts": {"generation": "g"}}, "set spec.prompts.judge"),
        ({"source": ROWS, "prompts": {"judge": "j"}}, "set spec.prompts.generation"),
        ({"source": {}, "prompts": PROMPTS}, "exactly one of configMapRef, url, rows"),
        (
            {
                "source": {**ROWS, "configMapRef": {"name": "c", "key": "k"}},
                "prompts": PROMPTS,
            },
            "(got configMapRef, rows)",
        ),
        (
            {"source": ROWS, "prompts": PROMPTS, "version": "v1"},
            "spec.version and spec.hfRevision apply to built-ins only",
        ),
        (
            {"source": ROWS, "prompts": PROMPTS, "hfRevision": "abc"},
            "spec.version and spec.hfRevision apply to built-ins only",
        ),
        (
            {"builtin": "mmlu-pro", "source": ROWS, "hfRevision": "abc"},
            "spec.hfRevision applies only when the built-in is downloaded",
        ),
    ],
)
def test_snapshot_specs_refused(spec: dict[str, Any], message: str) -> None:
    refused(SnapshotSpec, spec, message)


@pytest.mark.parametrize(
    "spec",
    [
        {"builtin": "mmlu-pro"},
        {"builtin": "gpqa-diamond", "version": "v1", "hfRevision": "abc"},
        {"source": ROWS, "prompts": PROMPTS},
    ],
)
def test_snapshot_specs_accepted(spec: dict[str, Any]) -> None:
    SnapshotSpec.model_validate(spec)


def test_workload_needs_a_framework_or_an_endpoint() -> None:
    refused(WorkloadSpec, {"model": "m"}, "spec.framework is required")
    endpoint = {"model": "m", "endpoint": {"url": "http://h/v1"}}
    WorkloadSpec.model_validate(endpoint)
    WorkloadSpec.model_validate({"model": "m", "framework": "vllm"})
    refused(
        WorkloadSpec,
        {**endpoint, "engineArgsSetRef": {"name": "e"}},
        "spec.endpoint and spec.engineArgsSetRef exclude each other",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"bad name!": 1}, "'bad name!' is not a flag name"),
        ({"tp": [1, True]}, "args.tp: a list may hold only strings and numbers"),
        ({"tp": [1, None]}, "args.tp: a list may hold only strings and numbers"),
        ({"tp": None}, "args.tp: must be a string, number, boolean, list or object, not NoneType"),
        ({"tp": [{"a": 1}]}, "args.tp: a list may hold only strings and numbers"),
    ],
)
def test_engine_args_refused(args: dict[str, Any], message: str) -> None:
    refused(EngineArgsSetSpec, {"framework": "vllm", "args": args}, message)


def test_engine_args_accepted_and_owned_flags_found() -> None:
    spec = EngineArgsSetSpec.model_validate(
        {
            "framework": "vllm",
            "args": {"--tensor-parallel-size": 2, "enforce_eager": True, "x": ["a", 1, 2.5]},
            "extraArgs": ["--port=9000", "--seed", "1"],
        }
    )
    assert spec.owned_flags_used() == ["--port"]
    owned = EngineArgsSetSpec.model_validate(
        {"framework": "vllm", "args": {"Served_Model_Name": "x"}}
    )
    assert owned.owned_flags_used() == ["Served_Model_Name"]


def test_an_owned_flag_is_found_whatever_its_value_holds() -> None:
    # Second pass of make mutation (group api): the flag is what precedes the first "=".
    spec = EngineArgsSetSpec.model_validate(
        {"framework": "vllm", "extraArgs": ["--served-model-name=a=b"]}
    )
    assert spec.owned_flags_used() == ["--served-model-name"]
