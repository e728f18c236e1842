"""The page's data: runs, their boards, every pair of one comparison key, questions, a sweep.

Nothing is computed here that another command computes: the ranks are the leaderboard's
(:func:`kyai.ranking.rank` on the same entries, the same board cells
:func:`kyai.leaderboard.board_cells`), a pair is compared as ``kyai compare`` compares it
(:func:`kyai.results.check_comparable`, :func:`kyai.stats.compare`, its verdict sentence
:func:`kyai.compare.verdict_sentence`), and a sweep's table is its own
(:func:`kyai.sweep_board.row_cells`). The page only displays these figures.

A pair's discordant questions are the rows whose two scores differ (by more than
:data:`kyai.stats.EQUAL_TOLERANCE`): for 0/1 scores exactly McNemar's ``b + c`` of
``kyai compare`` (checked here), for continuous scores every row scored differently. Every
ordered pair (baseline, candidate) of a key is compared, so that either run can be the
baseline; a pair lists its discordant rows by index, and the questions of each run are held
once (``questions``), by run. A board of a sweep's runs names the sweep's baseline cell's run
(``baseline``): the page's side by side starts from it, as the sweep's DELTA does.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kyai import __version__
from kyai.view.sources import Notice, Sources, ViewError, ViewRun

if TYPE_CHECKING:
    from kyai.ranking import Board, Place
    from kyai.sweep_board import SweepBoard

__all__ = ["build", "pair", "questions", "read_rows"]

#: The serving figures the runs' table shows, in its order: the client's ITL with the engine's
#: beside it (``server_``: from its own metrics, when they were read).
SERVING_FIGURES = (
    "ttft_p50_ms",
    "ttft_p90_ms",
    "tpot_p50_ms",
    "itl_p50_ms",
    "server_itl_p50_ms",
    "e2e_p50_ms",
    "output_tokens_per_second",
    "requests_per_second",
    "concurrency",
)


def build(sources: Sources, *, now: datetime) -> dict[str, Any]:
    """The page's data as one JSON-ready object."""
    from kyai.ranking import rank
    from kyai.results import ResultsError

    ids = {run.entry.source: f"r{index}" for index, run in enumerate(sources.runs)}
    notices = list(sources.notices)
    try:
        boards = rank([run.entry for run in sources.runs])
    except ResultsError as exc:
        raise ViewError(str(exc)) from exc
    places = {place.entry.source: place for board in boards for place in board.places}
    runs = [_run_json(run, ids[run.entry.source], places[run.entry.source]) for run in sources.runs]
    baselines = _sweep_baselines(sources.sweep, boards, ids)
    held: dict[str, list[dict[str, Any]]] = {}
    for run in sources.runs:
        if run.files is not None:
            held[ids[run.entry.source]], found = questions(run)
            notices += found
    return {
        "title": sources.title,
        "generated_at": now.isoformat(timespec="seconds"),
        "kyai_version": __version__,
        "notices": [notice.as_dict() for notice in notices],
        "runs": runs,
        "boards": [
            _board_json(board, ids, now, baselines.get(board.comparison_key)) for board in boards
        ],
        "pairs": list(_pairs(sources.runs, boards, ids)),
        "questions": held,
        "sweep": None if sources.sweep is None else _sweep_json(sources.sweep, sources.runs, ids),
    }


# -- runs and boards ----------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _run_json(run: ViewRun, run_id: str, place: Place) -> dict[str, Any]:
    entry = place.entry
    interval = None if place.interval is None else place.interval.as_dict()
    return {
        "id": run_id,
        "label": run.label,
        "source": run.source,
        "directory": run.directory,
        "namespace": entry.namespace,
        "workload": entry.workload,
        "model": entry.model,
        "framework": entry.framework,
        "engine_args_set": entry.engine_args_set,
        "engine_args_hash": entry.engine_args_hash,
        "dataset": entry.dataset,
        "comparison_key": entry.comparison_key,
        "avg_score": entry.avg_score,
        "interval": interval,
        "rank": place.rank,
        "rank_unavailable": place.rank_unavailable,
        "pareto": place.pareto,
        "questions": entry.questions,
        "error_count": entry.error_count,
        "errors": dict(sorted(run.errors.items())),
        "avg_latency_ms": _number(entry.avg_latency_ms),
        "serving": {name: run.serving[name] for name in SERVING_FIGURES if name in run.serving},
        "has_scores": run.results is not None,
        "has_files": run.files is not None,
    }


