"""Each discordant question of a pair holds the candidate's own score and judgement.

Issue 45, item 16. The page's side by side lists a pair's discordant rows by index, with the
baseline's and the candidate's scores (``baseline_scores``, ``candidate_scores``, one each
per listed row) and each run's question (answer, judgement) joined by that index from
``questions``. The candidate's side must be the candidate's: its score from its own summary
and its own judgement, in both orders of the pair.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kyai.view.payload import build
from kyai.view.sources import directory_sources

RunFactory = Callable[..., Path]

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def run_with_own_judgements(make_run: RunFactory, name: str, scores: list[float]) -> Path:
    """A run whose judgements name the run (so whose judgement is shown can be told)."""
    run = make_run(name, scores)
    lines = [
        {"row_index": i, "row_id": f"q{i}", "score": score,
         "reasoning": f"{name} judged row {i}: {score}", "error": None}
        for i, score in enumerate(scores)
    ]  # fmt: skip
    (run / "judgements.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8"
    )
    return run


def pair_of(data: dict[str, Any], baseline: str, candidate: str) -> dict[str, Any]:
    ids = {run["label"]: run["id"] for run in data["runs"]}
    found: dict[str, Any]
    (found,) = [
        p
        for p in data["pairs"]
        if (p["baseline"], p["candidate"]) == (ids[baseline], ids[candidate])
    ]
    return found


def sides(data: dict[str, Any], baseline: str, candidate: str) -> list[tuple[Any, ...]]:
    """(row, baseline score, its judgement, candidate score, its judgement) per listed row."""
    pair = pair_of(data, baseline, candidate)
    questions = data["questions"]
    base_q = {q["i"]: q for q in questions[pair["baseline"]]}
    cand_q = {q["i"]: q for q in questions[pair["candidate"]]}
    assert len(pair["baseline_scores"]) == len(pair["candidate_scores"]) == len(pair["discordant"])
    return [
        (index, pair["baseline_scores"][k], base_q[index]["judgement"],
         pair["candidate_scores"][k], cand_q[index]["judgement"])
        for k, index in enumerate(pair["discordant"])
    ]  # fmt: skip


def test_each_discordant_question_shows_the_candidates_score_and_judgement(
    make_run: RunFactory,
) -> None:
    base_scores = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    cand_scores = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    base = run_with_own_judgements(make_run, "bf16", base_scores)
    cand = run_with_own_judgements(make_run, "fp8", cand_scores)
    data = build(directory_sources([base, cand]), now=NOW)
    assert sides(data, "bf16", "fp8") == [
        (1, 1.0, "bf16 judged row 1: 1.0", 0.0, "fp8 judged row 1: 0.0"),
        (2, 0.0, "bf16 judged row 2: 0.0", 1.0, "fp8 judged row 2: 1.0"),
        (5, 0.0, "bf16 judged row 5: 0.0", 1.0, "fp8 judged row 5: 1.0"),
        (6, 1.0, "bf16 judged row 6: 1.0", 0.0, "fp8 judged row 6: 0.0"),
    ]
    # The other order: the sides swap, each still its own run's.
    assert sides(data, "fp8", "bf16") == [
        (1, 0.0, "fp8 judged row 1: 0.0", 1.0, "bf16 judged row 1: 1.0"),
        (2, 1.0, "fp8 judged row 2: 1.0", 0.0, "bf16 judged row 2: 0.0"),
        (5, 1.0, "fp8 judged row 5: 1.0", 0.0, "bf16 judged row 5: 0.0"),
        (6, 0.0, "fp8 judged row 6: 0.0", 1.0, "bf16 judged row 6: 1.0"),
    ]


def test_continuous_scores_show_the_candidates_own_values(make_run: RunFactory) -> None:
    base = run_with_own_judgements(make_run, "a", [0.5, 1.0, 0.0, 0.25, 0.75, 1.0])
    cand = run_with_own_judgements(make_run, "b", [0.5, 0.5, 0.0, 0.25, 1.0, 1.0])
    data = build(directory_sources([base, cand]), now=NOW)
    assert sides(data, "a", "b") == [
        (1, 1.0, "a judged row 1: 1.0", 0.5, "b judged row 1: 0.5"),
        (4, 0.75, "a judged row 4: 0.75", 1.0, "b judged row 4: 1.0"),
    ]
    # The question list shows the same scores as the pair for the candidate.
    cand_id = pair_of(data, "a", "b")["candidate"]
    assert [q["score"] for q in data["questions"][cand_id]] == [0.5, 0.5, 0.0, 0.25, 1.0, 1.0]
