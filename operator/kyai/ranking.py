"""Ranks that mean something: tie-aware boards per comparison key, and the Pareto front.

Entries, their boards, the score / TTFT Pareto front, and an EvaluationRun as an entry.

The pure part of ``kyai leaderboard`` (:mod:`kyai.leaderboard` reads runs from the cluster
or from summary.json files and renders the boards), shared with the EvaluationSweep's table
(:mod:`kyai.sweeps`), which ranks its cells exactly as the leaderboard does. Results are never
ranked across comparison keys; within a key, the rank is tie-aware (:func:`kyai.stats.ranks`:
pairwise paired tests, Holm–Bonferroni, ``rank = 1 +`` the number of runs significantly
better; a pair of continuous runs whose differences are all equal is not tested and separates
nothing), and runs of one key whose rows differ are refused (:class:`SummaryError`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kyai.results import ResultsError

if TYPE_CHECKING:
    from kyai.api import EvaluationRunStatus
    from kyai.stats import Interval

__all__ = [
    "NO_SCORES",
    "RANKING_METHOD",
    "Board",
    "Entry",
    "Place",
    "SummaryError",
    "entry_from_run",
    "pareto_front",
    "rank",
    "rank_key",
]


@dataclass(frozen=True)
class Entry:
    """One succeeded run (or one summary.json) as the leaderboard shows it."""

    namespace: str
    run: str
    workload: str
    model: str
    framework: str
    engine_args_set: str
    dataset: str
    comparison_key: str
    avg_score: float
    avg_latency_ms: float | None
    error_count: int
    questions: int | None
    completed_at: str | None
    #: Median time to first token of the generation phase (ms); None when not measured.
    ttft_p50_ms: float | None = None
    #: Output tokens per second the engine delivered in the generation phase; None: unknown.
    output_tokens_per_second: float | None = None
    #: The hash of the EngineArgsSet's spec the engine ran with (the run's status); None: unknown.
    engine_args_hash: str | None = None
    #: Per-question scores in row order (what ranks are computed from); None when unknown.
    scores: tuple[float, ...] | None = field(default=None, repr=False, compare=False)
    #: The row ids of those scores in row order (from judgements.jsonl); None when unknown.
    row_ids: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    #: The score's interval as the summary or status holds it (used without ``scores``).
    stored_interval: Interval | None = field(default=None, compare=False)
    #: Where the entry comes from (a summary.json, or namespace/name), for messages.
    source: str = field(default="", compare=False)
    #: The sha256 of the dataset the scores are of (the rows' identity); None when unknown.
    dataset_sha256: str | None = field(default=None, repr=False, compare=False)
    #: Why ``scores`` is None, when known (its rank's ``rank_unavailable``).
    scores_unavailable: str | None = field(default=None, repr=False, compare=False)


#: How ranks are decided, as the JSON output and the table's footer say.
RANKING_METHOD = (
    "pairwise paired tests on per-question scores (McNemar exact for 0/1 scores, else paired t; "
    "continuous differences that are all equal: no test, p = 1), Holm-Bonferroni over all "
    "pairs; rank = 1 + the number of runs significantly better"
)
NO_SCORES = "no per-question scores (summary.json 'scores', status.scores or status.scoresPacked)"


class SummaryError(ResultsError):
    """A summary.json that cannot be read, or runs of one key that hold different rows."""


@dataclass(frozen=True)
class Place:
    """An entry's place on its board: its rank (None: unavailable, and why) and interval."""

    entry: Entry
    rank: int | None
    interval: Interval | None
    rank_unavailable: str | None = None
    #: On the score/TTFT Pareto front of its key (None: its TTFT p50 is unknown).
    pareto: bool | None = None


@dataclass(frozen=True)
class Board:
    """The ranking of one comparison key."""

    comparison_key: str
    dataset: str
    places: tuple[Place, ...]
    alpha: float = 0.05

    @property
    def entries(self) -> tuple[Entry, ...]:
        """The entries in the board's order."""
        return tuple(place.entry for place in self.places)


