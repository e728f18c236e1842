"""The CRDs are generated from the models, structural, and committed in sync."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kyai.api import custom_resource_definitions
from kyai.api.__main__ import render

CRDS = Path(__file__).resolve().parents[3] / "crds"


def test_committed_crds_match_the_models() -> None:
    rendered = render()
    committed = {path.name: path.read_text() for path in CRDS.glob("*.yaml")}
    assert set(committed) == set(rendered), "run `make crds`"
    for name, text in rendered.items():
        assert committed[name] == text, f"crds/{name} is stale: run `make crds`"


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.get("properties", {}).items():
            found.extend(walk(value, f"{path}.{key}"))
        if isinstance(node.get("items"), dict):
            found.extend(walk(node["items"], f"{path}[]"))
        if isinstance(node.get("additionalProperties"), dict):
            found.extend(walk(node["additionalProperties"], f"{path}{{}}"))
    return found


@pytest.mark.parametrize(
    "definition", custom_resource_definitions(), ids=lambda d: d["metadata"]["name"]
)
def test_schemas_are_structural(definition: dict[str, Any]) -> None:
    schema = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        assert not {"$ref", "anyOf", "oneOf", "allOf", "title", "$defs", "const"} & set(node), path
        untyped_ok = node.get("x-kubernetes-preserve-unknown-fields") or node.get(
            "x-kubernetes-int-or-string"
        )
        assert "type" in node or untyped_ok, f"{path} has no type"
        if path.count(".") >= 2 and path.split(".")[1] in ("spec", "status"):
            assert node.get("description") or path.endswith(("[]", "{}")) or untyped_ok, (
                f"{path} has no description"
            )


def test_names_columns_and_status() -> None:
    by_kind = {d["spec"]["names"]["kind"]: d for d in custom_resource_definitions()}
    assert {k: d["spec"]["names"]["shortNames"] for k, d in by_kind.items()} == {
        "EngineArgsSet": ["eas"],
        "Workload": ["wl"],
        "Snapshot": ["snap"],
        "EvaluationRun": ["er"],
        "EvaluationSweep": ["esw", "sweep"],
        "EvaluationSchedule": ["esched"],
    }
    esw = by_kind["EvaluationSweep"]["spec"]["versions"][0]
    columns = [c["name"] for c in esw["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Phase", "Cells", "Succeeded", "Failed", "Best", "Age"]
    er = by_kind["EvaluationRun"]["spec"]["versions"][0]
    visible = [c["name"] for c in er["additionalPrinterColumns"] if not c.get("priority")]
    assert visible == [
        "Phase", "Score", "Passed", "Latency-ms", "Workload", "Snapshot", "Reason", "Age"
    ]  # fmt: skip
    paths = {c["name"]: c["jsonPath"] for c in er["additionalPrinterColumns"]}
    # The gates' verdict beside the score (a run that missed its threshold still Succeeded).
    assert paths["Passed"] == '.status.conditions[?(@.type=="Passed")].status'
    # WaitingForQuota (Kueue) shows in `kubectl get`: the Ready condition's reason.
    assert paths["Reason"] == '.status.conditions[?(@.type=="Ready")].reason'
    # A re-judge names no Workload or Snapshot itself: the columns read what the run scores.
    assert paths["Workload"] == ".status.workload" and paths["Snapshot"] == ".status.snapshot"
    for definition in by_kind.values():
        version = definition["spec"]["versions"][0]
        assert version["subresources"] == {"status": {}}
        conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
            "conditions"
        ]
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_schema_details() -> None:
    by_kind = {d["spec"]["names"]["kind"]: d for d in custom_resource_definitions()}

    def spec_of(kind: str) -> dict[str, Any]:
        schema = by_kind[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        return schema["properties"]["spec"]

    eas = spec_of("EngineArgsSet")
    assert eas["properties"]["framework"]["enum"] == ["vllm", "sglang", "trtllm"]
    assert eas["required"] == ["framework"]
    assert eas["properties"]["args"]["additionalProperties"] == {
        "x-kubernetes-preserve-unknown-fields": True
    }
    assert "'--served-model-name'" in eas["x-kubernetes-validations"][0]["rule"]
    er = spec_of("EvaluationRun")
    assert er["properties"]["generation"]["properties"]["concurrency"] == {
        "type": "integer",
        "description": "Requests in flight at most.",
        "default": 16,
        "minimum": 1,
        "maximum": 1024,
    }
    assert er["properties"]["thresholds"]["properties"]["avgScore"]["maximum"] == 1
    snap = spec_of("Snapshot")
    assert len(snap["properties"]["builtin"]["enum"]) == 7
    wl = spec_of("Workload")
    assert wl["properties"]["tolerations"]["items"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    # yaml round trip of the rendered text has no aliases
    for text in render().values():
        assert "&id" not in text
        yaml.safe_load(text)
