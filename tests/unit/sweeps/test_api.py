"""The EvaluationSweep API: what the spec refuses (naming the field), its CRD parts, its
CEL rules (evaluated with cel-python, as the API server would) and the run template kept in
step with the EvaluationRun spec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy.adapter import json_to_cel
from pydantic import ValidationError

from kyai.api import EvaluationRunSpec, model_schema
from kyai.api.evaluationsweep import (
    MAX_CELLS,
    MAX_STATUS_ROWS,
    NON_INFERIORITY_WHY,
    PER_CELL_FIELDS,
    SPEC_VALIDATIONS,
    EvaluationSweepSpec,
    EvaluationSweepStatus,
    LabelSelector,
    SweepRunTemplate,
    evaluation_sweep_crd,
)

BASE: dict[str, Any] = {"workloads": [{"name": "a"}], "snapshots": [{"name": "s"}]}


def refused(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        EvaluationSweepSpec.model_validate(data)
    assert message in str(info.value), str(info.value)


SELECTOR_IN = {"matchExpressions": [{"key": "k", "operator": "In"}]}
SELECTOR_EXISTS = {"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["v"]}]}
HUGE = {
    "workloads": [{"name": f"w{i}"} for i in range(100)],
    "engineArgsSets": [{"name": f"e{i}"} for i in range(11)],
    "snapshots": [{"name": "s"}],
}
TWICE = [{"name": "a"}, {"name": "a"}]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"snapshots": [{"name": "s"}]}, "spec.workloads or spec.workloadSelector is required"),
        ({"workloads": [{"name": "a"}]}, "spec.snapshots or spec.snapshotSelector is required"),
        ({**BASE, "workloads": []}, "spec.workloads or spec.workloadSelector is required"),
        ({**BASE, "parallelism": 0}, "parallelism"),
        ({**BASE, "nonInferiorityMargin": 0.02}, "spec.nonInferiorityMargin needs spec.baseline"),
        ({**BASE, "baseline": {}}, "spec.baseline needs workload, engineArgsSet or both"),
        (
            {**BASE, "baseline": {"workload": "b"}},
            "baseline.workload: b is not in spec.workloads (a)",
        ),
        (
            {**BASE, "baseline": {"engineArgsSet": "x"}},
            "x is not in spec.engineArgsSets (none listed)",
        ),
        (
            {**BASE, "engineArgsSets": [{"name": "y"}], "baseline": {"engineArgsSet": "x"}},
            "spec.baseline.engineArgsSet: x is not in spec.engineArgsSets (y)",
        ),
        ({**BASE, "workloads": TWICE}, "spec.workloads: a listed more than once"),
        ({**BASE, "snapshots": [{"name": "s"}] * 2}, "spec.snapshots: s listed more than once"),
        ({**BASE, "baseline": {"workload": "a"}, "nonInferiorityMargin": 1.5}, "Margin"),
        ({**BASE, "run": {"workloadRef": {"name": "w"}}}, "spec.run.workloadRef is not allowed"),
        ({**BASE, "run": {"snapshotRef": {"name": "s"}}}, "spec.run.snapshotRef is not allowed"),
        ({**BASE, "run": {"generationFrom": {"runRef": {"name": "r"}}}}, "run.generationFrom is"),
        ({**BASE, "run": {"lmEval": {"tasks": [{"name": "gsm8k"}]}}}, "spec.run.lmEval is not"),
        ({**BASE, "run": {"judge": {}, "judges": [{"name": "x"}]}}, "spec.run.judges, not both"),
        ({**BASE, "run": {"judges": TWICE}}, "spec.run.judges: each judge needs a unique name"),
        ({**BASE, "run": {"judge": {"type": "python"}}}, "judge.type python needs judge.python"),
        ({**BASE, "workloadSelector": SELECTOR_IN}, "operator In needs values"),
        ({**BASE, "workloadSelector": SELECTOR_EXISTS}, "operator Exists takes no values"),
        (HUGE, f"1100 cells, more than the {MAX_CELLS}"),
    ],
)
def test_specs_refused_naming_the_field(spec: dict[str, Any], message: str) -> None:
    refused(spec, message)


@pytest.mark.parametrize(
    "spec",
    [
        BASE,
        {"workloadSelector": {}, "snapshotSelector": {"matchLabels": {"suite": "core"}}},
        # A baseline among the selected Workloads is checked when the sweep is reconciled.
        {
            "workloadSelector": {"matchLabels": {"t": "a"}},
            "snapshots": [{"name": "s"}],
            "baseline": {"workload": "not-listed"},
        },
        {
            **BASE,
            "engineArgsSets": [{"name": "x"}],
            "baseline": {"workload": "a", "engineArgsSet": "x"},
            "nonInferiorityMargin": 0.02,
            "parallelism": 4,
            "keepWorkloads": True,
        },
        {
            **BASE,
            "run": {
                "judge": {"type": "builtin"},
                "generation": {"concurrency": 4},
                "thresholds": {"avgScore": 0.5},
                "jobs": {"backoffLimit": 0},
            },
        },
    ],
)
def test_specs_accepted(spec: dict[str, Any]) -> None:
    parsed = EvaluationSweepSpec.model_validate(spec)
    assert parsed.parallelism == spec.get("parallelism", 1)
    assert parsed.keep_workloads is spec.get("keepWorkloads", False)


def test_the_issue_example_parses_with_its_defaults() -> None:
    spec = EvaluationSweepSpec.model_validate(
        {
            "workloads": [{"name": "qwen-bf16"}, {"name": "qwen-fp8"}],
            "engineArgsSets": [{"name": "default"}, {"name": "fp8-kv"}],
            "snapshots": [{"name": "mmlu-pro"}, {"name": "gpqa"}],
            "run": {"judge": {"type": "builtin"}, "generation": {"concurrency": 8}},
            "baseline": {"workload": "qwen-bf16"},
            "nonInferiorityMargin": 0.02,
        }
    )
    assert spec.workload_names() == ["qwen-bf16", "qwen-fp8"]
    assert spec.engine_args_set_names() == ["default", "fp8-kv"]
    assert spec.snapshot_names() == ["mmlu-pro", "gpqa"]
    assert (spec.parallelism, spec.keep_workloads) == (1, False)
    # The run block as written: unset fields stay unset (the EvaluationRun's defaults apply).
    assert spec.run.cell_spec() == {"judge": {"type": "builtin"}, "generation": {"concurrency": 8}}


def test_the_run_template_is_the_run_spec_without_the_per_cell_fields() -> None:
    """A field added to EvaluationRunSpec must be added to SweepRunTemplate (or refused)."""
    run_fields = {field.alias or name for name, field in EvaluationRunSpec.model_fields.items()}
    template = {field.alias or name for name, field in SweepRunTemplate.model_fields.items()}
    assert template == run_fields - set(PER_CELL_FIELDS)
    # The CRD schemas of the shared fields are the run's own (but for their descriptions).
    run_schema = model_schema(EvaluationRunSpec)["properties"]
    template_schema = model_schema(SweepRunTemplate)["properties"]
    for name in template:
        ours = {k: v for k, v in template_schema[name].items() if k != "description"}
        theirs = {k: v for k, v in run_schema[name].items() if k != "description"}
        assert ours == theirs, name


def test_snake_case_per_cell_fields_are_refused_too() -> None:
    with pytest.raises(ValidationError, match=r"spec\.run\.workloadRef is not allowed"):
        SweepRunTemplate.model_validate({"workload_ref": {"name": "w"}})


def test_label_selector_in_cluster_form() -> None:
    selector = LabelSelector.model_validate(
        {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "k", "operator": "In",
                                                          "values": ["x"]}]}
    )  # fmt: skip
    assert selector.to_k8s() == {
        "matchLabels": {"a": "b"},
        "matchExpressions": [{"key": "k", "operator": "In", "values": ["x"]}],
    }


# -- the CRD ------------------------------------------------------------------------------------


def test_crd_names_columns_and_status() -> None:
    definition = evaluation_sweep_crd()
    names = definition["spec"]["names"]
    assert definition["metadata"]["name"] == "evaluationsweeps.kyai.io"
    assert names["kind"] == "EvaluationSweep" and names["plural"] == "evaluationsweeps"
    assert names["shortNames"] == ["esw", "sweep"] and names["categories"] == ["kyai"]
    version = definition["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = version["additionalPrinterColumns"]
    visible = [c["name"].upper() for c in columns if not c.get("priority")]
    assert visible == ["PHASE", "CELLS", "SUCCEEDED", "FAILED", "BEST", "AGE"]
    paths = {c["name"]: c["jsonPath"] for c in columns}
    assert paths["Cells"] == ".status.cells.total"
    assert paths["Best"] == ".status.bestNames"
    schema = version["schema"]["openAPIV3Schema"]
    status = schema["properties"]["status"]["properties"]
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    assert status["table"]["maxItems"] == MAX_STATUS_ROWS
    assert status["table"]["items"]["properties"]["pValue"]["type"] == "number"
    assert {"total", "pending", "running", "succeeded", "failed"} <= set(
        status["cells"]["properties"]
    )
    spec = schema["properties"]["spec"]
    assert spec["properties"]["parallelism"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_CELLS,
        "default": 1,
        "description": spec["properties"]["parallelism"]["description"],
    }
    assert "workloadRef" not in spec["properties"]["run"]["properties"]
    assert spec["x-kubernetes-validations"] == SPEC_VALIDATIONS


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for key, value in node.get("properties", {}).items():
        found.extend(walk(value, f"{path}.{key}"))
    if isinstance(node.get("items"), dict):
        found.extend(walk(node["items"], f"{path}[]"))
    return found


def test_crd_schema_is_structural_and_every_field_documented() -> None:
    schema = evaluation_sweep_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        assert not {"$ref", "anyOf", "oneOf", "allOf", "title", "$defs", "const"} & set(node)
        untyped = node.get("x-kubernetes-preserve-unknown-fields")
        assert "type" in node or untyped, path
        if path.count(".") >= 2 and path.split(".")[1] in ("spec", "status"):
            assert node.get("description") or path.endswith("[]") or untyped, path


def cel(rule: str, spec: dict[str, Any]) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(rule))
    return bool(program.evaluate({"self": json_to_cel(spec)}))


BASELINE_E = {"workload": "a", "engineArgsSet": "e"}
GATE = {"baselineRef": {"name": "b"}, "margin": 0.02}


@pytest.mark.parametrize(
    ("spec", "failing"),
    [
        (BASE, None),
        ({"snapshots": [{"name": "s"}]}, "spec.workloads or spec.workloadSelector is required"),
        ({"workloads": [{"name": "a"}]}, "spec.snapshots or spec.snapshotSelector is required"),
        ({**BASE, "nonInferiorityMargin": 0.1}, "spec.nonInferiorityMargin needs spec.baseline"),
        ({**BASE, "baseline": {}}, "spec.baseline needs workload, engineArgsSet or both"),
        (
            {**BASE, "baseline": {"workload": "z"}},
            "spec.baseline.workload must be in spec.workloads",
        ),
        ({**BASE, "workloadSelector": {}, "baseline": {"workload": "z"}}, None),
        (
            {**BASE, "baseline": {"engineArgsSet": "e"}},
            "spec.baseline.engineArgsSet must be in spec.engineArgsSets",
        ),
        ({**BASE, "engineArgsSets": [{"name": "e"}], "baseline": BASELINE_E}, None),
        ({**BASE, "run": {"thresholds": {"avgScore": 0.5}}}, None),
        (
            {**BASE, "run": {"thresholds": {"nonInferiority": GATE}}},
            f"spec.run.thresholds.nonInferiority is not allowed: {NON_INFERIORITY_WHY}",
        ),
    ],
)
def test_cel_rules_say_what_the_model_says(spec: dict[str, Any], failing: str | None) -> None:
    failed = [v["message"] for v in SPEC_VALIDATIONS if not cel(v["rule"], spec)]
    assert failed == ([failing] if failing else [])
    if failing is None:
        EvaluationSweepSpec.model_validate(spec)
    else:
        refused(spec, failing.split(" must ")[0].split(" needs ")[0].split(" or ")[0])


def test_status_reads_what_it_writes_and_ignores_unknown_fields() -> None:
    status = EvaluationSweepStatus.model_validate(
        {
            "phase": "Running",
            "cells": {"total": 2, "running": 1, "pending": 1},
            "table": [{"cell": "c", "workload": "a", "snapshot": "s", "phase": "Queued",
                       "futureField": 1}],
            "somethingNew": True,
        }
    )  # fmt: skip
    assert status.cells is not None and status.cells.running == 1
    assert status.table is not None and status.table[0].phase == "Queued"
    assert EvaluationSweepStatus.model_validate(status.to_k8s()) == status


def test_the_docs_example_is_a_valid_sweep() -> None:
    page = Path(__file__).resolve().parents[3] / "docs" / "how-to" / "sweep-engine-flags.md"
    section = page.read_text(encoding="utf-8").split("# Sweep engine flags: EvaluationSweep", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    sweep = yaml.safe_load(block.group(1))
    assert sweep["kind"] == "EvaluationSweep"
    spec = EvaluationSweepSpec.model_validate(sweep["spec"])
    assert spec.baseline is not None and spec.baseline.workload == "qwen-bf16"
    failed = [v["message"] for v in SPEC_VALIDATIONS if not cel(v["rule"], sweep["spec"])]
    assert failed == []
