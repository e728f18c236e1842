"""The five CRDs of the API, generated from the models (``make crds`` writes them)."""

from __future__ import annotations

from typing import Any

from kyai.api._crd import PrinterColumn, crd
from kyai.api.engineargsset import OWNED_FLAGS, EngineArgsSetSpec, EngineArgsSetStatus
from kyai.api.evaluationrun import (
    GENERATION_FROM_SELF_RULE,
    EvaluationRunSpec,
    EvaluationRunStatus,
)
from kyai.api.evaluationschedule import evaluation_schedule_crd
from kyai.api.evaluationsweep import evaluation_sweep_crd
from kyai.api.snapshot import SnapshotSpec, SnapshotStatus
from kyai.api.workload import WorkloadSpec, WorkloadStatus
from kyai.engines import framework_list

_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation.")
_PHASE = PrinterColumn("Phase", "string", ".status.phase", "The current phase.")
#: Why an object is (not) Ready: e.g. WaitingForQuota while Kueue has not admitted its pods.
_REASON = PrinterColumn(
    "Reason",
    "string",
    '.status.conditions[?(@.type=="Ready")].reason',
    "The Ready condition's reason (WaitingForQuota, Preempted: Kueue holds its pods).",
)

#: The engine flags the CRD refuses at admission (the operator refuses any spelling).
_OWNED_SPELLINGS = sorted(
    {
        spelling
        for flags in OWNED_FLAGS.values()
        for flag in flags
        for spelling in (flag, f"--{flag}", flag.replace("-", "_"), f"--{flag.replace('-', '_')}")
    }
)


def _engine_args_set() -> dict[str, Any]:
    """The EngineArgsSet CRD."""
    owned = ", ".join(f"'{flag}'" for flag in _OWNED_SPELLINGS)
    return crd(
        "EngineArgsSet",
        EngineArgsSetSpec,
        EngineArgsSetStatus,
        description="A serving engine's flags and environment, shared by Workloads.",
        columns=[
            PrinterColumn("Framework", "string", ".spec.framework", "The serving framework."),
            _PHASE,
            _AGE,
        ],
        spec_validations=[
            {
                "rule": f"!has(self.args) || ![{owned}].exists(f, f in self.args)",
                "message": "args may not set host, port, model or the served model name: "
                "the operator sets them (use Workload spec.model and spec.servedModelName)",
            }
        ],
    )


def _workload() -> dict[str, Any]:
    """The Workload CRD."""
    return crd(
        "Workload",
        WorkloadSpec,
        WorkloadStatus,
        description="One candidate model: served by the operator with an engine, or "
        "reached at an existing endpoint.",
        spec_validations=[
            {
                "rule": "has(self.framework) || has(self.endpoint)",
                "message": f"spec.framework is required ({framework_list()}) unless "
                "spec.endpoint is set",
            },
            {
                "rule": "!has(self.nodes) || self.nodes == 1 || "
                "(has(self.framework) && self.framework != 'trtllm' && !has(self.endpoint))",
                "message": "spec.nodes > 1 needs spec.framework vllm or sglang (TensorRT-LLM "
                "is served on one node only) and no spec.endpoint",
            },
        ],
        columns=[
            PrinterColumn("Framework", "string", ".spec.framework", "The serving framework."),
            PrinterColumn("Model", "string", ".spec.model", "The model served."),
            _PHASE,
            PrinterColumn(
                "MaxLen",
                "integer",
                ".status.maxModelLen",
                "The context window the server reports.",
            ),
            _REASON,
            PrinterColumn(
                "Endpoint",
                "string",
                ".status.endpoint",
                "The OpenAI-compatible base URL.",
                priority=1,
            ),
            _AGE,
        ],
    )


