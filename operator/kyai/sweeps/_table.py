"""The sweep's table: one row per cell, ranked within its Snapshot and comparison key.

Figures come from each run's status through the leaderboard's reader
(:func:`kyai.ranking.entry_from_run`), so a sweep ranks its runs exactly as ``kyai
leaderboard`` does:

- ``interval``: the run's ``status.avgScoreInterval`` when it has one, else
  :func:`kyai.stats.score_interval` of ``status.scores`` (Wilson for 0/1 scores, else t; 95 %);
- ``rank``: :func:`kyai.stats.ranks` over the succeeded cells of the same Snapshot and
  comparison key that have per-question scores (paired tests, Holm over all pairs at 0.05;
  ``1 +`` the cells significantly better, so cells no test separates share a rank), computed
  from remembered pairwise comparisons (:mod:`kyai.sweeps._memo`: the same figures);
- with ``spec.baseline``: ``delta``, ``deltaInterval``, ``pairedQuestions`` (n), ``pValue``,
  ``test`` and ``nonInferior`` from :func:`kyai.stats.compare` (baseline cell's scores, the
  row's scores, the margin: the Bonett–Price interval for 0/1 scores, else t), against the
  baseline cell of the same Snapshot and comparison key; a ``nonInferior`` False says why
  (``nonInferiorReason``: the interval's low end against the margin, in points, on n
  questions); ``delta`` is the difference of the avgScores when per-question scores are
  missing (then no p-value); continuous scores whose differences are all equal give no
  interval: ``estimable`` False, no ``pValue`` or ``nonInferior``, the note says why;
- ``pareto``: :func:`kyai.ranking.pareto_front` of the same group (score up, TTFT p50
  down);
- ``best``: once every cell ended, the (workload, engine-args set) pairs ranked 1 on every
  Snapshot of the sweep.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kyai.api.evaluationsweep import (
    EvaluationSweepSpec,
    SweepChoice,
    SweepInterval,
    SweepPareto,
    SweepRow,
)
from kyai.ranking import NO_SCORES, Entry, entry_from_run, pareto_front
from kyai.stats import Interval, StatsError
from kyai.sweeps._cells import Cell, Expansion
from kyai.sweeps._memo import comparison, interval, tie_aware_ranks
from kyai.sweeps._schedule import CellState, run_phase

#: The phase of a row whose cell has no run yet.
QUEUED = "Queued"


@dataclass(frozen=True)
class _Row:
    """A row being built: the cell, its index, its run's entry (if succeeded)."""

    index: int
    state: CellState
    entry: Entry | None

    @property
    def cell(self) -> Cell:
        return self.state.cell


@dataclass(frozen=True)
class Table:
    """The rows in table order, the best pairs and the Pareto fronts."""

    rows: tuple[SweepRow, ...]
    best: tuple[SweepChoice, ...] | None
    pareto: tuple[SweepPareto, ...]


def _interval(entry: Entry) -> tuple[Interval | None, str | None]:
    if entry.stored_interval is not None:
        return entry.stored_interval, None
    if entry.scores is None:
        return None, NO_SCORES
    try:
        return interval(entry.scores), None
    except StatsError as exc:
        return None, f"no interval: {exc}"


def _ranks(vectors: Sequence[Sequence[float]]) -> tuple[int, ...] | str:
    """The tie-aware ranks of one group, or why there is none."""
    try:
        return tuple(tie_aware_ranks(vectors))
    except StatsError as exc:
        return f"no rank: {exc}"


def _notes(*parts: str | None) -> str | None:
    kept = [part for part in parts if part]
    return "; ".join(kept) if kept else None


#: A run's Ready reasons while Kueue holds it or its Workload's engine (kyai.controllers).
_QUEUE_REASONS = ("WaitingForQuota", "Preempted")


def _queue_note(run: Mapping[str, object] | None) -> str | None:
    """``WaitingForQuota: <the run's message>`` for a cell whose run waits for Kueue."""
    status = (run or {}).get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else ():
        if condition.get("type") == "Ready" and condition.get("reason") in _QUEUE_REASONS:
            return f"{condition['reason']}: {condition.get('message') or ''}".rstrip(": ")
    return None


#: A failed run's note keeps this many characters of its message (a status holds 64 rows).
_FAILURE_NOTE_CHARS = 500


def _failure_note(run: Mapping[str, object] | None) -> str | None:
    """``failed: <Reason>: <message>`` for a cell whose run Failed (its Ready condition's).

    The run's own words, so the table says why a cell failed without opening the run; a
    run whose Ready condition is missing gives its ``status.message``.
    """
    if run is None or run_phase(run) != "Failed":
        return None
    status = run.get("status")
    status = status if isinstance(status, Mapping) else {}
    reason, message = None, status.get("message")
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            reason, message = condition.get("reason"), condition.get("message") or message
    said = ": ".join(str(part) for part in (reason, message) if part) or "no reason given"
    if len(said) > _FAILURE_NOTE_CHARS:
        said = said[: _FAILURE_NOTE_CHARS - 1] + "…"
    return f"failed: {said}"


