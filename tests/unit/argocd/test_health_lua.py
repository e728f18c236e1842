"""The Argo CD health checks (config/argocd) against every testdata file, run in real Lua."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

pytest.importorskip("lupa", reason="lupa (the dev extra) runs the Lua health checks")

# The runner is shared with the system tests (real devcluster statuses): load it by path.
_SPEC = importlib.util.spec_from_file_location(
    "argocd_health", Path(__file__).resolve().parents[2] / "system" / "argocd_health.py"
)
assert _SPEC is not None and _SPEC.loader is not None
_health = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_health)
CUSTOMIZATIONS, KINDS = _health.CUSTOMIZATIONS, _health.KINDS
expected_cases, health = _health.expected_cases, _health.health

CASES = [(kind, path, want) for kind in KINDS for path, want in expected_cases(kind)]


def test_every_kind_has_argo_cds_layout() -> None:
    for kind in KINDS:
        folder = CUSTOMIZATIONS / kind
        assert (folder / "health.lua").is_file() and (folder / "health_test.yaml").is_file()
        listed = {path.resolve() for path, _ in expected_cases(kind)}
        on_disk = {path.resolve() for path in (folder / "testdata").glob("*.yaml")}
        assert listed == on_disk, f"{kind}: testdata and health_test.yaml differ"
        assert {want["status"] for _, want in expected_cases(kind)} >= {
            "Progressing",
            "Healthy",
            "Degraded",
        }


@pytest.mark.parametrize(
    ("kind", "path", "want"), CASES, ids=[f"{k}/{p.stem}" for k, p, _ in CASES]
)
def test_health_of_each_testdata_file(kind: str, path: Path, want: dict[str, str]) -> None:
    obj = yaml.safe_load(path.read_text())
    assert obj["kind"] == kind
    assert health(obj) == want


def test_a_passed_run_with_a_missed_threshold_is_degraded_not_healthy() -> None:
    path = CUSTOMIZATIONS / "EvaluationRun" / "testdata" / "healthy_succeeded.yaml"
    obj = yaml.safe_load(path.read_text())
    obj["status"]["conditions"].append(
        {"type": "Passed", "status": "False", "reason": "ThresholdsMissed",
         "message": "error rate 0.5000 > 0.1", "lastTransitionTime": "2026-01-31T12:00:00Z"}
    )  # fmt: skip
    assert health(obj) == {
        "status": "Degraded",
        "message": "Thresholds missed: error rate 0.5000 > 0.1",
    }
