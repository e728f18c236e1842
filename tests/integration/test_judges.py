"""Several judges on one generation: LLM, built-in grader and Python graders, with agreement."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kyai.cli import main
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge

NATIVE = Path(__file__).parent.parent / "unit/datasets/data/native/math500_test.jsonl"

EXACT_MATCH = {
    "grader": {
        "type": "python",
        "contract": "sample",
        "source": (
            "def grade(sample, item):\n"
            "    output = (sample.get('extracted_output') or '').strip()\n"
            "    target = (item.get('target') or '').strip()\n"
            "    return {'scores': {'exact_match': 1.0 if output.endswith(target) else 0.0}}\n"
        ),
    }
}

LLM_AS_JUDGE = {
    "grader": {
        "type": "python",
        "contract": "model_backed",
        "max_model_calls": 4,
        "source": (
            "import json\n"
            "def grade(sample, item, ctx):\n"
            "    response = ctx.responses_create(model='auto', input='Verdict? ' + "
            "sample.get('output_text', ''), temperature=0, "
            "text={'format': {'type': 'json_object'}})\n"
            "    parsed = json.loads(response['output_text'])\n"
            "    return 1.0 if parsed.get('verdict') == 'correct' else 0.0\n"
        ),
    }
}


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    server = LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")],
        rules=[
            Rule(match="1+1", model="cand", content="<think>easy</think>Final answer: 2"),
            Rule(match="frac{6}{8}", model="cand", content="Final answer: 0.75"),
            Rule(model="cand", content="Final answer: 7"),
            Rule(match="Verdict?", model="judge", content='{"verdict": "correct"}'),
            Rule(model="judge", content=substring_judge),
        ],
    )
    with server.start_in_thread() as running:
        yield running


def write(tmp_path: Path, name: str, declaration: dict[str, object]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(declaration))
    return path


def test_four_judges_on_one_generation(double: LLMDouble, tmp_path: Path) -> None:
    out = tmp_path / "run"
    status = main([
        "run", "--endpoint", double.url, "--model", "cand", "--dataset", "math-500",
        "--dataset-file", str(NATIVE), "--judge-endpoint", double.url, "--judge-model", "judge",
        "--judge", "llm", "--judge", "builtin",
        "--grader", str(write(tmp_path, "exact.json", EXACT_MATCH)),
        "--grader", str(write(tmp_path, "llmjudge.json", LLM_AS_JUDGE)),
        "--output", str(out), "--quiet",
    ])  # fmt: skip
    assert status == 0
    summary = json.loads((out / "summary.json").read_text())
    names = [j["name"] for j in summary["judges"]]
    assert names == ["llm", "builtin", "exact", "llmjudge"]
    by_name = {j["name"]: j for j in summary["judges"]}
    rows = summary["count"]
    # math-verify knows 0.75 == 3/4; the substring judge and exact match do not.
    builtin = json.loads((out / "judges/builtin/summary.json").read_text())
    assert builtin["judge_type"] == "builtin" and builtin["judge_model"] == "math-verify"
    llm = json.loads((out / "judges/llm/summary.json").read_text())
    assert sum(builtin["scores"]) == sum(llm["scores"]) + 1
    assert by_name["llmjudge"]["avg_score"] == 1.0
    keys = {j["comparison_key"] for j in summary["judges"]}
    assert len(keys) == 4
    assert summary["avg_score"] == by_name["llm"]["avg_score"]  # the first judge is the headline
    assert len(summary["agreement"]) == 6
    pair = next(p for p in summary["agreement"] if p["judges"] == ["llm", "builtin"])
    assert pair["rows"] == rows
    assert pair["exact_agreement"] == pytest.approx((rows - 1) / rows)
    # The model-backed grader's calls went to the judge model, never to the candidate.
    assert all("Verdict?" not in r.messages[-1]["content"] for r in double.requests_for("cand"))
    assert (
        len([r for r in double.requests_for("judge") if "Verdict?" in r.messages[-1]["content"]])
        == rows
    )


def test_builtin_grader_for_custom_data_is_refused(
    double: LLMDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "d.jsonl"
    rows.write_text(json.dumps({"instruction": "q", "ground_truth_response": "a"}) + "\n")
    status = main([
        "run", "--endpoint", double.url, "--model", "cand", "--dataset", str(rows),
        "--generation-prompt", "g", "--judge", "builtin", "--output", str(tmp_path / "o"),
    ])  # fmt: skip
    assert status == 2
    assert "built-in datasets" in capsys.readouterr().err


def test_grader_declaration_errors_name_the_field(
    double: LLMDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(
        tmp_path,
        "bad.json",
        {
            "grader": {
                "type": "python",
                "timeout_seconds": 9000,
                "source": "def grade(s, i):\n    return 1.0\n",
            }
        },
    )
    status = main([
        "judge", "--generations", str(tmp_path), "--grader", str(bad),
        "--output", str(tmp_path / "o"),
    ])  # fmt: skip
    assert status == 2
    assert "timeout_seconds" in capsys.readouterr().err


def test_preprocessor_runs_before_generation(double: LLMDouble, tmp_path: Path) -> None:
    rows = tmp_path / "d.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"instruction": text, "ground_truth_response": "2"}) + "\n"
            for text in ["  What is $1+1$?  ", "SKIP this one", "What is $3-1$?"]
        )
    )
    prep = write(
        tmp_path,
        "prep.json",
        {
            "preprocess": {
                "type": "python",
                "contract": "batch",
                "source": (
                    "def transform_batch(rows):\n"
                    "    return [dict(r, instruction=r['instruction'].strip())\n"
                    "            for r in rows if 'SKIP' not in r['instruction']]\n"
                ),
            }
        },
    )
    out = tmp_path / "out"
    status = main([
        "run", "--endpoint", double.url, "--model", "cand", "--dataset", str(rows),
        "--generation-prompt", "g", "--judge-prompt", "j", "--preprocess", str(prep),
        "--judge-endpoint", double.url, "--judge-model", "judge", "--output", str(out), "--quiet",
    ])  # fmt: skip
    assert status == 0
    sent = [r.messages[-1]["content"] for r in double.requests_for("cand")]
    assert sorted(sent) == ["What is $1+1$?", "What is $3-1$?"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["count"] == 2
    plain = tmp_path / "plain"
    assert main([
        "generate", "--endpoint", double.url, "--model", "cand", "--dataset", str(rows),
        "--generation-prompt", "g", "--output", str(plain), "--quiet",
    ]) == 0  # fmt: skip
    manifest = json.loads((plain / "run.json").read_text())
    assert manifest["dataset"]["sha256"] != summary["dataset_sha256"]


# -- a grader file's own preprocess runs, or is refused clearly (seed 001, issue 13) ----------

GRADER_WITH_PREPROCESS = {
    "grader": {
        "type": "python",
        "source": "def grade(sample, item):\n    return 1.0\n",
        "preprocess": {
            "type": "python",
            "source": (
                "def transform_batch(rows):\n"
                "    return [r for r in rows if 'SKIP' not in r['instruction']]\n"
            ),
            "contract": "batch",
        },
    }
}


def test_a_grader_files_preprocess_runs_in_kyai_run(double: LLMDouble, tmp_path: Path) -> None:
    rows = tmp_path / "d.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"instruction": text, "ground_truth_response": "2"}) + "\n"
            for text in ["What is $1+1$?", "SKIP this one", "What is $3-1$?"]
        )
    )
    grader = write(tmp_path, "g.json", GRADER_WITH_PREPROCESS)
    out = tmp_path / "out"
    status = main([
        "run", "--endpoint", double.url, "--model", "cand", "--dataset", str(rows),
        "--generation-prompt", "g", "--grader", str(grader), "--output", str(out), "--quiet",
    ])  # fmt: skip
    assert status == 0
    sent = sorted(r.messages[-1]["content"] for r in double.requests_for("cand"))
    assert sent == ["What is $1+1$?", "What is $3-1$?"]
    assert json.loads((out / "summary.json").read_text())["count"] == 2


def test_kyai_judge_refuses_a_preprocess_that_did_not_prepare_the_answers(
    double: LLMDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "d.jsonl"
    rows.write_text(json.dumps({"instruction": "What is $1+1$?", "ground_truth_response": "2"}))
    grader = write(tmp_path, "g.json", GRADER_WITH_PREPROCESS)
    plain, prepared = tmp_path / "plain", tmp_path / "prepared"
    common = ["--endpoint", double.url, "--model", "cand", "--dataset", str(rows),
              "--generation-prompt", "g", "--quiet"]  # fmt: skip
    assert main(["generate", *common, "--output", str(plain)]) == 0
    status = main(["judge", "--generations", str(plain), "--grader", str(grader),
                   "--output", str(tmp_path / "j1"), "--quiet"])  # fmt: skip
    assert status == 2
    err = capsys.readouterr().err
    assert "declares a preprocess" in err and "--preprocess" in err
    # Generated from rows the same preprocess prepared: judging goes ahead.
    assert main(["generate", *common, "--preprocess", str(grader), "--output", str(prepared)]) == 0
    assert main(["judge", "--generations", str(prepared), "--grader", str(grader),
                 "--output", str(tmp_path / "j2"), "--quiet"]) == 0  # fmt: skip


def test_two_grader_files_declaring_a_preprocess_are_refused(
    double: LLMDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "d.jsonl"
    rows.write_text(json.dumps({"instruction": "What is $1+1$?", "ground_truth_response": "2"}))
    first = write(tmp_path, "a.json", GRADER_WITH_PREPROCESS)
    second = write(tmp_path, "b.json", GRADER_WITH_PREPROCESS)
    status = main([
        "run", "--endpoint", double.url, "--model", "cand", "--dataset", str(rows),
        "--generation-prompt", "g", "--grader", str(first), "--grader", str(second),
        "--output", str(tmp_path / "o"), "--quiet",
    ])  # fmt: skip
    assert status == 2
    assert "each declare a preprocess" in capsys.readouterr().err
    assert not double.requests_for("cand")