def _base_row(row: _Row) -> SweepRow:
    """The row's own figures (no rank, baseline or Pareto yet)."""
    state, entry, cell = row.state, row.entry, row.cell
    run = state.run
    phase = QUEUED if run is None else (run_phase(run) or "Pending")
    figures: dict[str, object] = {}
    note = None
    if entry is not None:
        bounds, note = _interval(entry)
        figures = {
            "avg_score": entry.avg_score,
            "comparison_key": entry.comparison_key,
            "ttft_p50_ms": entry.ttft_p50_ms,
            "output_tokens_per_second": entry.output_tokens_per_second,
            "engine_args_hash": entry.engine_args_hash,
            "interval": None
            if bounds is None
            else SweepInterval(
                low=bounds.low, high=bounds.high, method=bounds.method, confidence=bounds.confidence
            ),
        }
    return SweepRow.model_validate(
        {
            "cell": cell.hash,
            "workload": cell.workload,
            "engine_args_set": cell.engine_args_set,
            "snapshot": cell.snapshot,
            "run": None if run is None else str((run.get("metadata") or {}).get("name", "")),
            "phase": phase,
            "note": _notes(cell.note, _failure_note(run), note, _queue_note(run)),
            **figures,
        }
    )


def _groups(rows: Sequence[_Row]) -> dict[tuple[str, str], list[_Row]]:
    """Succeeded rows by (snapshot, comparison key)."""
    groups: dict[tuple[str, str], list[_Row]] = {}
    for row in rows:
        if row.entry is not None:
            groups.setdefault((row.cell.snapshot, row.entry.comparison_key), []).append(row)
    return groups


def _rank_group(members: list[_Row], out: dict[int, SweepRow]) -> None:
    """Ranks and Pareto flags of one group, into ``out`` (by row index)."""
    scored = [row for row in members if row.entry is not None and row.entry.scores is not None]
    found = _ranks([row.entry.scores or () for row in scored if row.entry is not None])
    for position, row in enumerate(scored):
        current = out[row.index]
        if isinstance(found, str):
            out[row.index] = current.model_copy(update={"note": _notes(current.note, found)})
        else:
            out[row.index] = current.model_copy(update={"rank": found[position]})
    for row in members:
        if row.entry is not None and row.entry.scores is None:
            current = out[row.index]
            if NO_SCORES not in (current.note or ""):
                note = _notes(current.note, f"no rank: {NO_SCORES}")
                out[row.index] = current.model_copy(update={"note": note})
    flags = pareto_front([row.entry for row in members if row.entry is not None])
    for row, flag in zip(members, flags, strict=True):
        out[row.index] = out[row.index].model_copy(update={"pareto": flag})


def _baseline_of(
    spec: EvaluationSweepSpec, cell: Cell, cells: Mapping[tuple[str, str | None, str], Cell]
) -> Cell | None:
    """The baseline cell of ``cell``'s Snapshot (see :class:`SweepBaseline`)."""
    baseline = spec.baseline
    if baseline is None:
        return None
    workload = baseline.workload or cell.workload
    if baseline.engine_args_set is not None:
        return cells.get((workload, baseline.engine_args_set, cell.snapshot))
    on_snapshot = [c for key, c in cells.items() if key[0] == workload and key[2] == cell.snapshot]
    if len(on_snapshot) == 1:
        return on_snapshot[0]
    return cells.get((workload, cell.engine_args_set, cell.snapshot))


def non_inferior_reason(low: float, margin: float, n: int) -> str:
    """Why a cell is not non-inferior: its difference's interval's low end is not above -margin.

    In points (score × 100), as ``kyai compare`` says them: ``interval low end -55.4 points,
    not above -5.0 (the margin), on 3 paired questions``.
    """
    return (
        f"interval low end {low * 100:+.1f} points, not above -{margin * 100:.1f} "
        f"(the margin), on {n} paired questions"
    )