def _board_json(
    board: Board, ids: Mapping[str, str], now: datetime, baseline: str | None = None
) -> dict[str, Any]:
    from kyai.leaderboard import COLUMNS, board_cells, footer
    from kyai.ranking import RANKING_METHOD

    return {
        "comparison_key": board.comparison_key,
        "dataset": board.dataset,
        "method": RANKING_METHOD,
        "alpha": board.alpha,
        "runs": [ids[place.entry.source] for place in board.places],
        "columns": [header for header, _ in COLUMNS],
        "rows": board_cells(board, now),
        "footer": footer(board),
        # The run the side by side starts from (a sweep's baseline; None: the first named).
        "baseline": baseline,
    }


def _sweep_baselines(
    sweep: SweepBoard | None, boards: Sequence[Board], ids: Mapping[str, str]
) -> dict[str, str]:
    """The baseline of the side by side, by comparison key: the sweep's baseline cell's run.

    A sweep compares each cell with its baseline cell (``DELTA`` = cell - baseline), so the
    page does too: the first run (in the sweep's table) of a row marked ``baseline``, among
    the key's runs. Without a sweep, or a baseline, none: the first run named.
    """
    if sweep is None:
        return {}
    marked = [row.run for row in sweep.rows if row.baseline and row.run]
    found: dict[str, str] = {}
    for board in boards:
        runs = {place.entry.run: place.entry.source for place in board.places}
        chosen = next((runs[name] for name in marked if name in runs), None)
        if chosen is not None:
            found[board.comparison_key] = ids[chosen]
    return found


# -- pairs --------------------------------------------------------------------------------------


def _pairs(
    runs: Sequence[ViewRun], boards: Sequence[Board], ids: Mapping[str, str]
) -> Iterator[dict[str, Any]]:
    """Every ordered pair of runs with scores of one comparison key, in the boards' order."""
    by_source = {run.entry.source: run for run in runs}
    for board in boards:
        members = [by_source[place.entry.source] for place in board.places]
        # The order the runs were named in, so that the first pair is (first, second) named.
        members.sort(key=lambda run: int(ids[run.entry.source][1:]))
        scored = [run for run in members if run.results is not None]
        for baseline, candidate in itertools.permutations(scored, 2):
            yield {
                "baseline": ids[baseline.entry.source],
                "candidate": ids[candidate.entry.source],
                **pair(baseline, candidate),
            }


def pair(baseline: ViewRun, candidate: ViewRun) -> dict[str, Any]:
    """The comparison ``kyai compare BASELINE CANDIDATE`` makes, and the rows that differ.

    A pair that ``kyai compare`` refuses (other rows, too few questions) holds ``refused``,
    its message.
    """
    from kyai.compare import same_run, verdict_sentence
    from kyai.results import ResultsError, check_comparable
    from kyai.stats import EQUAL_TOLERANCE, StatsError, compare

    one, other = baseline.results, candidate.results
    assert one is not None and other is not None
    try:
        check_comparable(one, other)
        result = compare(one.scores, other.scores)
    except (ResultsError, StatsError) as exc:
        return {"refused": str(exc)}
    differ = [
        index
        for index, (a, b) in enumerate(zip(one.scores, other.scores, strict=True))
        if abs(b - a) > EQUAL_TOLERANCE
    ]
    if result.discordant is not None:  # McNemar's b + c: the same rows, counted by kyai.stats
        assert len(differ) == result.discordant.baseline_only + result.discordant.candidate_only
    return {
        "comparison": result.as_dict(),
        "sentence": verdict_sentence(one, other, result),
        "same_run": same_run(one.path, other.path),
        "discordant": differ,
        "baseline_scores": [one.scores[index] for index in differ],
        "candidate_scores": [other.scores[index] for index in differ],
    }


# -- questions ----------------------------------------------------------------------------------


