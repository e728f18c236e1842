"""The KYAI API (``kyai.io/v1alpha1``): pydantic models of every spec and status.

These models are the single source of the CRDs (``make crds`` writes ``crds/*.yaml`` from
:func:`custom_resource_definitions`), of the operator's parsing and of the workers' status
reports.
"""

from __future__ import annotations

from typing import Any

from kyai.api._base import (
    Condition,
    ConditionStatus,
    ConfigMapKeyReference,
    KyaiModel,
    LocalObjectReference,
    SecretKeyReference,
    StatusBase,
    status_patch,
)
from kyai.api._crd import PrinterColumn, crd, model_schema, structural
from kyai.api.engineargsset import (
    OWNED_FLAGS,
    EngineArgsSetSpec,
    EngineArgsSetStatus,
    EnvVar,
    Framework,
    canonical_flag,
)
from kyai.api.evaluationrun import (
    EvaluationRunSpec,
    EvaluationRunStatus,
    GenerationFrom,
    GenerationSettings,
    JudgeSpec,
    LLMJudge,
    LmEvalDataFile,
    LmEvalSpec,
    LmEvalTask,
    PreprocessorSpec,
    PythonGrader,
    Storage,
    Thresholds,
)
from kyai.api.snapshot import BuiltinName, InlineRow, SnapshotSpec, SnapshotStatus, Source
from kyai.api.workload import Endpoint, ModelCache, Resources, WorkloadSpec, WorkloadStatus
from kyai.engines import framework_list

_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation.")
_PHASE = PrinterColumn("Phase", "string", ".status.phase", "The current phase.")

#: The engine flags the CRD refuses at admission (the operator refuses any spelling).
_OWNED_SPELLINGS = sorted(
    {
        spelling
        for flags in OWNED_FLAGS.values()
        for flag in flags
        for spelling in (flag, f"--{flag}", flag.replace("-", "_"), f"--{flag.replace('-', '_')}")
    }
)


def custom_resource_definitions() -> list[dict[str, Any]]:
    """The four CRDs, generated from the models."""
    owned = ", ".join(f"'{flag}'" for flag in _OWNED_SPELLINGS)
    return [
        crd(
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
        ),
        crd(
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
                }
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
                PrinterColumn(
                    "Endpoint",
                    "string",
                    ".status.endpoint",
                    "The OpenAI-compatible base URL.",
                    priority=1,
                ),
                _AGE,
            ],
        ),
        crd(
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
        ),
        crd(
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
                }
            ],
            columns=[
                _PHASE,
                PrinterColumn(
                    "Score",
                    "number",
                    ".status.avgScore",
                    "Mean score over every question (errors count 0).",
                ),
                PrinterColumn(
                    "Latency",
                    "number",
                    ".status.avgLatencyMs",
                    "Mean latency of successful answers (ms).",
                ),
                PrinterColumn("Workload", "string", ".spec.workloadRef.name", "The candidate."),
                PrinterColumn("Snapshot", "string", ".spec.snapshotRef.name", "The question set."),
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
            ],
        ),
    ]


__all__ = [
    "OWNED_FLAGS",
    "BuiltinName",
    "Condition",
    "ConditionStatus",
    "ConfigMapKeyReference",
    "Endpoint",
    "EngineArgsSetSpec",
    "EngineArgsSetStatus",
    "EnvVar",
    "EvaluationRunSpec",
    "EvaluationRunStatus",
    "Framework",
    "GenerationFrom",
    "GenerationSettings",
    "InlineRow",
    "JudgeSpec",
    "KyaiModel",
    "LLMJudge",
    "LmEvalDataFile",
    "LmEvalSpec",
    "LmEvalTask",
    "LocalObjectReference",
    "ModelCache",
    "PreprocessorSpec",
    "PrinterColumn",
    "PythonGrader",
    "Resources",
    "SecretKeyReference",
    "SnapshotSpec",
    "SnapshotStatus",
    "Source",
    "StatusBase",
    "Storage",
    "Thresholds",
    "WorkloadSpec",
    "WorkloadStatus",
    "canonical_flag",
    "crd",
    "custom_resource_definitions",
    "model_schema",
    "status_patch",
    "structural",
]