def _compare_row(
    spec: EvaluationSweepSpec, row: _Row, base: _Row | None, current: SweepRow
) -> SweepRow:
    """The row with its delta, p-value and non-inferiority against ``base``."""
    if base is not None and base.index == row.index:
        return current.model_copy(update={"baseline": True})
    entry = row.entry
    if entry is None:
        return current
    if base is None:
        return current.model_copy(update={"note": _notes(current.note, "no baseline cell")})
    reference = base.entry
    if reference is None:
        return current.model_copy(
            update={"note": _notes(current.note, "the baseline cell has no score (yet)")}
        )
    if reference.comparison_key != entry.comparison_key:
        note = "the baseline cell has another comparison key: no delta"
        return current.model_copy(update={"note": _notes(current.note, note)})
    update: dict[str, object] = {"delta": entry.avg_score - reference.avg_score}
    if entry.scores is not None and reference.scores is not None:
        try:
            result = comparison(reference.scores, entry.scores, margin=spec.non_inferiority_margin)
        except StatsError as exc:
            update["note"] = _notes(current.note, f"no paired test: {exc}")
        else:
            update |= {
                "delta": result.mean_difference,
                "paired_questions": result.n,
                "p_value": result.p_value,
                "test": result.test,
                "non_inferior": result.non_inferior,
            }
            if result.interval is not None:
                update["delta_interval"] = SweepInterval(
                    low=result.interval.low, high=result.interval.high,
                    method=result.interval_method, confidence=result.confidence,
                )  # fmt: skip
                if result.non_inferior is False and spec.non_inferiority_margin is not None:
                    update["non_inferior_reason"] = non_inferior_reason(
                        result.interval.low, spec.non_inferiority_margin, result.n
                    )
            if result.not_estimable is not None:
                note = f"no verdict against the baseline: {result.not_estimable}"
                update |= {"estimable": False, "note": _notes(current.note, note)}
    else:
        update["note"] = _notes(current.note, f"no paired test: {NO_SCORES}")
    return current.model_copy(update=update)


def _sort_key(snapshots: Mapping[str, int], row: _Row, out: SweepRow) -> tuple[float, ...]:
    latency = row.entry.avg_latency_ms if row.entry is not None else None
    return (
        snapshots.get(row.cell.snapshot, len(snapshots)),
        math.inf if out.rank is None else out.rank,
        math.inf if out.avg_score is None else -out.avg_score,
        math.inf if latency is None else latency,
        row.index,
    )


def _best(
    expansion: Expansion, rows: Sequence[SweepRow], choices: Sequence[tuple[str, str | None]]
) -> tuple[SweepChoice, ...]:
    """The pairs ranked 1 on every Snapshot of the sweep."""
    first = {(row.workload, row.engine_args_set, row.snapshot) for row in rows if row.rank == 1}
    return tuple(
        SweepChoice(workload=workload, engine_args_set=engine_args_set)
        for workload, engine_args_set in choices
        if expansion.snapshots
        and all((workload, engine_args_set, snap) in first for snap in expansion.snapshots)
    )


def _fronts(
    groups: Mapping[tuple[str, str], list[_Row]], out: Mapping[int, SweepRow]
) -> tuple[SweepPareto, ...]:
    fronts = []
    for (snapshot, key), members in groups.items():
        flags = [out[row.index].pareto for row in members]
        if all(flag is None for flag in flags):
            continue
        front = [
            SweepChoice(workload=row.cell.workload, engine_args_set=row.cell.engine_args_set)
            for row, flag in zip(members, flags, strict=True)
            if flag
        ]
        fronts.append(SweepPareto(snapshot=snapshot, comparison_key=key, front=front))
    return tuple(fronts)


def build_table(
    spec: EvaluationSweepSpec,
    expansion: Expansion,
    states: Sequence[CellState],
    *,
    final: bool,
) -> Table:
    """The table of the cells' runs (``states``: :func:`kyai.sweeps.cell_states`).

    ``final``: every cell ended, so ``best`` is decided (None before).
    """
    rows = [
        _Row(index, state, entry_from_run(state.run) if state.state == "succeeded" and
             state.run is not None else None)
        for index, state in enumerate(states)
    ]  # fmt: skip
    out = {row.index: _base_row(row) for row in rows}
    groups = _groups(rows)
    for members in groups.values():
        _rank_group(members, out)
    if spec.baseline is not None:
        cells = {(r.cell.workload, r.cell.engine_args_set, r.cell.snapshot): r.cell for r in rows}
        by_hash = {row.cell.hash: row for row in rows}
        for row in rows:
            base = _baseline_of(spec, row.cell, cells)
            out[row.index] = _compare_row(
                spec, row, None if base is None else by_hash[base.hash], out[row.index]
            )
    snapshots = {name: index for index, name in enumerate(expansion.snapshots)}
    ordered = sorted(rows, key=lambda row: _sort_key(snapshots, row, out[row.index]))
    table_rows = tuple(out[row.index] for row in ordered)
    choices = list(dict.fromkeys(row.cell.choice for row in rows))
    best = _best(expansion, table_rows, choices) if final else None
    return Table(rows=table_rows, best=best, pareto=_fronts(groups, out))
