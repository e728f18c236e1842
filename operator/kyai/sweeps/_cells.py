"""The cells of a sweep: its spec and the objects listed from the cluster, expanded.

A cell is one (Workload, EngineArgsSet or none, Snapshot). Its hash covers these three names
only, so a change elsewhere in the spec (``run``, ``parallelism``, ``baseline``, another
Workload added) never changes an existing cell's hash, name or run. The cells come in a
fixed order (each Workload in turn, its sets in turn, each Snapshot), which is the order they
start in: the cells of one derived Workload run one after the other, so it lives no longer
than they need it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kyai.api.evaluationsweep import MAX_CELLS, EvaluationSweepSpec, LabelSelector
from kyai.builders import LABEL_NAME_MAX, child_name, spec_hash
from kyai.constants import LABEL_SWEEP
from kyai.sweeps._selectors import labels_of, matches

# Reasons (CamelCase; the same words as the other kinds' conditions where they mean the same).
WORKLOAD_NOT_FOUND = "WorkloadNotFound"
SNAPSHOT_NOT_FOUND = "SnapshotNotFound"
ENGINE_ARGS_NOT_FOUND = "EngineArgsSetNotFound"
INVALID_SPEC = "InvalidSpec"
NO_CELLS = "NoCells"

#: The note of an endpoint Workload's cells when spec.engineArgsSets is set.
ENDPOINT_NOTE = "endpoint Workload: engine-args sets do not apply (one cell without a set)"


@dataclass(frozen=True)
class Problem:
    """Something in the spec or the cluster that keeps the sweep from running as declared."""

    reason: str
    """A CamelCase reason (the Ready condition's while it lasts)."""
    message: str
    """What is wrong, naming the field or object."""
    missing: bool
    """True: an object the spec names does not exist (yet): its cells wait, its runs are
    kept, the others go on. False: the spec is invalid: nothing new starts and nothing is
    deleted until it changes (kstatus Stalled)."""


@dataclass(frozen=True)
class Variant:
    """A served Workload with one EngineArgsSet: the derived Workload the sweep owns."""

    workload: str
    """The base Workload."""
    engine_args_set: str
    """The EngineArgsSet its derived Workload names."""
    name: str
    """The derived Workload's name (:func:`derived_workload_name`)."""
    hash: str
    """The label kyai.io/sweep-variant: a hash of workload and engine-args set."""


@dataclass(frozen=True)
class Cell:
    """One (Workload, EngineArgsSet or none, Snapshot) of the sweep."""

    workload: str
    """The Workload listed or selected."""
    engine_args_set: str | None
    """The EngineArgsSet, or None (the Workload as it is)."""
    snapshot: str
    """The Snapshot."""
    hash: str
    """:func:`cell_hash` of the three names."""
    candidate: str
    """The Workload the cell's run evaluates: the variant's derived one, else ``workload``."""
    variant: Variant | None = None
    """The derived Workload of a served Workload × EngineArgsSet."""
    note: str | None = None
    """What is special about the cell (an endpoint Workload under engineArgsSets)."""

    @property
    def choice(self) -> tuple[str, str | None]:
        """(workload, engine-args set): what ``best`` and the baseline speak of."""
        return (self.workload, self.engine_args_set)


@dataclass(frozen=True)
class Expansion:
    """The cells of a sweep and what kept others out."""

    cells: tuple[Cell, ...]
    """Every cell, in start order."""
    variants: tuple[Variant, ...]
    """Every derived Workload the cells need."""
    workloads: tuple[str, ...]
    """The Workloads listed or selected that exist, in order."""
    snapshots: tuple[str, ...]
    """The Snapshots listed or selected that exist, in order."""
    problems: tuple[Problem, ...] = ()
    """What keeps the sweep from running as declared."""
    notes: tuple[str, ...] = ()
    """Cells named but not run, and why."""
    bases: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The listed Workload objects by name (what derived Workloads copy)."""
    missing: frozenset[tuple[str, str]] = frozenset()
    """(kind, name) of objects the spec names that do not exist: the runs of their cells are
    kept while they are missing."""

    @property
    def invalid(self) -> bool:
        """Whether a problem of the spec itself stops new cells and deletions."""
        return any(not problem.missing for problem in self.problems)


# The hashes' inputs keep the keys they have had since sweeps began (a changed key would
# change every cell's identity); spelled as keywords, they are no status key (a run's status
# has an ``engineArgsSet`` of its own).


def cell_hash(workload: str, engine_args_set: str | None, snapshot: str) -> str:
    """The cell's identity: 16 hex digits of the hash of the three names (None: no set)."""
    return spec_hash(dict(workload=workload, engineArgsSet=engine_args_set, snapshot=snapshot))


def variant_hash(workload: str, engine_args_set: str) -> str:
    """The derived Workload's identity within its sweep: a hash of the two names."""
    return spec_hash(dict(workload=workload, engineArgsSet=engine_args_set))


def derived_workload_name(sweep: str, workload: str, engine_args_set: str) -> str:
    """``<workload>-<set>-<hash>``, at most 63 characters (the child-name rule).

    The 8-digit hash of (sweep, workload, set) is always there: without it ``qwen-fp8`` × ``kv``
    and ``qwen`` × ``fp8-kv`` would both be ``qwen-fp8-kv``, and two sweeps deriving the same
    pair would fight over one Workload.
    """
    digest = spec_hash(dict(sweep=sweep, workload=workload, engineArgsSet=engine_args_set))
    return child_name(f"{workload}-{engine_args_set}", f"-{digest[:8]}", limit=LABEL_NAME_MAX)


def run_name(sweep: str, cell: Cell) -> str:
    """``<sweep>-<workload>[-<set>]-<snapshot>-<cell hash[:8]>``, at most 63 characters.

    Deterministic, so a restarted operator finds the run it made instead of making another;
    cut with a hash of the whole (the child-name rule) when longer.
    """
    parts = [sweep, cell.workload, cell.engine_args_set, cell.snapshot]
    readable = "-".join(part for part in parts if part)
    return child_name(readable, f"-{cell.hash[:8]}", limit=LABEL_NAME_MAX)


def _by_name(objects: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {str((obj.get("metadata") or {}).get("name", "")): obj for obj in objects}


def _chosen(
    kind: str,
    field_name: str,
    listed: list[str],
    selector: LabelSelector | None,
    found: Mapping[str, Mapping[str, Any]],
    skip: Mapping[str, str],
) -> tuple[list[str], list[Problem], list[str], list[str]]:
    """(names in order, problems, notes, missing names) of the Workloads or Snapshots."""
    names = [name for name in listed if name in found]
    missing = [name for name in listed if name not in found]
    reason = WORKLOAD_NOT_FOUND if kind == "Workload" else SNAPSHOT_NOT_FOUND
    problems = [
        Problem(reason, f"the {kind} {name} (spec.{field_name}) does not exist", True)
        for name in missing
    ]
    notes: list[str] = []
    if selector is not None:
        for name in sorted(found):
            obj = found[name]
            if name in listed or not matches(selector, labels_of(obj)):
                continue
            if LABEL_SWEEP in labels_of(obj):
                continue  # a Workload a sweep derived is never a candidate of its own
            if name in skip:
                notes.append(f"{kind} {name}: selected but {skip[name]}: left out")
                continue
            names.append(name)
        if not names and not missing:
            problems.append(
                Problem(
                    reason, f"spec.{field_name.removesuffix('s')}Selector selects no {kind}", True
                )
            )
    return names, problems, notes, missing


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def expand(
    sweep: str,
    spec: EvaluationSweepSpec,
    *,
    workloads: Sequence[Mapping[str, Any]],
    engine_args_sets: Sequence[Mapping[str, Any]],
    snapshots: Sequence[Mapping[str, Any]],
) -> Expansion:
    """The cells of the sweep ``sweep`` from its spec and the namespace's objects.

    ``workloads``, ``engine_args_sets`` and ``snapshots`` are the namespace's objects as the
    API returns them (all of them, or at least every one named or selected).
    """
    judges = {name for name in _judges(spec) if name is not None}
    chosen_workloads, problems, notes, missing_workloads = _chosen(
        "Workload",
        "workloads",
        spec.workload_names(),
        spec.workload_selector,
        _by_name(workloads),
        {name: "it is the run's judge" for name in judges},
    )
    chosen_snapshots, snapshot_problems, snapshot_notes, missing_snapshots = _chosen(
        "Snapshot", "snapshots", spec.snapshot_names(), spec.snapshot_selector,
        _by_name(snapshots), {},
    )  # fmt: skip
    problems += snapshot_problems
    notes += snapshot_notes
    sets = _by_name(engine_args_sets)
    missing_sets = [name for name in spec.engine_args_set_names() if name not in sets]
    problems += [
        Problem(ENGINE_ARGS_NOT_FOUND, f"the EngineArgsSet {name} (spec.engineArgsSets) does "
                "not exist", True)
        for name in missing_sets
    ]  # fmt: skip
    found = _by_name(workloads)
    cells: list[Cell] = []
    variants: list[Variant] = []
    for name in chosen_workloads:
        choices, variant_notes = _variants(sweep, spec, name, found[name], sets)
        notes += variant_notes
        variants += [variant for _, variant, _ in choices if variant is not None]
        cells += _cells_of(name, choices, chosen_snapshots)
    problems += _spec_problems(
        spec, chosen_workloads, missing_workloads, cells,
        waiting=bool(missing_sets) or not chosen_snapshots,
    )  # fmt: skip
    if len(cells) > MAX_CELLS:
        cells, variants = [], []
    missing = {("Workload", n) for n in missing_workloads}
    missing |= {("Snapshot", n) for n in missing_snapshots}
    missing |= {("EngineArgsSet", n) for n in missing_sets}
    return Expansion(
        cells=tuple(cells),
        variants=tuple(variants),
        workloads=tuple(chosen_workloads),
        snapshots=tuple(chosen_snapshots),
        problems=tuple(problems),
        notes=tuple(notes),
        bases={name: found[name] for name in chosen_workloads},
        missing=frozenset(missing),
    )


def _cells_of(
    workload: str,
    choices: list[tuple[str | None, Variant | None, str | None]],
    snapshots: list[str],
) -> list[Cell]:
    """The cells of one Workload: each of its (set, variant, note) choices × each Snapshot."""
    return [
        Cell(
            workload=workload,
            engine_args_set=engine_args_set,
            snapshot=snapshot,
            hash=cell_hash(workload, engine_args_set, snapshot),
            candidate=variant.name if variant is not None else workload,
            variant=variant,
            note=note,
        )
        for engine_args_set, variant, note in choices
        for snapshot in snapshots
    ]


def _judges(spec: EvaluationSweepSpec) -> list[str | None]:
    """The Workloads serving the run's LLM judges."""
    judges = spec.run.judges or ([spec.run.judge] if spec.run.judge is not None else [])
    return [judge.judge_workload for judge in judges]


def _variants(
    sweep: str,
    spec: EvaluationSweepSpec,
    name: str,
    workload: Mapping[str, Any],
    sets: Mapping[str, Mapping[str, Any]],
) -> tuple[list[tuple[str | None, Variant | None, str | None]], list[str]]:
    """The (set, variant, note) choices of one Workload, and the notes of those left out."""
    listed = spec.engine_args_set_names()
    if not listed:
        return [(None, None, None)], []
    if _spec(workload).get("endpoint") is not None:
        return [(None, None, ENDPOINT_NOTE)], [f"Workload {name}: {ENDPOINT_NOTE}"]
    framework = _spec(workload).get("framework")
    choices: list[tuple[str | None, Variant | None, str | None]] = []
    notes: list[str] = []
    for set_name in listed:
        if set_name not in sets:
            continue  # a problem of its own (EngineArgsSetNotFound)
        set_framework = _spec(sets[set_name]).get("framework")
        if set_framework != framework:
            notes.append(
                f"Workload {name} × EngineArgsSet {set_name}: the set is for {set_framework}, "
                f"the Workload serves {framework}: no cell"
            )
            continue
        variant = Variant(
            workload=name,
            engine_args_set=set_name,
            name=derived_workload_name(sweep, name, set_name),
            hash=variant_hash(name, set_name),
        )
        choices.append((set_name, variant, None))
    return choices, notes


def _spec_problems(
    spec: EvaluationSweepSpec,
    workloads: list[str],
    missing_workloads: list[str],
    cells: list[Cell],
    *,
    waiting: bool,
) -> list[Problem]:
    """Problems of the spec that only the listed objects reveal."""
    problems: list[Problem] = []
    baseline = spec.baseline.workload if spec.baseline is not None else None
    if baseline is not None and baseline not in workloads and baseline not in missing_workloads:
        problems.append(
            Problem(
                INVALID_SPEC,
                f"spec.baseline.workload: {baseline} is not among the sweep's Workloads "
                f"({', '.join(workloads) or 'none'})",
                False,
            )
        )
    if len(cells) > MAX_CELLS:
        problems.append(
            Problem(
                INVALID_SPEC,
                f"spec: {len(cells)} cells (with the selected objects), more than the "
                f"{MAX_CELLS} a sweep may hold",
                False,
            )
        )
    elif not cells and workloads and not waiting:
        # Workloads, sets and Snapshots exist, but no served Workload shares a set's framework.
        problems.append(
            Problem(
                NO_CELLS,
                "no Workload × EngineArgsSet pair shares a framework: the sweep has no cell",
                False,
            )
        )
    return problems
