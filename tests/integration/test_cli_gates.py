"""``--fail-under`` / ``--max-error-rate`` on ``kyai run`` and ``kyai judge`` (exit 4), and the
exit statuses in every command's ``--help``; the candidate and judge are the LLM double."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kyai.cli import build_parser, main
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge

GEN = "Answer with the bare answer only."
JUDGE = 'Return JSON {"score": 0..1, "reasoning": "..."}.'
ROWS = [
    ("What is the capital of France?", "Paris"),
    ("What is 2+2?", "4"),
    ("Who wrote Hamlet?", "Shakespeare"),
    ("What is the capital of Peru?", "Lima"),
]
RULES = [
    Rule(match="capital of France", model="cand", content="Paris"),
    Rule(match="2+2", model="cand", content="4"),
    Rule(match="Hamlet", model="cand", status=400),  # one row errors: error rate 0.25
    Rule(model="cand", content="I do not know"),
    Rule(model="judge", content=substring_judge),
]


@pytest.fixture(scope="module")
def double() -> Iterator[LLMDouble]:
    with LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")], rules=RULES
    ).start_in_thread() as running:
        yield running


def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text(
        "".join(json.dumps({"instruction": q, "ground_truth_response": a}) + "\n" for q, a in ROWS)
    )
    return path


def run(url: str, tmp_path: Path, out: Path, *gates: str) -> int:
    return main(
        [
            "run", "--endpoint", url, "--model", "cand", "--dataset", str(dataset(tmp_path)),
            "--generation-prompt", GEN, "--judge-prompt", JUDGE, "--judge-endpoint", url,
            "--judge-model", "judge", "--output", str(out), "--quiet", "--max-retries", "0",
            *gates,
        ]
    )  # fmt: skip


@pytest.mark.parametrize(
    ("gates", "status", "complaint"),
    [
        ((), 0, None),
        (("--fail-under", "0.5"), 0, None),  # avg_score 0.5 >= 0.5: as thresholds.avgScore
        (("--fail-under", "0.51"), 4, "avg_score 0.5000 < --fail-under 0.51"),
        (("--max-error-rate", "0.25"), 0, None),  # 1/4 <= 0.25: as thresholds.maxErrorRate
        (("--max-error-rate", "0.2"), 4, "error rate 0.2500 > --max-error-rate 0.2"),
        (("--fail-under", "0.9", "--max-error-rate", "0"), 4, "; error rate"),
    ],
)
def test_run_gates(
    double: LLMDouble,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    gates: tuple[str, ...],
    status: int,
    complaint: str | None,
) -> None:
    out = tmp_path / "out"
    assert run(double.url, tmp_path, out, *gates) == status
    summary = json.loads((out / "summary.json").read_text())  # written whatever the gate
    assert (summary["avg_score"], summary["error_count"], summary["count"]) == (0.5, 1, 4)
    err = capsys.readouterr().err
    if complaint is None:
        assert "quality gate failed" not in err
    else:
        assert "kyai run: quality gate failed" in err and complaint in err


def test_judge_gates_on_stored_answers(
    double: LLMDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "first"
    assert run(double.url, tmp_path, first) == 0
    judge = [
        "judge", "--generations", str(first), "--judge-endpoint", double.url,
        "--judge-model", "judge", "--quiet", "--max-retries", "0",
    ]  # fmt: skip
    assert main([*judge, "--output", str(tmp_path / "a"), "--fail-under", "0.5"]) == 0
    assert main([*judge, "--output", str(tmp_path / "b"), "--fail-under", "0.75"]) == 4
    assert "kyai judge: quality gate failed: avg_score 0.5000" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["1.5", "-0.1", "abc"])
def test_gate_values_outside_0_1_are_usage_errors(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--fail-under", value])
    assert exited.value.code == 2
    assert "--fail-under" in capsys.readouterr().err


def test_every_command_help_lists_its_exit_statuses() -> None:
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    commands: dict[str, argparse.ArgumentParser] = dict(subparsers.choices)
    wanted = {"generate", "judge", "run", "operator", "devcluster", "leaderboard", "compare"}
    assert wanted | {"judge-gateway"} <= set(commands)
    for name, command in commands.items():
        text = command.format_help()
        assert "exit status:" in text, name
        # kyai compare reads files only (no server to reach: no 3); kyai judge-gateway serves
        # until a signal (exit 0) and refuses bad settings (2).
        codes = ("0", "1", "2", "3", "130")
        if name == "compare":
            codes = ("0", "1", "2", "130")
            assert "\n  3 " not in text, name
        if name == "judge-gateway":
            codes = ("0", "1", "2")
            assert "\n  3 " not in text and "\n  130 " not in text, name
        for code in codes:
            assert f"\n  {code} " in text, (name, code)
        gated = name in ("run", "judge", "lm-eval", "compare")
        assert ("\n  4    a quality gate failed" in text) == gated, name
    assert "exit status:" in parser.format_help()
