"""The sweep's status: cell counts, phase, the table (cut at 64 rows), best and Pareto.

Phases (the choice the issue leaves open): ``Running`` while a cell's run is unfinished;
``Pending`` while no run is unfinished but a cell still waits (for a place, an object the
spec names, or a valid spec); once every cell ended, ``Succeeded`` when all succeeded and
``Failed`` when at least one failed. A Failed sweep keeps the table, ranks, ``best`` and
``pareto`` of the cells that succeeded: the phase says the matrix is incomplete, kstatus
tools and Argo CD see one vocabulary, and deleting a failed cell's run runs it again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kyai.api.evaluationsweep import (
    MAX_NOTES,
    MAX_STATUS_ROWS,
    EvaluationSweepPhase,
    EvaluationSweepSpec,
    EvaluationSweepStatus,
    SweepCellCounts,
    SweepChoice,
)
from kyai.constants import ANNOTATION_SWEEP_RUN_HASH
from kyai.sweeps._cells import Expansion
from kyai.sweeps._children import run_hash, table_config_map, table_config_map_name
from kyai.sweeps._schedule import CellState, cell_states
from kyai.sweeps._table import build_table

# Ready reasons of the sweep (besides the Problem reasons of kyai.sweeps._cells).
SUCCEEDED = "Succeeded"
CELLS_FAILED = "CellsFailed"
CELLS_RUNNING = "CellsRunning"
CELLS_PENDING = "CellsPending"

#: ``bestNames`` (a printer column) lists names up to this width, then how many more.
BEST_NAMES_WIDTH = 60


@dataclass(frozen=True)
class SweepReport:
    """What the controller writes: status fields, the Ready condition, the table's ConfigMap."""

    status: EvaluationSweepStatus
    """phase, message, cells, table, tableRows, tableConfigMap, best, bestNames, pareto,
    notes (conditions and observedGeneration are the controller's)."""
    ready: bool
    """Ready=True: the sweep Succeeded."""
    reason: str
    """The Ready condition's reason (and Reconciling's/Stalled's)."""
    message: str
    """The Ready condition's message (also status.message)."""
    stalled: bool
    """kstatus Stalled now: the sweep Failed or its spec is invalid. A missing object is
    not Stalled here: the controller applies its grace period (its reason is one of the
    missing-reference reasons)."""
    config_map: dict[str, Any] | None
    """The ConfigMap to create or replace with the full table (more than 64 rows); None:
    none is needed (delete ``table_config_map_name(sweep)`` if it exists)."""


def counts(states: Sequence[CellState], runs_hash: str | None = None) -> SweepCellCounts:
    """How many cells are in each state; ``outdated``: runs made from another run hash."""
    tally = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    outdated = 0
    for state in states:
        tally[state.state] += 1
        if state.run is not None and runs_hash is not None:
            annotations = (state.run.get("metadata") or {}).get("annotations") or {}
            recorded = annotations.get(ANNOTATION_SWEEP_RUN_HASH)
            outdated += recorded is not None and recorded != runs_hash
    return SweepCellCounts(total=len(states), outdated=outdated, **tally)


def _phase(cells: SweepCellCounts, expansion: Expansion) -> EvaluationSweepPhase:
    if cells.running:
        return "Running"
    if cells.pending or expansion.problems or not cells.total:
        return "Pending"
    return "Failed" if cells.failed else "Succeeded"


def _summary(cells: SweepCellCounts) -> str:
    text = f"{cells.succeeded}/{cells.total} cells succeeded"
    for name in ("failed", "running", "pending"):
        value = getattr(cells, name)
        if value:
            text += f", {value} {name}"
    return text


def _choice_name(choice: SweepChoice) -> str:
    return choice.workload + (f"/{choice.engine_args_set}" if choice.engine_args_set else "")


def _best_names(best: Sequence[SweepChoice] | None) -> str | None:
    """``best`` as one short line: names while they fit in 60 characters, then ``+N more``."""
    if best is None:
        return None
    if not best:
        return "(none)"
    names = [_choice_name(choice) for choice in best]
    shown: list[str] = []
    for name in names:
        if shown and len(", ".join([*shown, name])) > BEST_NAMES_WIDTH:
            return ", ".join(shown) + f", +{len(names) - len(shown)} more"
        shown.append(name)
    return ", ".join(shown)


def _ready(
    phase: str, cells: SweepCellCounts, expansion: Expansion, best: str | None, waiting: str
) -> tuple[bool, str, str, bool]:
    """(ready, reason, message, stalled)."""
    summary = _summary(cells)
    invalid = [problem for problem in expansion.problems if not problem.missing]
    missing = [problem for problem in expansion.problems if problem.missing]
    if invalid:
        return False, invalid[0].reason, f"{invalid[0].message} ({summary})", True
    if phase == "Succeeded":
        return True, SUCCEEDED, f"{summary}; best: {best}", False
    if phase == "Failed":
        return False, CELLS_FAILED, f"{summary}; best of the others: {best}", True
    if missing and not cells.running:
        return False, missing[0].reason, f"{missing[0].message} ({summary})", False
    reason = CELLS_RUNNING if phase == "Running" else CELLS_PENDING
    return False, reason, summary + (f"; {waiting}" if waiting else ""), False


def _notes(expansion: Expansion) -> list[str] | None:
    lines = [problem.message for problem in expansion.problems] + list(expansion.notes)
    if len(lines) > MAX_NOTES:
        lines = [*lines[: MAX_NOTES - 1], f"... and {len(lines) - MAX_NOTES + 1} more"]
    return lines or None


def sweep_status(
    sweep: Mapping[str, Any],
    spec: EvaluationSweepSpec,
    expansion: Expansion,
    runs: Sequence[Mapping[str, Any]],
    *,
    waiting: Sequence[str] = (),
) -> SweepReport:
    """The status of the sweep ``sweep`` from its cells and its runs (as listed).

    ``waiting``: :attr:`kyai.sweeps.Plan.waiting`, said in the message while cells wait.
    """
    states = cell_states(sweep, expansion, runs)
    cells = counts(states, run_hash(spec))
    phase = _phase(cells, expansion)
    table = build_table(spec, expansion, states, final=phase in ("Succeeded", "Failed"))
    best_names = _best_names(table.best)
    ready, reason, message, stalled = _ready(
        phase, cells, expansion, best_names, "; ".join(waiting)
    )
    rows = list(table.rows)
    config_map = None
    status = EvaluationSweepStatus(
        phase=phase,
        message=message,
        cells=cells,
        table=rows[:MAX_STATUS_ROWS],
        table_rows=len(rows),
        table_config_map=None,
        best=None if table.best is None else list(table.best),
        best_names=best_names,
        pareto=list(table.pareto),
        notes=_notes(expansion),
    )
    if len(rows) > MAX_STATUS_ROWS:
        name = str((sweep.get("metadata") or {}).get("name", ""))
        status.table_config_map = table_config_map_name(name)
        config_map = table_config_map(sweep, rows)
    return SweepReport(status, ready, reason, message, stalled, config_map)