def rank_key(entry: Entry) -> tuple[float, float, str, str]:
    """Score descending, then latency ascending (a run without latency last), then name."""
    latency = entry.avg_latency_ms if entry.avg_latency_ms is not None else math.inf
    return (-entry.avg_score, latency, entry.namespace, entry.run)


def rank(entries: Iterable[Entry], *, alpha: float = 0.05) -> list[Board]:
    """One board per comparison key, each ranked; boards ordered by dataset then key.

    Raises :class:`SummaryError` when runs of one key hold scores of different rows.
    """
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.comparison_key, []).append(entry)
    boards = [_board(key, members, alpha) for key, members in groups.items()]
    return sorted(boards, key=lambda board: (board.dataset, board.comparison_key))


def _board(key: str, members: list[Entry], alpha: float) -> Board:
    """Tie-aware ranks of the entries with scores; the others listed after them, unranked."""
    from kyai.stats import StatsError, ranks, score_interval

    scored = [entry for entry in members if entry.scores is not None]
    _check_same_rows(key, scored)
    try:
        found: list[int | None] = list(ranks([e.scores or () for e in scored], alpha=alpha))
        reason = None
    except StatsError as exc:
        found, reason = [None] * len(scored), f"no rank: {exc}"
    places = []
    for entry, position in zip(scored, found, strict=True):
        try:
            interval: Interval | None = score_interval(entry.scores or ())
        except StatsError:
            interval = entry.stored_interval
        places.append(Place(entry, position, interval, reason))
    places.sort(key=lambda place: (place.rank or math.inf, rank_key(place.entry)))
    unscored = sorted((e for e in members if e.scores is None), key=rank_key)
    places += [
        Place(e, None, e.stored_interval, e.scores_unavailable or NO_SCORES) for e in unscored
    ]
    front = pareto_front([place.entry for place in places])
    places = [replace(place, pareto=flag) for place, flag in zip(places, front, strict=True)]
    return Board(key, members[0].dataset, tuple(places), alpha)


def pareto_front(entries: Sequence[Entry]) -> list[bool | None]:
    """Which entries are on the score / TTFT p50 Pareto front of their comparison key.

    An entry is on the front when no other entry of the key has a higher-or-equal score and a
    lower-or-equal TTFT p50 with one of the two strict (it is not dominated). An entry whose
    TTFT p50 is unknown (not streamed, or summaries written before serving figures) is None;
    it neither is on the front nor dominates.
    """
    known = [entry for entry in entries if entry.ttft_p50_ms is not None]

    def dominated(entry: Entry) -> bool:
        assert entry.ttft_p50_ms is not None
        for other in known:
            assert other.ttft_p50_ms is not None
            better_or_equal = (
                other.avg_score >= entry.avg_score and other.ttft_p50_ms <= entry.ttft_p50_ms
            )
            strict = other.avg_score > entry.avg_score or other.ttft_p50_ms < entry.ttft_p50_ms
            if better_or_equal and strict:
                return True
        return False

    return [None if entry.ttft_p50_ms is None else not dominated(entry) for entry in entries]


def _check_same_rows(key: str, entries: Sequence[Entry]) -> None:
    """Refuse to rank runs of one key whose per-question scores are not of the same rows."""
    if not entries:
        return
    first = entries[0]
    for other in entries[1:]:
        assert first.scores is not None and other.scores is not None
        if len(first.scores) != len(other.scores):
            raise SummaryError(
                f"comparison key {key}: {first.source or first.run} holds "
                f"{len(first.scores)} per-question scores and {other.source or other.run} "
                f"{len(other.scores)}; runs of one key must answer the same rows, so they are "
                "not ranked"
            )
    with_sha = [entry for entry in entries if entry.dataset_sha256 is not None]
    for other in with_sha[1:]:
        if other.dataset_sha256 != with_sha[0].dataset_sha256:
            raise SummaryError(
                f"comparison key {key}: the dataset sha256 is {with_sha[0].dataset_sha256} in "
                f"{with_sha[0].source} and {other.dataset_sha256} in {other.source}; runs of one "
                "key must answer the same rows, so they are not ranked"
            )
    with_ids = [entry for entry in entries if entry.row_ids is not None]
    for other in with_ids[1:]:
        one, two = with_ids[0].row_ids or (), other.row_ids or ()
        for index, (a, b) in enumerate(zip(one, two, strict=True)):
            if a != b:
                raise SummaryError(
                    f"comparison key {key}: row {index} is row_id {a!r} in "
                    f"{with_ids[0].source} and {b!r} in {other.source}; runs of one key must "
                    "answer the same rows, so they are not ranked"
                )


