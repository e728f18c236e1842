"""Which cells start now, which derived Workloads come and go, which runs go.

A pure decision from the cells (:func:`kyai.sweeps.expand`) and what the sweep owns in the
cluster (its runs and derived Workloads, as listed): the controller carries it out and asks
again when a run or Workload of the sweep changes. Deciding again on the same input gives
the same answer, and every name is deterministic, so a restarted operator neither
duplicates a run nor loses one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from kyai.api import EvaluationRunStatus
from kyai.api.evaluationsweep import EvaluationSweepSpec
from kyai.constants import (
    ANNOTATION_SWEEP_ENGINE_ARGS_SET,
    ANNOTATION_SWEEP_SNAPSHOT,
    ANNOTATION_SWEEP_WORKLOAD,
    LABEL_SWEEP_CELL,
    LABEL_SWEEP_VARIANT,
)
from kyai.sweeps._cells import Cell, Expansion, run_name
from kyai.sweeps._children import cell_run, derived_workload, owned_by

CellStateName = Literal["pending", "running", "succeeded", "failed"]

#: The run phases that end a cell.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class CellState:
    """A cell and its run (None while the cell is pending)."""

    cell: Cell
    run: Mapping[str, Any] | None
    state: CellStateName


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def run_phase(run: Mapping[str, Any]) -> str | None:
    """The run's status.phase (None: not reported yet, or an unreadable status)."""
    try:
        return EvaluationRunStatus.model_validate(run.get("status") or {}).phase
    except ValidationError:
        return None


def finished(run: Mapping[str, Any]) -> bool:
    """Whether the run Succeeded or Failed."""
    return run_phase(run) in FINISHED_PHASES


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def _label(obj: Mapping[str, Any], key: str) -> str | None:
    value = (_meta(obj).get("labels") or {}).get(key)
    return None if value is None else str(value)


def cell_states(
    sweep: Mapping[str, Any], expansion: Expansion, runs: Sequence[Mapping[str, Any]]
) -> list[CellState]:
    """Each cell with its run: the sweep's own run labelled with the cell's hash.

    Runs the sweep does not own (another object's, or a deleted sweep's of the same name)
    are not the cell's. Should two runs of the sweep carry one cell's label, the one with
    the cell's name is taken.
    """
    by_cell: dict[str, Mapping[str, Any]] = {}
    name = _name(sweep)
    wanted = {cell.hash: run_name(name, cell) for cell in expansion.cells}
    for run in runs:
        label = _label(run, LABEL_SWEEP_CELL)
        if label is None or not owned_by(run, sweep):
            continue
        if label not in by_cell or _name(run) == wanted.get(label):
            by_cell[label] = run
    states = []
    for cell in expansion.cells:
        found = by_cell.get(cell.hash)
        states.append(CellState(cell, found, "pending" if found is None else _state(found)))
    return states


def _state(run: Mapping[str, Any]) -> CellStateName:
    phase = run_phase(run)
    if phase == "Succeeded":
        return "succeeded"
    return "failed" if phase == "Failed" else "running"


@dataclass(frozen=True)
class Plan:
    """What to do now. Create the Workloads before the runs (a run waits for its Workload)."""

    create_workloads: tuple[dict[str, Any], ...] = ()
    """Derived Workloads of cells starting now (or of running cells that lost theirs)."""
    create_runs: tuple[dict[str, Any], ...] = ()
    """The runs of the cells starting now, in cell order."""
    delete_runs: tuple[str, ...] = ()
    """Runs of cells no longer in the sweep (and duplicates)."""
    delete_workloads: tuple[str, ...] = ()
    """Derived Workloads whose cells all ended (unless keepWorkloads) or left the sweep."""
    unfinished: int = 0
    """Places taken before this plan: unfinished runs and derived Workloads being deleted."""
    waiting: tuple[str, ...] = ()
    """Why pending cells that had a place did not start (one line each)."""


def _protected(obj: Mapping[str, Any], expansion: Expansion) -> bool:
    """Whether ``obj`` belongs to a cell of an object the spec names that is missing."""
    annotations = _meta(obj).get("annotations") or {}
    named = (
        ("Workload", annotations.get(ANNOTATION_SWEEP_WORKLOAD)),
        ("Snapshot", annotations.get(ANNOTATION_SWEEP_SNAPSHOT)),
        ("EngineArgsSet", annotations.get(ANNOTATION_SWEEP_ENGINE_ARGS_SET)),
    )
    return any((kind, name) in expansion.missing for kind, name in named if name)


def _workload_of(run: Mapping[str, Any]) -> str:
    return str(((run.get("spec") or {}).get("workloadRef") or {}).get("name", ""))


