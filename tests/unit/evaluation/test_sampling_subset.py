"""Sampling parameters and subsets in the comparison key, the worker's flags and the run.

A run with neither keeps the key it always had; each sampling parameter and each subset
gives another key. An EvaluationRun's ``spec.generation.sampling`` and ``limit`` reach the
generation worker as its flags, and the run's result says it is a subset.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kyai.api import (
    EvaluationRunSpec,
    EvaluationRunStatus,
    GenerationSettings,
    SamplingSettings,
    Subset,
)
from kyai.builders import worker_args
from kyai.controllers.kinds._judging import judged_outcome
from kyai.evaluation._report import result_model
from kyai.evaluation._scoring import comparison_key, generation_identity

FIELDS = {
    "dataset_sha256": "a" * 64,
    "generation_prompt": "Answer with the bare answer only.",
    "judge": {"type": "llm", "model": "judge", "prompt": "Grade.", "temperature": 0.0},
}


def key(generation: dict[str, object] | None = None) -> str:
    return comparison_key(**FIELDS, generation=generation)  # type: ignore[arg-type]


def test_a_run_of_every_question_with_the_servers_defaults_keeps_its_key() -> None:
    assert key() == key({}) == key(generation_identity({"concurrency": 16}))
    assert key() == comparison_key(**FIELDS)  # type: ignore[arg-type]


def test_each_sampling_parameter_and_each_subset_is_another_key() -> None:
    keys = {
        key(),
        key(generation_identity({"sampling": {"temperature": 0.0}})),
        key(generation_identity({"sampling": {"temperature": 0.7}})),
        key(generation_identity({"sampling": {"temperature": 0.7, "seed": 1}})),
        key(generation_identity({"sampling": {"top_p": 0.9}})),
        key(generation_identity({"subset": {"limit": 10, "of": 100}})),
        key(generation_identity({"subset": {"limit": 20, "of": 100}})),
    }
    assert len(keys) == 7
    # The order the parameters were given in does not matter.
    forward = generation_identity({"sampling": {"temperature": 0.7, "seed": 1}})
    backward = generation_identity({"sampling": {"seed": 1, "temperature": 0.7}})
    assert key(forward) == key(backward)


def generation_args(generation: GenerationSettings) -> list[str]:
    return worker_args.generation_args(
        namespace="n", run="r", endpoint="http://e/v1", model="m", generation=generation,
        api_key=False, context_window=None,
    )  # fmt: skip


def test_the_runs_sampling_and_limit_reach_the_generation_worker_as_flags() -> None:
    plain = generation_args(GenerationSettings())
    assert not {"--temperature", "--top-p", "--seed", "--limit"} & set(plain)
    spec = EvaluationRunSpec.model_validate(
        {
            "workloadRef": {"name": "w"},
            "snapshotRef": {"name": "s"},
            "generation": {"sampling": {"temperature": 0.2, "topP": 0.95, "seed": 3}, "limit": 5},
        }
    )
    given = generation_args(spec.generation)
    for flag, value in (("--temperature", "0.2"), ("--top-p", "0.95"), ("--seed", "3"),
                        ("--limit", "5")):  # fmt: skip
        assert given[given.index(flag) + 1] == value
    only_seed = generation_args(GenerationSettings(sampling=SamplingSettings(seed=0)))
    assert only_seed[only_seed.index("--seed") + 1] == "0"
    assert "--temperature" not in only_seed


@pytest.mark.parametrize(
    "generation",
    [{"sampling": {"temperature": -1}}, {"sampling": {"topP": 0}}, {"sampling": {"topP": 1.1}},
     {"sampling": {"seed": -1}}, {"limit": 0}],
)  # fmt: skip
def test_bad_sampling_or_limit_is_refused_naming_the_field(generation: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as refused:
        GenerationSettings.model_validate(generation)
    field = next(iter(generation))
    assert field in str(refused.value)


def test_a_subsets_result_says_so_in_the_status_and_the_runs_message() -> None:
    summary = {
        "avg_score": 0.5, "avg_latency_ms": 10.0, "count": 2, "errors": {}, "error_count": 0,
        "comparison_key": "k" * 16, "scores": [1.0, 0.0], "subset": {"limit": 2, "of": 40},
    }  # fmt: skip
    reported = result_model(summary)
    assert reported.subset == Subset(limit=2, of=40)
    status = EvaluationRunStatus.model_validate(reported.model_dump(by_alias=True))
    spec = EvaluationRunSpec.model_validate(
        {"workloadRef": {"name": "w"}, "snapshotRef": {"name": "s"}}
    )
    message = judged_outcome(spec, status).message
    assert message.startswith(
        "avgScore 0.5000 over 2 questions (a subset: the first 2 of 40, spec.generation.limit)"
    ), message
    del summary["subset"]
    assert result_model(summary).subset is None
    full = EvaluationRunStatus.model_validate(result_model(summary).model_dump(by_alias=True))
    assert "subset" not in judged_outcome(spec, full).message


@pytest.mark.parametrize(
    ("kind", "field"),
    [({"generationFrom": {"runRef": {"name": "src"}}}, "sampling"),
     ({"generationFrom": {"runRef": {"name": "src"}}}, "limit"),
     ({"workloadRef": {"name": "w"}, "lmEval": {"tasks": [{"name": "gsm8k"}]}}, "limit")],
)  # fmt: skip
def test_a_run_that_does_not_generate_refuses_sampling_and_limit(
    kind: dict[str, object], field: str
) -> None:
    value = {"sampling": {"seed": 1}, "limit": 3}[field]
    with pytest.raises(ValidationError) as refused:
        EvaluationRunSpec.model_validate({**kind, "generation": {field: value}})
    assert f"excludes spec.generation.{field}" in str(refused.value)
