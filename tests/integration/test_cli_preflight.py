"""``kyai run`` reports every input problem in one message, before anything is sent (issue 35).

A newcomer's custom dataset used to fail one problem per invocation: no
``--generation-prompt``, a row without ``instruction``, no ``--judge-prompt``, then a candidate
model the server does not list. All of them now come at once, exit status 2, and no chat
request reaches the server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kyai.cli import main
from kyai.evaluation._preflight import MAX_ROW_PROBLEMS
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    server = LLMDouble(
        models=[ModelSpec("candidate"), ModelSpec("judge")],
        rules=[Rule(model="judge", content=substring_judge), Rule(content="Paris")],
    )
    with server.start_in_thread() as running:
        yield running


def write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def run(double: LLMDouble, dataset: Path, out: Path, *extra: str, model: str = "cand") -> list[str]:
    return [
        "run", "--endpoint", double.url, "--model", model, "--dataset", str(dataset),
        "--judge-endpoint", double.url, "--judge-model", "judge", "--output", str(out),
        "--quiet", *extra,
    ]  # fmt: skip


def test_every_problem_of_a_new_dataset_in_one_message(
    double: LLMDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = write(tmp_path / "capitals.jsonl", [
        {"instruction": "What is the capital of France?", "ground_truth_response": "Paris"},
        {"question": "What is the capital of Peru?", "ground_truth_response": "Lima"},
        {"instruction": "  ", "ground_truth_response": 7},
    ])  # fmt: skip
    out = tmp_path / "new" / "out"
    status = main(run(double, dataset, out, "--judge", "llm", "--judge", "builtin"))
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("kyai run: error: 7 problems, nothing was sent:\n"), err
    lines = err.splitlines()[1:]
    assert len(lines) == 7 and all(line.startswith("  - ") for line in lines), err
    said = "\n".join(lines)
    assert "--generation-prompt is required for a custom dataset" in said
    assert "--judge-prompt is required for a custom dataset judged by an LLM" in said
    assert "--judge builtin: deterministic graders exist only for built-in datasets" in said
    assert f"{dataset}, line 2, field 'instruction': The required field" in said
    assert f"{dataset}, line 3, field 'instruction': The instruction is empty." in said
    assert (f"{dataset}, line 3, field 'ground_truth_response': The value must be a string, "
            "got a number (7); quote it in JSON.") in said  # fmt: skip
    assert (
        "  - CandidateModelNotServed: --model cand: the candidate model 'cand' is not served by"
        in said
    )
    assert "'candidate'" in said and "'judge'" in said  # what the server lists
    assert double.requests == []  # no chat request
    assert not (tmp_path / "new").exists()  # nothing left behind


def test_a_judge_model_not_served_is_found_before_the_candidate_is_asked(
    double: LLMDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = write(tmp_path / "rows.jsonl", [
        {"instruction": "What is the capital of France?", "ground_truth_response": "Paris"},
    ])  # fmt: skip
    args = run(double, dataset, tmp_path / "out", "--generation-prompt", "Answer.",
               "--judge-prompt", "Score it.", model="candidate")  # fmt: skip
    args[args.index("--judge-model") + 1] = "judge-large"
    status = main(args)
    err = capsys.readouterr().err
    # A server's answer alone keeps its exit status (3), as a model not served always had,
    # and leads with its reason.
    assert status == 3, err
    assert err.startswith(
        "kyai run: error: JudgeModelNotServed: --judge-model judge-large: the judge model "
        f"'judge-large' is not served by {double.base_url} (its /v1/models lists 'candidate', "
        "'judge'); pass one of those names."
    ), err
    assert double.requests == []


def test_many_bad_rows_are_named_up_to_a_limit_then_counted(
    double: LLMDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows: list[object] = [{"instruction": f"Q{n}?"} for n in range(MAX_ROW_PROBLEMS + 5)]
    dataset = write(tmp_path / "rows.jsonl", rows)
    args = run(double, dataset, tmp_path / "out", "--generation-prompt", "Answer.",
               "--judge-prompt", "Score it.", model="candidate")  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("field 'ground_truth_response':") == MAX_ROW_PROBLEMS
    assert f"line {MAX_ROW_PROBLEMS}," in err and f"line {MAX_ROW_PROBLEMS + 1}," not in err
    assert f"{dataset}: 5 more problems in its rows" in err
    assert double.requests == []


def test_a_well_formed_command_runs(
    double: LLMDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = write(tmp_path / "rows.jsonl", [
        {"instruction": "What is the capital of France?", "ground_truth_response": "Paris"},
        {"instruction": "What is the capital of Peru?", "ground_truth_response": "Lima"},
    ])  # fmt: skip
    args = run(double, dataset, tmp_path / "out", "--generation-prompt", "Answer.",
               "--judge-prompt", "Score it.", model="candidate")  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    assert "avg_score=0.5000 count=2" in capsys.readouterr().out