def entry_from_run(
    run: Mapping[str, Any], engine_args_sets: Mapping[tuple[str, str], str] | None = None
) -> Entry | None:
    """A succeeded EvaluationRun as an entry; None for a run that has no score (yet).

    Its EngineArgsSet is the one its status recorded when it started
    (``status.engineArgsSet``, with ``engineArgsHash``); for a run written before the status
    held it, a sweep cell's annotation ``kyai.io/sweep-engine-args-set``, else the set its
    Workload names now (``engine_args_sets``, by (namespace, Workload)).
    """
    from pydantic import ValidationError

    from kyai.api import EvaluationRunStatus, ScoresError

    meta = run.get("metadata") or {}
    try:
        status = EvaluationRunStatus.model_validate(run.get("status") or {})
    except ValidationError:
        return None
    if status.phase != "Succeeded" or status.avg_score is None or not status.comparison_key:
        return None
    namespace = str(meta.get("namespace", ""))
    # What the run scored: a re-judge names no Workload, its status names its source's.
    named = ((run.get("spec") or {}).get("workloadRef") or {}).get("name", "")
    workload = status.workload or str(named)
    where = f"EvaluationRun {namespace}/{meta.get('name', '')}"
    scores: tuple[float, ...] | None = None
    unavailable = None
    try:
        scores = status.question_scores(where=where)
    except ScoresError as exc:
        unavailable = str(exc)
    return Entry(
        namespace=namespace,
        run=str(meta.get("name", "")),
        workload=workload,
        model=status.model or "",
        framework=status.framework or "",
        engine_args_set=_engine_args_set(run, status, engine_args_sets or {}, workload),
        dataset=status.dataset or "",
        comparison_key=status.comparison_key,
        avg_score=float(status.avg_score),
        avg_latency_ms=status.avg_latency_ms,
        error_count=status.error_count or 0,
        questions=status.questions,
        completed_at=status.completed_at,
        ttft_p50_ms=_status_serving(status)[0],
        output_tokens_per_second=_status_serving(status)[1],
        engine_args_hash=status.engine_args_hash,
        scores=scores,
        stored_interval=_status_interval(status, where),
        source=where,
        dataset_sha256=status.dataset_sha256,
        scores_unavailable=unavailable,
    )


def _engine_args_set(
    run: Mapping[str, Any],
    status: EvaluationRunStatus,
    by_workload: Mapping[tuple[str, str], str],
    workload: str,
) -> str:
    """The run's EngineArgsSet: its status's, else its sweep cell's, else its Workload's now."""
    from kyai.constants import ANNOTATION_SWEEP_ENGINE_ARGS_SET

    if status.engine_args_set:
        return status.engine_args_set
    meta = run.get("metadata") or {}
    annotated = (meta.get("annotations") or {}).get(ANNOTATION_SWEEP_ENGINE_ARGS_SET)
    if annotated:
        return str(annotated)
    return by_workload.get((str(meta.get("namespace", "")), workload), "")


def _status_interval(status: EvaluationRunStatus, where: str) -> Interval | None:
    """The interval a run's status holds (``status.avgScoreInterval``; None without one)."""
    from kyai.stats import Interval, StatsError

    value = status.avg_score_interval
    if value is None:
        return None
    try:
        return Interval.from_mapping(value.model_dump(), where=f"{where}: status.avgScoreInterval")
    except StatsError:
        return None


def _status_serving(status: EvaluationRunStatus) -> tuple[float | None, float | None]:
    """TTFT p50 and output tokens/s of a run's ``status.serving`` (None when absent)."""
    serving = status.serving
    if serving is None:
        return None, None
    return serving.ttft_p50_ms, serving.output_tokens_per_second
