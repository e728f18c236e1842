"""kyai_sweep_cells{namespace, sweep, phase} and the dashboard's sweep table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kyai.metrics import RunMetrics, SweepMetrics, sweep_cells

DASHBOARD = Path(__file__).resolve().parents[3] / "charts" / "kyai-operator" / "dashboards"


def sweep(name: str, cells: dict[str, int] | None, namespace: str = "evals") -> dict[str, Any]:
    status = {"phase": "Running"} if cells is None else {"phase": "Running", "cells": cells}
    return {"metadata": {"namespace": namespace, "name": name}, "status": status}


def scrape(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    text = generate_latest(registry).decode()
    return {
        (s.labels["namespace"], s.labels["sweep"], s.labels["phase"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "kyai_sweep_cells"
        for s in family.samples
    }


def test_cells_by_phase_per_sweep_and_forgotten_when_deleted() -> None:
    registry = CollectorRegistry()
    metrics = SweepMetrics(registry=registry)
    metrics.observe(sweep("pick", {"total": 5, "pending": 1, "running": 2, "succeeded": 1,
                                   "failed": 1}))  # fmt: skip
    metrics.observe(sweep("other", None, namespace="team-b"))
    assert scrape(registry) == {
        ("evals", "pick", "Pending"): 1.0, ("evals", "pick", "Running"): 2.0,
        ("evals", "pick", "Succeeded"): 1.0, ("evals", "pick", "Failed"): 1.0,
        ("team-b", "other", "Pending"): 0.0, ("team-b", "other", "Running"): 0.0,
        ("team-b", "other", "Succeeded"): 0.0, ("team-b", "other", "Failed"): 0.0,
    }  # fmt: skip
    metrics.observe(sweep("pick", {"total": 5, "succeeded": 5}))
    assert scrape(registry)[("evals", "pick", "Succeeded")] == 5.0
    metrics.forget("evals", "pick")
    assert {key[1] for key in scrape(registry)} == {"other"}


def test_an_unreadable_status_counts_nothing() -> None:
    key, counts = sweep_cells(sweep("bad", {"total": "many"}))
    assert key == ("evals", "bad") and set(counts.values()) == {0}


def test_it_joins_the_operators_registry() -> None:
    operator = RunMetrics()
    metrics = SweepMetrics(registry=operator.registry)
    metrics.observe(sweep("pick", {"total": 1, "running": 1}))
    text = generate_latest(operator.registry).decode()
    assert 'kyai_sweep_cells{namespace="evals",phase="Running",sweep="pick"} 1.0' in text
    assert "kyai_evaluation_runs" in text  # the runs' families are still there


def test_the_dashboard_has_a_sweep_table_of_kyai_sweep_cells() -> None:
    dashboard = json.loads((DASHBOARD / "kyai.json").read_text())
    (panel,) = [p for p in dashboard["panels"] if p["title"].startswith("EvaluationSweeps")]
    assert panel["type"] == "table"
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    refs = {target["refId"]: target["expr"] for target in panel["targets"]}
    assert all("kyai_sweep_cells" in expr for expr in refs.values())
    assert all("sum by (namespace, sweep)" in expr for expr in refs.values())
    rename = next(t for t in panel["transformations"] if t["id"] == "organize")["options"]
    renamed = {rename["renameByName"][f"Value #{ref}"] for ref in refs}
    assert renamed == {"pending", "running", "succeeded", "failed", "cells", "done"}
    for ref, phase in zip("ABCD", ("Pending", "Running", "Succeeded", "Failed"), strict=True):
        assert f'phase="{phase}"' in refs[ref]
        assert rename["renameByName"][f"Value #{ref}"] == phase.lower()
