"""Guards for resuming a run directory (issue 14), through ``kyai`` as a user runs it.

- ``--retry-errors`` re-asks stored errored rows, only with the flag, and the newer record of
  a row wins;
- a damaged last line of ``generations.jsonl`` (even a complete record that lost its newline)
  is not kept: that row is asked again and no later append glues two records together;
- the comparison key follows the generation prompt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kyai.cli import main
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge

GEN_PROMPT = "Answer with the bare answer only."
JUDGE_PROMPT = 'Return JSON {"score": 0..1, "reasoning": "..."}.'
ROWS = [
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Italy?", "Rome"),
    ("What is the capital of Spain?", "Madrid"),
    ("What is the capital of Peru?", "Lima"),
]


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    server = LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")],
        rules=[
            # Peru fails once (a 500), then answers: the first run stores an error for it.
            Rule(match="Peru", model="cand", status=500, times=1, content="Lima"),
            Rule(match="France", model="cand", content="Paris"),
            Rule(match="Italy", model="cand", content="Rome"),
            Rule(match="Spain", model="cand", content="Madrid"),
            Rule(model="judge", content=substring_judge),
        ],
    )
    with server.start_in_thread() as running:
        yield running


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "capitals.jsonl"
    path.write_text(
        "".join(
            json.dumps({"instruction": q, "ground_truth_response": a, "external_row_id": a}) + "\n"
            for q, a in ROWS
        )
    )
    return path


def generate(double: LLMDouble, dataset: Path, out: Path, *extra: str, quiet: bool = True) -> int:
    return main(
        [
            "generate",
            "--endpoint",
            double.url,
            "--model",
            "cand",
            "--dataset",
            str(dataset),
            "--generation-prompt",
            GEN_PROMPT,
            "--max-retries",
            "0",
            "--concurrency",
            "1",
            "--output",
            str(out),
            *(["--quiet"] if quiet else []),
            *extra,
        ]
    )


def judge(double: LLMDouble, generations: Path, out: Path) -> dict[str, Any]:
    status = main(
        [
            "judge",
            "--generations",
            str(generations),
            "--judge-endpoint",
            double.url,
            "--judge-model",
            "judge",
            "--judge-prompt",
            JUDGE_PROMPT,
            "--output",
            str(out),
            "--quiet",
        ]
    )
    assert status == 0
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def asked(double: LLMDouble, since: int) -> list[str]:
    """The questions the candidate was asked after the first ``since`` requests."""
    return [r.messages[-1]["content"] for r in double.requests[since:] if r.model == "cand"]


def records(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL log, each of which must be one whole JSON object."""
    raw = path.read_text(encoding="utf-8")
    assert raw.endswith("\n"), "the log must end with a whole line"
    lines = raw.splitlines()
    parsed = []
    for number, line in enumerate(lines, start=1):
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:  # two records glued together, or a torn one
            raise AssertionError(f"{path} line {number} is not one JSON record: {line!r}") from exc
        assert isinstance(value, dict), line
        parsed.append(value)
    return parsed


