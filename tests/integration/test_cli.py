"""``kyai generate | judge | run`` as a user runs them: flags, files, exit statuses, messages."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kyai.cli import main
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge

GEN_PROMPT = "Answer with the bare answer only."
JUDGE_PROMPT = 'Return JSON {"score": 0..1, "reasoning": "..."}.'


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    server = LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")],
        rules=[
            Rule(match="capital of France", model="cand", content="Paris"),
            Rule(match="2+2", model="cand", content="<think>2+2=5?</think>4"),
            Rule(model="cand", content="I do not know"),
            Rule(model="judge", content=substring_judge),
        ],
        api_key="sk-test-secret",
    )
    with server.start_in_thread() as running:
        yield running


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "questions.jsonl"
    rows = [
        {"instruction": "What is the capital of France?", "ground_truth_response": "Paris"},
        {"instruction": "What is 2+2?", "ground_truth_response": "4"},
        {"instruction": "Who wrote Hamlet?", "ground_truth_response": "Shakespeare"},
        {"instruction": "What is the capital of Peru?", "ground_truth_response": "Lima"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAND_KEY", "sk-test-secret")
    monkeypatch.setenv("JUDGE_KEY", "sk-test-secret")


def run_args(double: LLMDouble, dataset: Path, out: Path) -> list[str]:
    return [
        "run",
        "--endpoint",
        double.url,
        "--model",
        "cand",
        "--api-key-env",
        "CAND_KEY",
        "--dataset",
        str(dataset),
        "--generation-prompt",
        GEN_PROMPT,
        "--judge-endpoint",
        double.base_url,
        "--judge-model",
        "judge",
        "--judge-api-key-env",
        "JUDGE_KEY",
        "--judge-prompt",
        JUDGE_PROMPT,
        "--output",
        str(out),
        "--quiet",
    ]


@pytest.mark.usefixtures("keys")
def test_run_writes_the_three_files(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(run_args(double, dataset, out)) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["avg_score"] == 0.5
    assert summary["scores"] == [1.0, 1.0, 0.0, 0.0]
    assert summary["count"] == 4
    for name in ("generations.jsonl", "judgements.jsonl", "summary.json", "run.json"):
        assert (out / name).exists()
    printed = capsys.readouterr()
    assert "avg_score=0.5000" in printed.out
    # The key went to the server, and nowhere else.
    assert all(r.headers.get("Authorization") == "Bearer sk-test-secret" for r in double.requests)
    for path in out.iterdir():
        assert "sk-test-secret" not in path.read_text()
    assert "sk-test-secret" not in printed.out + printed.err


@pytest.mark.usefixtures("keys")
def test_generate_then_judge_with_prompt_files(
    double: LLMDouble, dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "gen"
    prompt_file = tmp_path / "gen-prompt.txt"
    prompt_file.write_text(GEN_PROMPT)
    judge_file = tmp_path / "judge-prompt.txt"
    judge_file.write_text(JUDGE_PROMPT)
    assert (
        main(
            [
                "generate",
                "--endpoint",
                double.url,
                "--model",
                "cand",
                "--api-key-env",
                "CAND_KEY",
                "--dataset",
                str(dataset),
                "--generation-prompt",
                f"@{prompt_file}",
                "--output",
                str(out),
                "--concurrency",
                "2",
                "--quiet",
            ]
        )
        == 0
    )
    assert not (out / "summary.json").exists()
    judged = tmp_path / "judged"
    assert (
        main(
            [
                "judge",
                "--generations",
                str(out),
                "--judge-endpoint",
                double.url,
                "--judge-model",
                "judge",
                "--judge-api-key-env",
                "JUDGE_KEY",
                "--judge-prompt",
                f"@{judge_file}",
                "--output",
                str(judged),
                "--quiet",
            ]
        )
        == 0
    )
    summary = json.loads((judged / "summary.json").read_text())
    assert summary["avg_score"] == 0.5
    assert [r.messages[0]["content"] for r in double.requests_for("judge")] == [JUDGE_PROMPT] * 4


def test_bad_dataset_exit_2_names_the_line(
    double: LLMDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instruction": "a", "ground_truth_response": "b"}\n{"instruction": "c"}\n')
    status = main(
        [
            "generate",
            "--endpoint",
            double.url,
            "--model",
            "cand",
            "--dataset",
            str(bad),
            "--generation-prompt",
            GEN_PROMPT,
            "--output",
            str(tmp_path / "out"),
        ]
    )
    assert status == 2
    err = capsys.readouterr().err
    assert "bad.jsonl" in err and "line 2" in err and "ground_truth_response" in err
    assert double.requests == []  # nothing was sent


def test_custom_dataset_needs_its_prompts(
    double: LLMDouble,
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CAND_KEY", "sk-test-secret")
    args = run_args(double, dataset, tmp_path / "out")
    without_judge_prompt = (
        args[: args.index("--judge-prompt")] + args[args.index("--judge-prompt") + 2 :]
    )
    assert main(without_judge_prompt) == 2
    assert "--judge-prompt" in capsys.readouterr().err
    without_gen_prompt = (
        args[: args.index("--generation-prompt")] + args[args.index("--generation-prompt") + 2 :]
    )
    assert main(without_gen_prompt) == 2
    assert "generation" in capsys.readouterr().err.lower()
    assert double.requests == []


def test_missing_key_variable_is_named(
    double: LLMDouble,
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CAND_KEY", raising=False)
    monkeypatch.setenv("JUDGE_KEY", "x")
    assert main(run_args(double, dataset, tmp_path / "out")) == 2
    assert "CAND_KEY" in capsys.readouterr().err


def test_unreachable_server_exit_3(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    status = main(
        [
            "generate",
            "--endpoint",
            f"http://127.0.0.1:{port}",
            "--model",
            "cand",
            "--dataset",
            str(dataset),
            "--generation-prompt",
            GEN_PROMPT,
            "--output",
            str(tmp_path / "out"),
            "--max-retries",
            "0",
        ]
    )
    assert status == 3
    assert f"127.0.0.1:{port}" in capsys.readouterr().err


def test_judge_on_incomplete_generations_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        [
            "judge",
            "--generations",
            str(tmp_path / "nothing-here"),
            "--judge-endpoint",
            "http://127.0.0.1:9",
            "--judge-model",
            "j",
            "--output",
            str(tmp_path / "o"),
        ]
    )
    assert status == 2
    assert "run.json" in capsys.readouterr().err


def test_console_script_version() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "kyai.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert completed.stdout.startswith("kyai ")


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["generate", "--concurrency", "0"])
    assert info.value.code == 2
    assert "--concurrency" in capsys.readouterr().err


def test_builtin_dataset_from_native_file(tmp_path: Path) -> None:
    from kyai.datasets import GENERATION_PROMPTS, JUDGE_PROMPTS

    native = Path(__file__).parent.parent / "unit/datasets/data/native/math500_test.jsonl"
    server = LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")],
        rules=[
            Rule(model="cand", content="Final answer: 2"),
            Rule(model="judge", content=substring_judge),
        ],
    )
    out = tmp_path / "math"
    with server.start_in_thread() as double:
        status = main(
            [
                "run",
                "--endpoint",
                double.url,
                "--model",
                "cand",
                "--dataset",
                "math-500",
                "--dataset-file",
                str(native),
                "--judge-endpoint",
                double.url,
                "--judge-model",
                "judge",
                "--output",
                str(out),
                "--quiet",
            ]
        )
        candidate = double.requests_for("cand")
        judged = double.requests_for("judge")
    assert status == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dataset"] == "math-500" and summary["dataset_version"] == "v1"
    assert summary["generation_prompt_id"] == "math-500-answer"
    assert summary["judge_prompt_id"] == "math-final-answer-judge"
    assert candidate and all(
        r.messages[0]["content"] == GENERATION_PROMPTS["math-500-answer"] for r in candidate
    )
    assert judged and all(
        r.messages[0]["content"] == JUDGE_PROMPTS["math-final-answer-judge"] for r in judged
    )
    # Only the row whose answer is 2 is right.
    assert summary["scores"].count(1.0) == 1
    assert summary["count"] == len(candidate)


@pytest.mark.usefixtures("keys")
def test_builtin_without_hub_access_exit_3(
    double: LLMDouble,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    # huggingface_hub reads HF_HUB_OFFLINE when first imported: when an earlier test of the
    # same process imported it, only its constant makes it offline (else it retries the
    # unreachable Hub for 20 s before the same exit 3).
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    # The candidate answers its check: what fails is the Hub.
    status = main([
        "generate", "--endpoint", double.url, "--model", "cand", "--api-key-env", "CAND_KEY",
        "--dataset", "ifeval", "--output", str(tmp_path / "out"),
    ])  # fmt: skip
    assert status == 3
    err = capsys.readouterr().err
    assert "google/IFEval" in err and "--dataset-file" in err
    assert double.requests == []