def read_rows(path: Path) -> tuple[dict[int, dict[str, Any]], int]:
    """A JSONL file's records by ``row_index`` (or ``index``), the latest of each.

    With them, how many lines could not be read (a damaged line, a record without its index).
    """
    from kyai._json import loads

    rows: dict[int, dict[str, Any]] = {}
    bad = 0
    with path.open("rb") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                record = loads(line)
            except (ValueError, UnicodeDecodeError):
                bad += 1
                continue
            if not isinstance(record, dict):
                bad += 1
                continue
            index = record.get("row_index", record.get("index"))
            if isinstance(index, bool) or not isinstance(index, int):
                bad += 1
                continue
            rows[index] = record
    return rows, bad


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _error(record: Mapping[str, Any] | None) -> str | None:
    error = (record or {}).get("error")
    if not isinstance(error, Mapping):
        return None
    kind, message = error.get("kind"), error.get("message")
    return ": ".join(str(part) for part in (kind, message) if part)


def questions(run: ViewRun) -> tuple[list[dict[str, Any]], list[Notice]]:
    """Every question of the run: the row, the answer, its reasoning, the judgement, the error.

    Rows come from ``dataset.jsonl``, answers from ``generations.jsonl``, judgements from
    ``judgements.jsonl`` (each the latest record of its row); the score is the one the
    summary holds for the row (its judgement's when it holds none).
    """
    assert run.files is not None
    files = run.files
    read: dict[str, dict[int, dict[str, Any]]] = {}
    notices = []
    for name, path in (
        ("dataset", files.dataset),
        ("generations", files.generations),
        ("judgements", files.judgements),
    ):
        if path is None:
            read[name] = {}
            continue
        try:
            read[name], bad = read_rows(path)
        except OSError as exc:
            read[name], bad = {}, 0
            notices.append(Notice(run.label, f"{path} cannot be read: {exc}"))
        if bad:
            notices.append(Notice(run.label, f"{path}: {bad} line(s) could not be read"))
    scores = run.results.scores if run.results is not None else None
    count = len(scores) if scores is not None else max(map(len, read.values()), default=0)
    indices = sorted(set(range(count)).union(*(set(rows) for rows in read.values())))
    return [_question(index, read, scores) for index in indices], notices


def _question(
    index: int, read: Mapping[str, Mapping[int, dict[str, Any]]], scores: Sequence[float] | None
) -> dict[str, Any]:
    row = read["dataset"].get(index) or {}
    generation = read["generations"].get(index)
    judgement = read["judgements"].get(index)
    score = scores[index] if scores is not None and index < len(scores) else None
    if score is None and judgement is not None:
        score = _number(judgement.get("score"))
    reasoning = _text((generation or {}).get("reasoning_content")) or _text(
        (generation or {}).get("reasoning")
    )
    judged = judgement or {}
    return {
        "i": index,
        "id": str(
            row.get("row_id") or (generation or {}).get("row_id") or judged.get("row_id") or ""
        ),
        "question": _text(row.get("instruction")),
        "truth": _text(row.get("ground_truth_response")),
        "answer": _text((generation or {}).get("content")),
        "reasoning": reasoning,
        "score": score,
        "judgement": _text(judged.get("reasoning")),
        "reply": None if _text(judged.get("reasoning")) else _text(judged.get("reply")),
        "error": _error(judgement) or _error(generation),
        "answered": generation is not None,
        "judged": judgement is not None,
    }


# -- a sweep ------------------------------------------------------------------------------------


def _sweep_json(
    board: SweepBoard, runs: Sequence[ViewRun], ids: Mapping[str, str]
) -> dict[str, Any]:
    from kyai.sweep_board import COLUMNS, footer, heading, row_cells, snapshot_groups

    by_name = {run.entry.run: ids[run.entry.source] for run in runs}
    return {
        "namespace": board.namespace,
        "name": board.name,
        "heading": heading(board),
        "columns": list(COLUMNS),
        "groups": [
            {
                "snapshot": snapshot,
                "rows": [row_cells(row) for row in rows],
                "points": [
                    {
                        "label": row.workload
                        + (f" / {row.engine_args_set}" if row.engine_args_set else ""),
                        "run": row.run,
                        "run_id": by_name.get(row.run or ""),
                        "score": row.avg_score,
                        "ttft_p50_ms": row.ttft_p50_ms,
                        "pareto": row.pareto,
                        "rank": row.rank,
                        "comparison_key": row.comparison_key,
                    }
                    for row in rows
                ],
            }
            for snapshot, rows in snapshot_groups(board.rows)
        ],
        "footer": footer(),
    }