def test_retry_errors_reasks_errored_rows_only_with_the_flag(
    double: LLMDouble, dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "gen"
    assert generate(double, dataset, out) == 0
    first = judge(double, out, tmp_path / "judged-1")
    assert first["scores"] == [1.0, 1.0, 1.0, 0.0]
    assert first["errors"] == {"candidate_http_error": 1}

    # Resuming without the flag asks nothing: every row has a record, the error included.
    before = len(double.requests)
    assert generate(double, dataset, out) == 0
    assert asked(double, before) == []
    assert judge(double, out, tmp_path / "judged-2")["scores"] == [1.0, 1.0, 1.0, 0.0]

    # With the flag, the errored row (and only it) is asked again; its newer record wins.
    before = len(double.requests)
    assert generate(double, dataset, out, "--retry-errors") == 0
    assert asked(double, before) == ["What is the capital of Peru?"]
    third = judge(double, out, tmp_path / "judged-3")
    assert third["scores"] == [1.0, 1.0, 1.0, 1.0]
    assert third["errors"] == {} and third["error_count"] == 0

    # Nothing errored any more: the flag asks nothing.
    before = len(double.requests)
    assert generate(double, dataset, out, "--retry-errors") == 0
    assert asked(double, before) == []


def test_a_run_into_a_directory_holding_answers_says_it_resumes(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``resuming: K of N rows already stored in DIR`` on stderr: K the rows not asked again."""
    out = tmp_path / "gen"
    assert generate(double, dataset, out, quiet=False) == 0  # Peru's answer: an error
    assert "resuming" not in capsys.readouterr().err  # a fresh directory: nothing to resume

    # The errored row is stored too: without --retry-errors every row is kept.
    assert generate(double, dataset, out, quiet=False) == 0
    err = capsys.readouterr().err
    assert f"kyai generate: resuming: 4 of 4 rows already stored in {out}\n" in err, err
    assert "generated 0 of 4 rows" in err, err
    # With it, the errored row is asked again: 3 kept.
    assert generate(double, dataset, out, "--retry-errors", quiet=False) == 0
    err = capsys.readouterr().err
    assert f"kyai generate: resuming: 3 of 4 rows already stored in {out}\n" in err, err
    assert "generated 1 of 4 rows" in err, err
    # A progress line: --quiet silences it (kyai generate's result line stays).
    assert generate(double, dataset, out) == 0
    err = capsys.readouterr().err
    assert "resuming" not in err and "generated 0 of 4 rows" in err, err

    # kyai run says it too, before its result line; another model's directory is not resumed.
    run_args = [
        "run", "--endpoint", double.url, "--model", "cand", "--dataset", str(dataset),
        "--generation-prompt", GEN_PROMPT, "--judge-endpoint", double.url,
        "--judge-model", "judge", "--judge-prompt", JUDGE_PROMPT,
    ]  # fmt: skip
    ran = tmp_path / "ran"
    assert main([*run_args, "--output", str(ran)]) == 0
    assert "resuming" not in capsys.readouterr().err
    assert main([*run_args, "--output", str(ran)]) == 0
    err = capsys.readouterr().err
    assert f"kyai run: resuming: 4 of 4 rows already stored in {ran}\n" in err, err
    other = [*run_args, "--output", str(ran)]
    other[other.index("cand")] = "judge"
    assert main(other) == 2  # refused: nothing is resumed, nothing said of it
    err = capsys.readouterr().err
    assert "resuming" not in err and "already holds generations of another run" in err, err


def test_a_complete_last_record_without_its_newline_is_redone_never_glued(
    double: LLMDouble, dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "gen"
    log = out / "generations.jsonl"
    assert generate(double, dataset, out, "--retry-errors") == 0
    assert generate(double, dataset, out, "--retry-errors") == 0  # Peru answered now
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    by_row = {json.loads(line)["row_index"]: line for line in lines}
    assert sorted(by_row) == [0, 1, 2, 3]
    # The process died after writing the record of row 1 but before its newline, and before
    # row 2 was written at all: rows 0 and 3 whole, row 1 complete JSON without "\n".
    damaged = by_row[0] + by_row[3] + by_row[1].rstrip("\n")
    json.loads(by_row[1])  # the cut record is itself complete, parseable JSON
    log.write_text(damaged, encoding="utf-8")

    before = len(double.requests)
    assert generate(double, dataset, out) == 0
    assert sorted(asked(double, before)) == [
        "What is the capital of Italy?",
        "What is the capital of Spain?",
    ]
    stored = records(log)
    latest = {r["row_index"]: r for r in stored}
    assert sorted(latest) == [0, 1, 2, 3]
    assert all(r["error"] is None for r in latest.values())
    summary = judge(double, out, tmp_path / "judged")
    assert summary["count"] == 4 and summary["scores"] == [1.0, 1.0, 1.0, 1.0]
    # And the file stays readable by a further resume.
    before = len(double.requests)
    assert generate(double, dataset, out) == 0
    assert asked(double, before) == []
    assert len(records(log)) == len(stored)


def run(double: LLMDouble, dataset: Path, out: Path, generation_prompt: str) -> dict[str, Any]:
    status = main(
        [
            "run",
            "--endpoint",
            double.url,
            "--model",
            "cand",
            "--dataset",
            str(dataset),
            "--generation-prompt",
            generation_prompt,
            "--judge-endpoint",
            double.url,
            "--judge-model",
            "judge",
            "--judge-prompt",
            JUDGE_PROMPT,
            "--output",
            str(out),
            "--quiet",
        ]
    )
    assert status == 0
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def test_the_comparison_key_follows_the_generation_prompt(
    double: LLMDouble, dataset: Path, tmp_path: Path
) -> None:
    first = run(double, dataset, tmp_path / "a", GEN_PROMPT)
    same = run(double, dataset, tmp_path / "b", GEN_PROMPT)
    other = run(double, dataset, tmp_path / "c", "Think step by step, then answer.")
    assert first["comparison_key"] == same["comparison_key"]
    assert other["comparison_key"] != first["comparison_key"]
    # Same data, same judge, same judge prompt: only the generation prompt differs.
    assert other["dataset_sha256"] == first["dataset_sha256"]
    assert other["judge_model"] == first["judge_model"]
