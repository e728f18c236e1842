"""EvaluationSweep: one declaration expands to Workloads × EngineArgsSets × Snapshots.

A *cell* is one (Workload, EngineArgsSet or none, Snapshot); each cell is an EvaluationRun the
sweep owns, and the sweep's status ends with the cells' runs ranked in one table. The logic
that expands the spec into cells, schedules them and builds the table is in
:mod:`kyai.sweeps` (pure functions); these are the spec and status models the CRD is
generated from (:func:`evaluation_sweep_crd`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from kyai.api._base import KyaiModel, LocalObjectReference, Name, StatusBase
from kyai.api._crd import PrinterColumn, crd
from kyai.api.evaluationrun import (
    EvaluationRunSpec,
    GenerationSettings,
    JobSettings,
    JudgeSpec,
    PreprocessorSpec,
    Storage,
    Thresholds,
)

#: At most this many Workloads, EngineArgsSets and Snapshots may be listed (CRD maxItems).
MAX_LISTED_WORKLOADS = 100
MAX_LISTED_ENGINE_ARGS_SETS = 20
MAX_LISTED_SNAPSHOTS = 50
#: A sweep expands to at most this many cells (listed and selected objects together).
MAX_CELLS = 1000
#: status.table holds at most this many rows; the full table goes to a ConfigMap.
MAX_STATUS_ROWS = 64
#: status.notes holds at most this many lines.
MAX_NOTES = 20

#: The fields of an EvaluationRun's spec a sweep sets per cell (refused in spec.run).
PER_CELL_FIELDS: dict[str, str] = {
    "workloadRef": "the sweep sets it per cell from spec.workloads / spec.workloadSelector",
    "snapshotRef": "the sweep sets it per cell from spec.snapshots / spec.snapshotSelector",
    "generationFrom": "a sweep's cells generate their own answers (re-judging is not a cell)",
    "lmEval": "a sweep's cells are generated and judged on Snapshots, not lm-eval tasks",
}

#: Why a sweep's run template may not carry its own non-inferiority gate.
NON_INFERIORITY_WHY = (
    "every cell would be compared with one fixed run; a sweep compares its cells with "
    "spec.baseline and spec.nonInferiorityMargin"
)


# -- spec ---------------------------------------------------------------------------------------


class LabelSelectorRequirement(KyaiModel):
    """One requirement of a label selector (as metav1.LabelSelectorRequirement)."""

    key: str = Field(min_length=1, max_length=317)
    """The label key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """In, NotIn (the value is / is not one of values), Exists, DoesNotExist (the key is
    present / absent; values must be empty)."""
    values: list[str] | None = None
    """The values of In and NotIn (at least one); none for Exists and DoesNotExist."""

    @model_validator(mode="after")
    def _values(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"matchExpressions: operator {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"matchExpressions: operator {self.operator} takes no values")
        return self


class LabelSelector(KyaiModel):
    """A label selector (as metav1.LabelSelector): every requirement must hold.

    An empty selector (``{}``) selects every object of the namespace, as in Kubernetes.
    """

    match_labels: dict[str, str] | None = None
    """Labels the object must carry with exactly these values."""
    match_expressions: list[LabelSelectorRequirement] | None = None
    """Further requirements on the object's labels."""


class SweepRunTemplate(KyaiModel):
    """The EvaluationRun spec of every cell, without the fields the sweep sets per cell.

    Each cell's run gets this block as it was written (unset fields stay unset, so the
    EvaluationRun defaults apply) plus ``workloadRef`` and ``snapshotRef``. ``workloadRef``,
    ``snapshotRef``, ``generationFrom`` and ``lmEval`` are refused.
    """

    judge: JudgeSpec | None = None
    """How answers are scored (default: the operator's configured judge)."""
    judges: list[JudgeSpec] | None = None
    """Several judges on the same answers; instead of judge."""
    generation: GenerationSettings = Field(default_factory=GenerationSettings)
    """How the candidate is asked (default: concurrency 16, timeout 600 s, 5 retries)."""
    thresholds: Thresholds | None = None
    """Gates for each run's Passed condition (default: none)."""
    storage: Storage = Field(default_factory=Storage)
    """Where each run's raw outputs live (default: a 1Gi PVC per run)."""
    jobs: JobSettings = Field(default_factory=JobSettings)
    """Settings of each run's Jobs (default: backoffLimit 2, no deadline)."""
    preprocessors: list[PreprocessorSpec] | None = Field(default=None, max_length=1)
    """A Python preprocessor applied to the snapshot's rows before generation (default: none)."""
    embedding_model: str | None = Field(default=None, min_length=1, max_length=253)
    """The embedding model of model_backed graders (default: none)."""

    @model_validator(mode="before")
    @classmethod
    def _no_per_cell_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, why in PER_CELL_FIELDS.items():
                snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
                if key in data or snake in data:
                    raise ValueError(f"spec.run.{key} is not allowed: {why}")
        return data

    @model_validator(mode="after")
    def _as_a_run(self) -> SweepRunTemplate:
        """The EvaluationRun's own rules (judge xor judges, unique judge names, ...)."""
        if self.thresholds is not None and self.thresholds.non_inferiority is not None:
            raise ValueError(
                f"spec.run.thresholds.nonInferiority is not allowed: {NON_INFERIORITY_WHY}"
            )
        try:
            EvaluationRunSpec.model_validate(
                {**self.cell_spec(), "workloadRef": {"name": "w"}, "snapshotRef": {"name": "s"}}
            )
        except ValidationError as exc:
            messages = "; ".join(
                str(error["msg"]).removeprefix("Value error, ").replace("spec.", "spec.run.")
                for error in exc.errors()
            )
            raise ValueError(messages) from None
        return self

    def cell_spec(self) -> dict[str, Any]:
        """The block as written (camelCase, unset fields left out).

        It is a cell run's spec minus its refs, and what the run hash covers.
        """
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


class SweepBaseline(KyaiModel):
    """What each cell is compared with, on the same Snapshot.

    ``workload`` alone: that Workload's cell (with the row's engine-args set when the
    Workload has several cells on the Snapshot). ``engineArgsSet`` alone: the same Workload's
    cell with that set (an engine-args baseline). Both: that one cell.
    """

    workload: Name | None = None
    """The baseline Workload (listed in spec.workloads, or selected by spec.workloadSelector:
    a selected one is checked when the sweep is reconciled)."""
    engine_args_set: Name | None = None
    """The baseline EngineArgsSet (listed in spec.engineArgsSets)."""

    @model_validator(mode="after")
    def _one(self) -> SweepBaseline:
        if self.workload is None and self.engine_args_set is None:
            raise ValueError("spec.baseline needs workload, engineArgsSet or both")
        return self


class EvaluationSweepSpec(KyaiModel):
    """A matrix of evaluations: Workloads × EngineArgsSets × Snapshots, one run per cell."""

    workloads: list[LocalObjectReference] | None = Field(
        default=None, max_length=MAX_LISTED_WORKLOADS
    )
    """The Workloads to compare, by name (default: none; with workloadSelector, both)."""
    workload_selector: LabelSelector | None = None
    """Workloads selected by label, besides those listed (default: none). Workloads a sweep
    derived (label kyai.io/sweep) and the run's judge Workloads are never selected."""
    engine_args_sets: list[LocalObjectReference] | None = Field(
        default=None, max_length=MAX_LISTED_ENGINE_ARGS_SETS
    )
    """EngineArgsSets to cross with every served Workload (default: none: each Workload as it
    is). Each served Workload × each set of its framework is a derived Workload the sweep
    owns; an endpoint Workload keeps one cell without a set."""
    snapshots: list[LocalObjectReference] | None = Field(
        default=None, max_length=MAX_LISTED_SNAPSHOTS
    )
    """The Snapshots (question sets), by name (default: none; with snapshotSelector, both)."""
    snapshot_selector: LabelSelector | None = None
    """Snapshots selected by label, besides those listed (default: none)."""
    run: SweepRunTemplate = Field(default_factory=SweepRunTemplate)
    """The EvaluationRun spec of every cell, without workloadRef, snapshotRef,
    generationFrom and lmEval (default: the operator's judge, default generation settings).
    A change applies to cells started afterwards: runs already made are kept (never re-run;
    status.cells.outdated counts them; delete a cell's run to run it again)."""
    parallelism: int = Field(default=1, ge=1, le=MAX_CELLS)
    """Cells unfinished at once, at most (default 1); a derived Workload being deleted holds a
    place until it is gone, so this bounds GPU use too."""
    baseline: SweepBaseline | None = None
    """What each cell is compared with (paired, on the same Snapshot): table rows gain delta,
    pValue and nonInferior (default: none)."""
    non_inferiority_margin: float | None = Field(default=None, ge=0, le=1)
    """With a baseline, a cell is non-inferior when the low end of the 95 % interval of its
    paired difference from the baseline (Bonett-Price for 0/1 scores, else t) exceeds minus
    this margin (default: none)."""
    keep_workloads: bool = False
    """Keep the derived Workloads after their cells ended (default false: each is deleted
    when its last cell ends, freeing its GPUs)."""

    @model_validator(mode="after")
    def _coherent(self) -> EvaluationSweepSpec:
        if not self.workloads and self.workload_selector is None:
            raise ValueError("spec.workloads or spec.workloadSelector is required")
        if not self.snapshots and self.snapshot_selector is None:
            raise ValueError("spec.snapshots or spec.snapshotSelector is required")
        for field, refs in (
            ("workloads", self.workloads),
            ("engineArgsSets", self.engine_args_sets),
            ("snapshots", self.snapshots),
        ):
            names = [ref.name for ref in refs or ()]
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise ValueError(f"spec.{field}: {', '.join(twice)} listed more than once")
        if self.non_inferiority_margin is not None and self.baseline is None:
            raise ValueError("spec.nonInferiorityMargin needs spec.baseline")
        self._check_baseline()
        self._check_size()
        return self

    def _check_baseline(self) -> None:
        if self.baseline is None:
            return
        workload, engine_args_set = self.baseline.workload, self.baseline.engine_args_set
        listed = [ref.name for ref in self.workloads or ()]
        if workload is not None and self.workload_selector is None and workload not in listed:
            raise ValueError(
                f"spec.baseline.workload: {workload} is not in spec.workloads ({', '.join(listed)})"
            )
        sets = [ref.name for ref in self.engine_args_sets or ()]
        if engine_args_set is not None and engine_args_set not in sets:
            raise ValueError(
                f"spec.baseline.engineArgsSet: {engine_args_set} is not in spec.engineArgsSets"
                + (f" ({', '.join(sets)})" if sets else " (none listed)")
            )

    def _check_size(self) -> None:
        if self.workload_selector is not None or self.snapshot_selector is not None:
            return  # the selected objects are counted when the sweep is reconciled
        cells = (
            len(self.workloads or ())
            * max(1, len(self.engine_args_sets or ()))
            * len(self.snapshots or ())
        )
        if cells > MAX_CELLS:
            raise ValueError(f"spec: {cells} cells, more than the {MAX_CELLS} a sweep may hold")

    def workload_names(self) -> list[str]:
        """The Workloads listed, in order."""
        return [ref.name for ref in self.workloads or ()]

    def engine_args_set_names(self) -> list[str]:
        """The EngineArgsSets listed, in order."""
        return [ref.name for ref in self.engine_args_sets or ()]

    def snapshot_names(self) -> list[str]:
        """The Snapshots listed, in order."""
        return [ref.name for ref in self.snapshots or ()]


# -- status -------------------------------------------------------------------------------------

EvaluationSweepPhase = Literal["Pending", "Running", "Succeeded", "Failed"]


class _StatusItem(KyaiModel):
    """An object inside a status list: unset values are left out, never written as null.

    A merge patch deletes a top-level null, but inside a list a null stays a value, which the
    CRD's typed schema refuses ("must be of type string").
    """

    model_config = KyaiModel.model_config | {"extra": "ignore"}

    @model_serializer(mode="wrap")
    def _without_nulls(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if value is not None}


class SweepCellCounts(KyaiModel):
    """How many cells are in each state."""

    model_config = KyaiModel.model_config | {"extra": "ignore"}

    total: int = 0
    """Cells of the sweep (default 0)."""
    pending: int = 0
    """Cells whose run is not created yet: waiting for a place under spec.parallelism
    (default 0)."""
    running: int = 0
    """Cells whose run is unfinished: Pending, Generating or Judging (default 0)."""
    succeeded: int = 0
    """Cells whose run Succeeded (default 0)."""
    failed: int = 0
    """Cells whose run Failed (default 0)."""
    outdated: int = 0
    """Cells whose run was made from an earlier spec.run (kept, never re-run; delete the run
    to run the cell again) (default 0)."""


class SweepInterval(_StatusItem):
    """The interval of a cell's avgScore, or of its paired difference from the baseline."""

    low: float
    """Its low end."""
    high: float
    """Its high end."""
    method: str | None = None
    """Of an avgScore: wilson (every score 0 or 1) or t; of a difference: bonett-price (every
    score 0 or 1) or t."""
    confidence: float | None = None
    """Its confidence (0.95)."""


class SweepRow(_StatusItem):
    """One cell of the sweep's table."""

    cell: str
    """The cell's hash (label kyai.io/sweep-cell of its run): of workload, engineArgsSet and
    snapshot only."""
    workload: str
    """The Workload listed or selected (a derived Workload's base)."""
    engine_args_set: str | None = None
    """The EngineArgsSet of the cell (none: the Workload as it is)."""
    engine_args_hash: str | None = None
    """The hash of the EngineArgsSet's spec the cell's run was served with (the run's
    status.engineArgsHash; none before the run starts, or without a set)."""
    snapshot: str
    """The Snapshot."""
    run: str | None = None
    """The cell's EvaluationRun (none until the cell starts)."""
    phase: str
    """Queued (no run yet) or the run's phase."""
    avg_score: float | None = None
    """The run's avgScore."""
    interval: SweepInterval | None = None
    """The 95 % interval of avgScore (the run's status.avgScoreInterval, else computed from
    status.scores)."""
    rank: int | None = None
    """Tie-aware rank among the sweep's cells of the same Snapshot and comparison key:
    1 + the cells significantly better (paired tests, Holm over all pairs, alpha 0.05)."""
    comparison_key: str | None = None
    """The run's comparison key."""
    baseline: bool | None = None
    """True on the baseline cell of its Snapshot."""
    delta: float | None = None
    """avgScore minus the baseline cell's (the mean of the paired differences)."""
    delta_interval: SweepInterval | None = None
    """The 95 % interval of that paired difference (Bonett-Price for 0/1 scores, else t;
    none when it cannot be estimated)."""
    paired_questions: int | None = None
    """n: the questions the comparison with the baseline pairs."""
    p_value: float | None = None
    """The p-value of the paired test against the baseline (see test)."""
    test: str | None = None
    """mcnemar-exact (every score 0 or 1) or paired-t."""
    non_inferior: bool | None = None
    """With spec.nonInferiorityMargin M: the low end of the 95 % interval of the paired
    difference (Bonett-Price for 0/1 scores, else t) exceeds -M."""
    non_inferior_reason: str | None = None
    """Why nonInferior is false: the interval's low end against the margin, in points (score
    × 100), on n paired questions."""
    estimable: bool | None = None
    """False when the paired difference's interval cannot be estimated (continuous scores
    whose differences are all equal): no pValue and no nonInferior, the note says why."""
    ttft_p50_ms: float | None = None
    """Median time to first token of the run's generation (status.serving)."""
    output_tokens_per_second: float | None = None
    """Output tokens per second of the run's generation (status.serving)."""
    pareto: bool | None = None
    """On the score / TTFT p50 Pareto front of its Snapshot and comparison key (none: TTFT
    unknown)."""
    note: str | None = None
    """Why a figure is missing, or what is special about the cell."""


class SweepChoice(_StatusItem):
    """A Workload, with the EngineArgsSet of its cells if any."""

    workload: str
    """The Workload listed or selected."""
    engine_args_set: str | None = None
    """The EngineArgsSet (none: the Workload as it is)."""


class SweepPareto(_StatusItem):
    """The score / TTFT p50 Pareto front of one Snapshot (and comparison key)."""

    snapshot: str
    """The Snapshot."""
    comparison_key: str | None = None
    """The comparison key of the cells compared."""
    front: list[SweepChoice] = Field(default_factory=list)
    """The cells no other cell dominates (higher-or-equal score and lower-or-equal TTFT p50,
    one of the two strict)."""


class EvaluationSweepStatus(StatusBase):
    """The cells' progress and, as they finish, the ranked table."""

    phase: EvaluationSweepPhase | None = None
    """Pending (no cell running: waiting for a place, an object or a valid spec), Running
    (a cell's run is unfinished), Succeeded (every cell ended and succeeded) or Failed
    (every cell ended and at least one failed; the table holds the others)."""
    cells: SweepCellCounts | None = None
    """How many cells are in each state."""
    table: list[SweepRow] | None = Field(default=None, max_length=MAX_STATUS_ROWS)
    """One row per cell, grouped by Snapshot, ranked; the first 64 when there are more
    (tableConfigMap holds all)."""
    table_rows: int | None = None
    """Rows of the full table."""
    table_config_map: str | None = None
    """The ConfigMap holding the full table when it has more than 64 rows (key table.json, or
    table.json.gz gzip-compressed in binaryData)."""
    best: list[SweepChoice] | None = None
    """Once every cell ended: the Workloads (and sets) ranked 1 on every Snapshot."""
    best_names: str | None = None
    """best as one line (workload or workload/engineArgsSet, comma-separated)."""
    pareto: list[SweepPareto] | None = None
    """The score / TTFT p50 Pareto front of each Snapshot."""
    notes: list[str] | None = Field(default=None, max_length=MAX_NOTES)
    """Cells the spec names but the sweep does not run, and why (an endpoint Workload takes
    no engine-args set; a set of another framework; a missing object)."""


# -- the CRD ------------------------------------------------------------------------------------

SPEC_VALIDATIONS: list[dict[str, str]] = [
    {
        "rule": "has(self.workloads) || has(self.workloadSelector)",
        "message": "spec.workloads or spec.workloadSelector is required",
    },
    {
        "rule": "has(self.snapshots) || has(self.snapshotSelector)",
        "message": "spec.snapshots or spec.snapshotSelector is required",
    },
    {
        "rule": "!has(self.run) || !has(self.run.thresholds) || "
        "!has(self.run.thresholds.nonInferiority)",
        "message": f"spec.run.thresholds.nonInferiority is not allowed: {NON_INFERIORITY_WHY}",
    },
    {
        "rule": "!has(self.nonInferiorityMargin) || has(self.baseline)",
        "message": "spec.nonInferiorityMargin needs spec.baseline",
    },
    {
        "rule": "!has(self.baseline) || has(self.baseline.workload) || "
        "has(self.baseline.engineArgsSet)",
        "message": "spec.baseline needs workload, engineArgsSet or both",
    },
    {
        "rule": "!has(self.baseline) || !has(self.baseline.workload) || "
        "has(self.workloadSelector) || (has(self.workloads) && "
        "self.workloads.exists(w, w.name == self.baseline.workload))",
        "message": "spec.baseline.workload must be in spec.workloads",
    },
    {
        "rule": "!has(self.baseline) || !has(self.baseline.engineArgsSet) || "
        "(has(self.engineArgsSets) && "
        "self.engineArgsSets.exists(s, s.name == self.baseline.engineArgsSet))",
        "message": "spec.baseline.engineArgsSet must be in spec.engineArgsSets",
    },
]


def evaluation_sweep_columns() -> list[PrinterColumn]:
    """``kubectl get esw``: PHASE, CELLS, SUCCEEDED, FAILED, BEST, AGE.

    ``-o wide`` adds PENDING and RUNNING.
    """
    return [
        PrinterColumn("Phase", "string", ".status.phase", "The current phase."),
        PrinterColumn("Cells", "integer", ".status.cells.total", "Cells of the sweep."),
        PrinterColumn(
            "Succeeded", "integer", ".status.cells.succeeded", "Cells whose run succeeded."
        ),
        PrinterColumn("Failed", "integer", ".status.cells.failed", "Cells whose run failed."),
        PrinterColumn(
            "Pending",
            "integer",
            ".status.cells.pending",
            "Cells waiting for a place under spec.parallelism.",
            priority=1,
        ),
        PrinterColumn(
            "Running",
            "integer",
            ".status.cells.running",
            "Cells whose run is unfinished.",
            priority=1,
        ),
        PrinterColumn(
            "Best",
            "string",
            ".status.bestNames",
            "The Workloads (and sets) ranked 1 on every Snapshot, once every cell ended.",
        ),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation."),
    ]


def evaluation_sweep_crd() -> dict[str, Any]:
    """The EvaluationSweep CRD (one entry of :func:`kyai.api.custom_resource_definitions`)."""
    return crd(
        "EvaluationSweep",
        EvaluationSweepSpec,
        EvaluationSweepStatus,
        description="A matrix of evaluations: Workloads × EngineArgsSets × Snapshots, one "
        "owned EvaluationRun per cell, ending in a ranked table.",
        columns=evaluation_sweep_columns(),
        spec_validations=SPEC_VALIDATIONS,
    )
