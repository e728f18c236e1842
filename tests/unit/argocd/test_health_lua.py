"""The Argo CD health checks (config/argocd) against every testdata file, run in real Lua."""

from __future__ import annotations

import importlib.util
import subprocess
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


ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "kyai-operator"
HELM = ROOT / ".venv" / "bin" / "helm"


def sources() -> dict[str, str]:
    return {kind: (CUSTOMIZATIONS / kind / "health.lua").read_text() for kind in KINDS}


def test_argocd_cm_forms_are_copies_of_the_checks() -> None:
    """The argocd-cm patch and the chart's copies say what resource_customizations says."""
    patch = yaml.safe_load((ROOT / "config" / "argocd" / "argocd-cm-patch.yaml").read_text())
    expected = {f"resource.customizations.health.kyai.io_{k}": lua for k, lua in sources().items()}
    assert patch == {"data": expected}, "regenerate config/argocd/argocd-cm-patch.yaml"
    for kind, lua in sources().items():
        copy = CHART / "argocd" / f"{kind}.lua"
        assert copy.read_text() == lua, f"cp {CUSTOMIZATIONS / kind / 'health.lua'} {copy}"


def test_the_chart_renders_the_checks_in_argocd_cm_form() -> None:
    if not HELM.exists():
        pytest.skip("helm is not installed: run scripts/install-helm.sh (make setup does)")
    rendered = subprocess.run(
        [str(HELM), "template", "kyai", str(CHART), "--set", "argocd.healthChecks.enabled=true",
         "--show-only", "templates/argocd-health.yaml"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    config_map = yaml.safe_load(rendered)
    assert config_map["kind"] == "ConfigMap"
    data = config_map["data"]
    assert set(data) == {f"resource.customizations.health.kyai.io_{kind}" for kind in KINDS}
    # The rendered scripts run and judge the testdata as the sources do.
    for kind in KINDS:
        script = data[f"resource.customizations.health.kyai.io_{kind}"]
        assert script.strip() == sources()[kind].strip()
        for path, want in expected_cases(kind):
            assert health(yaml.safe_load(path.read_text()), script) == want
