"""``kyai view`` / ``kyai report`` show the latest record of a row that was asked again.

Issue 45, item 15. A resumed run, or one re-run with ``--retry-errors``, appends a new
generation and a new judgement for the rows it asks again; the first records stay in the
files above them. The page shows the latest answer, judgement, error and score of each row,
never the first. The report (one HTML file) is checked through its embedded data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kyai.cli import main
from kyai.view.payload import build
from kyai.view.sources import directory_sources

RunFactory = Callable[..., Path]

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def append(path: Path, *records: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.writelines(json.dumps(record) + "\n" for record in records)


def asked_again(make_run: RunFactory, *, with_scores: bool = True) -> Path:
    """Row 1 failed (HTTP 500, score 0) and was asked again: answered and judged right."""
    run = make_run("a", [1.0, 0.0, 1.0], errors={1: "HTTP 500"})
    append(
        run / "generations.jsonl",
        {"row_index": 1, "row_id": "q1", "content": "the second answer", "error": None},
    )
    append(
        run / "judgements.jsonl",
        {"row_index": 1, "row_id": "q1", "score": 1.0, "reasoning": "judged again: right",
         "error": None},
    )  # fmt: skip
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    summary.update(avg_score=1.0, error_count=0, errors={})
    summary.pop("scores")
    if with_scores:
        summary["scores"] = [1.0, 1.0, 1.0]
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return run


LATEST = {
    "i": 1, "id": "q1", "question": "question 1?", "truth": "truth 1",
    "answer": "the second answer", "reasoning": None, "score": 1.0,
    "judgement": "judged again: right", "reply": None, "error": None, "answered": True,
    "judged": True,
}  # fmt: skip


@pytest.mark.parametrize("with_scores", [True, False], ids=["summary-scores", "judged-scores"])
def test_the_page_shows_the_latest_answer_and_judgement_of_a_row_asked_again(
    make_run: RunFactory, with_scores: bool
) -> None:
    run = asked_again(make_run, with_scores=with_scores)
    data = build(directory_sources([run]), now=NOW)
    first, again, third = data["questions"]["r0"]
    assert again == LATEST
    assert first["answer"] == "a says 0" and third["judgement"] == "judged 1.0"
    assert not [n for n in data["notices"] if "could not be read" in n["message"]]


def test_the_report_shows_the_latest_record_of_a_row_asked_again(
    make_run: RunFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("plotly")
    output = tmp_path / "report.html"
    status = main(["report", str(asked_again(make_run)), "-o", str(output)])
    assert status == 0, capsys.readouterr().err
    html = output.read_text(encoding="utf-8")
    block = re.search(r'<script type="application/json" id="kyai-data">(.*?)</script>', html, re.S)
    assert block is not None
    data = json.loads(block.group(1))
    assert data["questions"]["r0"][1] == LATEST
    (run,) = data["runs"]
    assert (run["error_count"], run["errors"]) == (0, {})
