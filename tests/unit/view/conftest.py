"""Run directories written by the tests, as ``kyai run`` lays them out."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

RunFactory = Callable[..., Path]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")


def write_run(
    root: Path,
    name: str,
    scores: list[float] | None,
    *,
    key: str = "key-a",
    files: tuple[str, ...] = ("dataset", "generations", "judgements"),
    answers: dict[int, str] | None = None,
    errors: dict[int, str] | None = None,
    **extra: Any,
) -> Path:
    """A run directory: summary.json and the files named in ``files``."""
    folder = root / name
    folder.mkdir(parents=True)
    count = len(scores) if scores is not None else extra.pop("count", 4)
    values = scores if scores is not None else [1.0] * count
    summary: dict[str, Any] = {
        "comparison_key": key,
        "dataset": "capitals",
        "dataset_sha256": "sha-1",
        "candidate_model": f"model-{name}",
        "count": count,
        "avg_score": sum(values) / count,
        "error_count": len(errors or {}),
        "errors": {"candidate_http_error": len(errors)} if errors else {},
        "serving": {"ttft_ms": {"p50": 12.5, "p90": 30.0}, "output_tokens_per_second": 99.0},
        **extra,
    }
    if scores is not None:
        summary["scores"] = scores
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    answers = answers or {}
    if "dataset" in files:
        write_jsonl(
            folder / "dataset.jsonl",
            [
                {"index": i, "row_id": f"q{i}", "instruction": f"question {i}?",
                 "ground_truth_response": f"truth {i}"}
                for i in range(count)
            ],
        )  # fmt: skip
    if "generations" in files:
        write_jsonl(
            folder / "generations.jsonl",
            [
                {"row_index": i, "row_id": f"q{i}", "content": answers.get(i, f"{name} says {i}"),
                 "reasoning_content": "thought" if i == 0 else None,
                 "error": {"kind": "candidate_http_error", "message": (errors or {})[i]}
                 if i in (errors or {}) else None}
                for i in range(count)
            ],
        )  # fmt: skip
    if "judgements" in files:
        write_jsonl(
            folder / "judgements.jsonl",
            [
                {"row_index": i, "row_id": f"q{i}", "score": values[i],
                 "reasoning": f"judged {values[i]}", "error": None}
                for i in range(count)
            ],
        )  # fmt: skip
    return folder


@pytest.fixture
def make_run(tmp_path: Path) -> RunFactory:
    """``make_run(name, scores, **options)``: a run directory under the test's tmp_path."""

    def make(name: str, scores: list[float] | None, **options: Any) -> Path:
        return write_run(tmp_path, name, scores, **options)

    return make


@pytest.fixture
def run_writer() -> RunFactory:
    """``run_writer(root, name, scores, **options)``: a run directory under ``root``."""
    return write_run