def _snapshot() -> dict[str, Any]:
    """The Snapshot CRD."""
    return crd(
        "Snapshot",
        SnapshotSpec,
        SnapshotStatus,
        description="A named, immutable question set with its generation and judge prompts.",
        root_validations=[
            {
                "rule": "!has(oldSelf.status) || !has(oldSelf.status.phase) || "
                "oldSelf.status.phase != 'Ready' || self.spec == oldSelf.spec",
                "message": "a Ready Snapshot is immutable (its rows and sha256 are pinned): "
                "create a new Snapshot instead",
            }
        ],
        columns=[
            PrinterColumn("Dataset", "string", ".status.dataset", "The dataset."),
            PrinterColumn("Version", "string", ".status.version", "The dataset version."),
            PrinterColumn("Rows", "integer", ".status.rows", "Questions in the snapshot."),
            _PHASE,
            PrinterColumn("SHA256", "string", ".status.sha256", "Content hash.", priority=1),
            _AGE,
        ],
    )


#: ``kubectl get er`` columns (``-o wide`` adds those of priority 1).
_RUN_COLUMNS = [
    _PHASE,
    PrinterColumn(
        "Score",
        "number",
        ".status.avgScore",
        "Mean score over every question (errors count 0).",
    ),
    # The verdict beside the score: the Passed condition (True/False; empty without a gate).
    PrinterColumn(
        "Passed",
        "string",
        '.status.conditions[?(@.type=="Passed")].status',
        "Whether the run met its gates (the Passed condition), empty without spec.thresholds.",
    ),
    PrinterColumn(
        "Latency-ms",
        "number",
        ".status.avgLatencyMs",
        "Mean latency of successful answers, in milliseconds.",
    ),
    PrinterColumn(
        "Workload",
        "string",
        ".status.workload",
        "The candidate (a re-judge's: its source run's).",
    ),
    PrinterColumn(
        "Snapshot",
        "string",
        ".status.snapshot",
        "The question set (a re-judge's: its source run's).",
    ),
    # After what people read first (the phase, the score): the Ready condition's reason,
    # e.g. WaitingForQuota or Preempted while Kueue holds the run's Job.
    _REASON,
    PrinterColumn(
        "Score-Low",
        "number",
        ".status.avgScoreInterval.low",
        "Low end of the score's 95 % interval (Wilson for 0/1 scores, else t).",
        priority=1,
    ),
    PrinterColumn(
        "Score-High",
        "number",
        ".status.avgScoreInterval.high",
        "High end of the score's 95 % interval.",
        priority=1,
    ),
    PrinterColumn(
        "TTFT",
        "number",
        ".status.serving.ttftP50Ms",
        "Median time to first token of the generation phase, in milliseconds.",
        priority=1,
    ),
    PrinterColumn(
        "Tok/s",
        "number",
        ".status.serving.outputTokensPerSecond",
        "Output tokens per second of the generation phase.",
        priority=1,
    ),
    PrinterColumn(
        "Errors",
        "integer",
        ".status.errorCount",
        "Questions scored 0 because of an error.",
        priority=1,
    ),
    PrinterColumn(
        "Key",
        "string",
        ".status.comparisonKey",
        "Comparison key: equal keys may be ranked.",
        priority=1,
    ),
    _AGE,
]


def _evaluation_run() -> dict[str, Any]:
    """The EvaluationRun CRD."""
    return crd(
        "EvaluationRun",
        EvaluationRunSpec,
        EvaluationRunStatus,
        description="One candidate (Workload) evaluated on one question set (Snapshot): "
        "generation, then judging, then scores.",
        root_validations=[
            {
                "rule": "!has(oldSelf.status) || !has(oldSelf.status.phase) || "
                "oldSelf.status.phase == 'Pending' || self.spec == oldSelf.spec",
                "message": "an EvaluationRun's spec is immutable once the run has started: "
                "create a new EvaluationRun instead",
            },
            GENERATION_FROM_SELF_RULE,
        ],
        columns=_RUN_COLUMNS,
    )


def custom_resource_definitions() -> list[dict[str, Any]]:
    """The six CRDs, generated from the models."""
    return [
        _engine_args_set(),
        _workload(),
        _snapshot(),
        _evaluation_run(),
        evaluation_sweep_crd(),
        evaluation_schedule_crd(),
    ]
