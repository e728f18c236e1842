"""Issue 21 end to end: three candidates of the LLM double answer the same 100 questions.

Each candidate answers a set of questions correctly (the ground truth) and the others with
"I do not know"; the double's substring judge scores 1 or 0. The runs go through ``kyai run``
over loopback HTTP, then ``kyai leaderboard --from`` and ``kyai compare`` read what they wrote.

Hand computation of the ranks (0/1 scores, so every pair is an exact McNemar test):

- A is right on questions 0-69 (0.70), B on 0-58 and 60-67 (0.67), C on 0-59 (0.60).
- A vs B: A alone right on 59, 68, 69 (b = 3), B alone on none (c = 0):
  p = 2 · 0.5³ = 0.25.
- A vs C: A alone right on 60-69 (10), C alone on none: p = 2 · 0.5¹⁰ = 0.00195.
- B vs C: B alone right on 60-67 (8), C alone on 59 (1): p = 2 · (1 + 9) / 2⁹ = 0.0391.
- Holm over the 3 pairs: 0.00195 ≤ 0.05/3 rejects A-C; 0.0391 > 0.05/2 stops there, so B-C
  and A-B stand. A is beaten by none (rank 1), B by none (rank 1), C by A only (rank 2):
  ranks 1, 1, 2 — although B vs C alone is significant (p = 0.039 ≤ 0.05), which is what
  ``kyai compare C B`` says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from scipy import stats as sp

from kyai.cli import main
from kyai_testing import ChatRequest, LLMDouble, ModelSpec, Rule, substring_judge

GEN_PROMPT = "Answer with the code word only."
JUDGE_PROMPT = 'Return JSON {"score": 0 or 1, "reasoning": "..."}.'

RIGHT = {
    "cand-a": set(range(70)),
    "cand-b": set(range(59)) | set(range(60, 68)),
    "cand-c": set(range(60)),
}


def answers(model: str) -> Callable[[ChatRequest], str]:
    """The candidate's answer: the code word of the questions it knows."""

    def content(request: ChatRequest) -> str:
        found = re.search(r"Question (\d+):", request.last_user_message)
        number = int(found.group(1)) if found else -1
        return f"word-{number:03d}" if number in RIGHT[model] else "I do not know"

    return content


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    server = LLMDouble(
        models=[ModelSpec(name) for name in [*RIGHT, "judge"]],
        rules=[
            *(Rule(model=name, content=answers(name)) for name in RIGHT),
            Rule(model="judge", content=substring_judge),
        ],
    )
    with server.start_in_thread() as running:
        yield running


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "codes.jsonl"
    rows = [
        {
            "instruction": f"Question {i}: what is the code word?",
            "ground_truth_response": f"word-{i:03d}",
            "external_row_id": f"code-{i}",
        }
        for i in range(100)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def kyai_run(
    double: LLMDouble, dataset: Path, model: str, out: Path, judge_prompt: str = JUDGE_PROMPT
) -> None:
    status = main(
        [
            "run", "--endpoint", double.url, "--model", model, "--dataset", str(dataset),
            "--generation-prompt", GEN_PROMPT, "--judge-endpoint", double.base_url,
            "--judge-model", "judge", "--judge-prompt", judge_prompt, "--output", str(out),
            "--concurrency", "8", "--quiet",
        ]
    )  # fmt: skip
    assert status == 0


def test_three_candidates_on_the_same_100_questions(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    for model in RIGHT:
        kyai_run(double, dataset, model, runs / model)
    capsys.readouterr()

    summary = json.loads((runs / "cand-a" / "summary.json").read_text())
    assert summary["avg_score"] == 0.7
    interval = summary["avg_score_interval"]
    wilson = sp.binomtest(70, 100).proportion_ci(0.95, method="wilson")
    assert interval["method"] == "wilson" and interval["confidence"] == 0.95
    assert (round(interval["low"], 4), round(interval["high"], 4)) == (0.6042, 0.7811)
    assert interval["low"] == pytest.approx(wilson.low)

    assert main(["leaderboard", "--from", str(runs), "-o", "json"]) == 0
    (board,) = json.loads(capsys.readouterr().out)["boards"]
    entries = board["entries"]
    assert [(e["run"], e["rank"]) for e in entries] == [("cand-a", 1), ("cand-b", 1), ("cand-c", 2)]
    assert [e["avg_score"] for e in entries] == [0.7, 0.67, 0.6]
    assert all(e["avg_score_interval"]["method"] == "wilson" for e in entries)

    assert main(["leaderboard", "--from", str(runs)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in table[2:5]] == ["1", "1", "2"]
    assert "0.6042-0.7811 wilson" in table[2]


def test_compare_says_which_differences_are_real(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    for model in RIGHT:
        kyai_run(double, dataset, model, runs / model)
    capsys.readouterr()

    # B vs C on its own: 8 questions for B, 1 for C, p = 0.039.
    assert main(["compare", str(runs / "cand-c"), str(runs / "cand-b"), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["discordant"] == {"baseline_only": 1, "candidate_only": 8}
    assert data["p_value"] == pytest.approx(0.0390625) and data["verdict"] == "better"

    # "B is not more than 2 points worse than A" fails: -3 points, interval low about -7.2
    # (Bonett-Price, b = 3, c = 0).
    status = main(
        ["compare", str(runs / "cand-a"), str(runs / "cand-b"), "--non-inferiority", "0.02"]
    )
    out = capsys.readouterr().out
    assert status == 4
    assert out.startswith("No detectable difference between cand-b and cand-a: -3.0 points")
    assert "NOT shown non-inferior" in out.splitlines()[1] and "low end -7.2" in out

    # Issue 34: a run against itself (100 questions, none discordant) is within 5 points
    # (±2.7), not within 2, and detects no less than 3.9 points: never an interval of width 0.
    same = [str(runs / "cand-a"), str(runs / "cand-a"), "--allow-same"]
    assert main(["compare", *same, "--non-inferiority", "0.05", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["interval_method"] == "bonett-price" and data["non_inferior"] is True
    assert data["interval"]["high"] == pytest.approx(0.0272, abs=1e-4)
    assert data["minimum_detectable_effect"] == pytest.approx(0.0388, abs=1e-4)
    assert main(["compare", *same, "--non-inferiority", "0.02"]) == 4
    assert "NOT shown non-inferior" in capsys.readouterr().out

    # Another judge prompt is another comparison key: refused, naming both keys.
    kyai_run(double, dataset, "cand-b", tmp_path / "other-judge", judge_prompt="Score it.")
    capsys.readouterr()
    assert main(["compare", str(runs / "cand-a"), str(tmp_path / "other-judge")]) == 2
    err = capsys.readouterr().err
    key_a = json.loads((runs / "cand-a" / "summary.json").read_text())["comparison_key"]
    key_b = json.loads((tmp_path / "other-judge" / "summary.json").read_text())["comparison_key"]
    assert "the comparison keys differ" in err and key_a in err and key_b in err
