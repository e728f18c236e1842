"""A run that fails before resolving its references still names them in its status.

``kubectl get er``'s WORKLOAD and SNAPSHOT columns read ``status.workload`` and
``status.snapshot``; a run failed early (an invalid judge, an invalid spec) fills them from
its spec (:func:`kyai.controllers._status.named_references`, used by the engine's ``fail``).
"""

from __future__ import annotations

from typing import Any

import pytest

from kyai.api import custom_resource_definitions
from kyai.controllers._status import named_references

SPEC = {"workloadRef": {"name": "llama-remote"}, "snapshotRef": {"name": "capitals"}}


def test_a_spec_names_fill_what_the_status_lacks() -> None:
    assert named_references(SPEC, {}) == {"workload": "llama-remote", "snapshot": "capitals"}
    # What the status holds already (resolved, or a re-judge's source run's) is kept.
    assert named_references(SPEC, {"workload": "w", "snapshot": "s"}) == {}
    assert named_references(SPEC, {"workload": "w"}) == {"snapshot": "capitals"}


@pytest.mark.parametrize(
    "spec",
    [None, [], {}, {"generationFrom": {"runRef": {"name": "r"}}}, {"workloadRef": "w"},
     {"workloadRef": {"name": 3}, "snapshotRef": {"name": ""}}],
)  # fmt: skip
def test_a_spec_without_usable_names_fills_nothing(spec: Any) -> None:
    assert named_references(spec, {}) == {}


def test_the_columns_read_the_fields_filled() -> None:
    (run,) = [crd for crd in custom_resource_definitions() if crd["spec"]["names"]["kind"]
              == "EvaluationRun"]  # fmt: skip
    columns = run["spec"]["versions"][0]["additionalPrinterColumns"]
    paths = {column["name"]: column["jsonPath"] for column in columns}
    assert (paths["Workload"], paths["Snapshot"]) == (".status.workload", ".status.snapshot")