def plan(
    sweep: Mapping[str, Any],
    spec: EvaluationSweepSpec,
    expansion: Expansion,
    *,
    runs: Sequence[Mapping[str, Any]],
    workloads: Sequence[Mapping[str, Any]],
) -> Plan:
    """The next steps of the sweep ``sweep`` (the object as read: name, namespace, uid).

    ``runs`` are the EvaluationRuns labelled ``kyai.io/sweep=<name>``; ``workloads`` the
    Workloads so labelled (the derived ones). Objects the sweep does not own are ignored,
    except that a run holding a cell's name keeps that cell waiting.

    Places: ``spec.parallelism`` minus the unfinished runs (the sweep's, whatever their
    cell) minus the derived Workloads being deleted (or deleted by this plan) that no
    unfinished run uses: their pods hold GPUs until they are gone. Pending cells start in
    cell order, those whose derived Workload already exists first.
    With an invalid spec (:attr:`Expansion.invalid`) nothing starts and nothing is deleted.
    """
    own_runs = [run for run in runs if owned_by(run, sweep)]
    own_workloads = {_name(w): w for w in workloads if owned_by(w, sweep)}
    unfinished_runs = [run for run in own_runs if not finished(run)]
    in_use = {_workload_of(run) for run in unfinished_runs}
    states = cell_states(sweep, expansion, runs)
    if expansion.invalid:
        reasons = tuple(p.message for p in expansion.problems if not p.missing)
        return Plan(unfinished=len(unfinished_runs), waiting=reasons)
    delete_runs = _runs_to_delete(expansion, own_runs, states)
    delete_workloads = _workloads_to_delete(spec, expansion, own_workloads, states, in_use)
    terminating = [name for name, w in own_workloads.items() if _deleting(w) and name not in in_use]
    taken = len(unfinished_runs) + len(terminating)
    places = spec.parallelism - taken - len(delete_workloads)
    starting, waiting = _starts(sweep, expansion, states, own_workloads, runs, places)
    create_workloads: dict[str, dict[str, Any]] = {}
    running = [s.cell for s in states if s.state == "running"]
    for cell in [*running, *starting]:
        variant = cell.variant
        if variant is None or variant.name in own_workloads or variant.name in create_workloads:
            continue
        create_workloads[variant.name] = derived_workload(
            sweep, variant, expansion.bases[cell.workload]
        )
    return Plan(
        create_workloads=tuple(create_workloads.values()),
        create_runs=tuple(cell_run(sweep, spec, cell) for cell in starting),
        delete_runs=delete_runs,
        delete_workloads=delete_workloads,
        unfinished=taken,
        waiting=waiting,
    )


def _runs_to_delete(
    expansion: Expansion, own_runs: list[Mapping[str, Any]], states: list[CellState]
) -> tuple[str, ...]:
    """Runs of cells that left the sweep (unless an object they name is missing), duplicates.

    A duplicate is a second run of the sweep labelled with a cell that already has its run.
    """
    kept = {_name(state.run) for state in states if state.run is not None}
    cells = {cell.hash for cell in expansion.cells}
    doomed = []
    for run in own_runs:
        if _deleting(run) or _name(run) in kept:
            continue
        if _label(run, LABEL_SWEEP_CELL) in cells or not _protected(run, expansion):
            doomed.append(_name(run))
    return tuple(sorted(doomed))


def _workloads_to_delete(
    spec: EvaluationSweepSpec,
    expansion: Expansion,
    own_workloads: Mapping[str, Mapping[str, Any]],
    states: list[CellState],
    in_use: set[str],
) -> tuple[str, ...]:
    """Derived Workloads no unfinished run uses, that are done with or left the sweep.

    Done: every cell of its variant ended (kept with keepWorkloads). Left: its variant is
    not in the sweep any more (kept while an object it names is missing).
    """
    open_variants = {
        state.cell.variant.hash
        for state in states
        if state.cell.variant is not None and state.state in ("pending", "running")
    }
    variants = {variant.hash for variant in expansion.variants}
    doomed = []
    for name, workload in own_workloads.items():
        if _deleting(workload) or name in in_use:
            continue
        variant = _label(workload, LABEL_SWEEP_VARIANT)
        if variant in variants:
            if variant not in open_variants and not spec.keep_workloads:
                doomed.append(name)
        elif not _protected(workload, expansion):
            doomed.append(name)
    return tuple(sorted(doomed))


def _starts(
    sweep: Mapping[str, Any],
    expansion: Expansion,
    states: list[CellState],
    own_workloads: Mapping[str, Mapping[str, Any]],
    runs: Sequence[Mapping[str, Any]],
    places: int,
) -> tuple[list[Cell], tuple[str, ...]]:
    """The pending cells that start now, and why others with a place did not."""
    foreign = {_name(run) for run in runs if not owned_by(run, sweep)}
    name = _name(sweep)
    pending = [state.cell for state in states if state.state == "pending"]
    # A derived Workload already up serves its next cell before another one is made.
    pending.sort(key=lambda cell: cell.variant is None or cell.variant.name not in own_workloads)
    starting: list[Cell] = []
    waiting: list[str] = []
    for cell in pending:
        if len(starting) >= places:
            break
        run = run_name(name, cell)
        variant = cell.variant
        if run in foreign:
            waiting.append(f"the EvaluationRun {run} exists and is not this sweep's")
        elif variant is not None and _deleting(own_workloads.get(variant.name, {})):
            waiting.append(f"the Workload {variant.name} is being deleted")
        else:
            starting.append(cell)
    return starting, tuple(waiting)
