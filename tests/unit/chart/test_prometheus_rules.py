"""The chart's PrometheusRule: rendered only when asked for and served, and its three alerts on
the EvaluationSchedules' series checked by Prometheus' own tools (``promtool check rules``,
``promtool test rules``) on input series, firing and silent.

The expressions are read from the rendered template, never copied here. promtool comes with
Debian's ``prometheus`` package (``.ci/run`` installs it); without it those tests skip.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "kyai-operator"
HELM = ROOT / ".venv" / "bin" / "helm"
PROMTOOL = shutil.which("promtool")
RELEASE_NS = "kyai-under-test"
CRD = "monitoring.coreos.com/v1/PrometheusRule"
ALERTS = ("KyaiEvaluationRegressed", "KyaiEvaluationScheduleNoSuccess", "KyaiScheduledRunFailed")

# The schedule series the operator serves and the PromQL walker are the dashboard tests':
# load them by path (test modules are not a package).
_SPEC = importlib.util.spec_from_file_location(
    "chart_tests", Path(__file__).with_name("test_chart.py")
)
assert _SPEC is not None and _SPEC.loader is not None
_chart = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_chart)
SCHEDULE_SERIES: dict[str, set[str]] = _chart.SCHEDULE_SERIES
promql_selectors = _chart.promql_selectors

needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian's prometheus package has it; .ci/run installs it)",
)


@pytest.fixture(scope="module")
def helm_binary() -> Path:
    if not HELM.exists():
        pytest.skip("helm is not installed: run scripts/install-helm.sh (make setup does)")
    return HELM


def rules_of(*extra: str) -> list[dict[str, Any]]:
    """The chart's PrometheusRules, rendered with ``extra`` arguments."""
    result = subprocess.run(
        [str(HELM), "template", "kyai", str(CHART), "--namespace", RELEASE_NS, *extra],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return [doc for doc in docs if doc["kind"] == "PrometheusRule"]


@pytest.fixture(scope="module")
def groups(helm_binary: Path) -> list[dict[str, Any]]:
    """spec.groups of the rule as `helm install` with prometheusRule.enabled makes it."""
    (rule,) = rules_of("--set", "prometheusRule.enabled=true", "--api-versions", CRD)
    return list(rule["spec"]["groups"])


@pytest.fixture(scope="module")
def rules_file(groups: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def alerts(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


# -- rendering --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("enabled", "served", "rendered"),
    [(False, False, False), (False, True, False), (True, False, False), (True, True, True)],
)
def test_rendered_only_when_enabled_and_the_prometheus_operator_is_there(
    helm_binary: Path, enabled: bool, served: bool, rendered: bool
) -> None:
    extra = ["--set", f"prometheusRule.enabled={str(enabled).lower()}"]
    extra += ["--set", "prometheusRule.labels.release=kps"]
    extra += ["--api-versions", CRD] if served else []
    found = rules_of(*extra)
    assert len(found) == int(rendered)
    for rule in found:
        assert rule["apiVersion"] == "monitoring.coreos.com/v1"
        assert rule["metadata"]["namespace"] == RELEASE_NS
        labels = rule["metadata"]["labels"]
        assert labels["release"] == "kps"  # for the Prometheus' ruleSelector
        assert labels["app.kubernetes.io/part-of"] == "kyai"


def test_three_warnings_on_the_schedule_series_only(groups: list[dict[str, Any]]) -> None:
    rules = alerts(groups)
    assert tuple(rules) == ALERTS
    for name, rule in rules.items():
        assert rule["labels"] == {"severity": "warning"}, name
        assert set(rule["annotations"]) == {"summary", "description"}, name
        selectors, grouping = promql_selectors(rule["expr"])
        for metric, matched in selectors:
            assert metric in SCHEDULE_SERIES, f"{name}: {metric} is not a schedule series"
            assert matched <= SCHEDULE_SERIES[metric], (name, metric, matched)
        assert grouping <= {"namespace", "schedule"}, (name, grouping)
    assert rules["KyaiEvaluationRegressed"]["expr"] == "kyai_schedule_regressed == 1"
    assert rules["KyaiEvaluationRegressed"]["for"] == "0m"
    assert "[1h]" in rules["KyaiScheduledRunFailed"]["expr"]


def test_the_wait_and_the_window_are_values(helm_binary: Path) -> None:
    (rule,) = rules_of(
        "--api-versions", CRD, "--set", "prometheusRule.enabled=true",
        "--set", "prometheusRule.regressedFor=15m", "--set", "prometheusRule.failedRunWindow=6h",
    )  # fmt: skip
    rules = alerts(rule["spec"]["groups"])
    assert rules["KyaiEvaluationRegressed"]["for"] == "15m"
    failed = rules["KyaiScheduledRunFailed"]
    assert failed["expr"] == 'increase(kyai_schedule_runs_total{outcome="failed"}[6h]) > 0'
    assert failed["annotations"]["description"].count("in the last 6h.") == 1


@pytest.mark.parametrize("setting", ["failedRunWindow=soon", "regressedFor=5", "labels.x=null"])
def test_values_schema_refuses_bad_rule_values(helm_binary: Path, setting: str) -> None:
    result = subprocess.run(
        [str(HELM), "lint", str(CHART), "--set", f"prometheusRule.{setting}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0, setting
    assert setting.split("=")[0].split(".")[0] in result.stdout + result.stderr


# -- Prometheus' own checks -------------------------------------------------------------------


@needs_promtool
def test_promtool_check_rules_accepts_the_rendered_rules(rules_file: Path) -> None:
    checked = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(rules_file)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout


def series(name: str, schedule: str, values: str, **labels: str) -> dict[str, str]:
    """An input series as the operator's ServiceMonitor would store it (honorLabels)."""
    every = {"namespace": "evals", "schedule": schedule, **labels}
    every |= {"job": "kyai-kyai-operator-metrics", "pod": "kyai-kyai-operator-0"}
    matchers = ",".join(f'{key}="{value}"' for key, value in sorted(every.items()))
    return {"series": f"{name}{{{matchers}}}", "values": values}


def fired(schedule: str, summary: str, description: str, **labels: str) -> dict[str, Any]:
    """An alert expected of ``schedule``: its series' labels and severity, and its text."""
    every = {"namespace": "evals", "schedule": schedule, "severity": "warning", **labels}
    every |= {"job": "kyai-kyai-operator-metrics", "pod": "kyai-kyai-operator-0"}
    text = {"summary": summary, "description": description}
    return {"exp_labels": every, "exp_annotations": text}


HOUR = 3600

#: At 4h: "late" last succeeded 3 periods (of 1h) ago, "fresh" 1 period ago, "paused" 3 ago
#: but suspended, "manual" 3h ago but has no spec.schedule (no period series).
NO_SUCCESS = {
    "interval": "1m",
    "input_series": [
        series("kyai_schedule_last_success_timestamp_seconds", "late", f"{1 * HOUR}x300"),
        series("kyai_schedule_period_seconds", "late", f"{HOUR}x300"),
        series("kyai_schedule_suspended", "late", "0x300"),
        series("kyai_schedule_last_success_timestamp_seconds", "fresh", f"{3 * HOUR}x300"),
        series("kyai_schedule_period_seconds", "fresh", f"{HOUR}x300"),
        series("kyai_schedule_suspended", "fresh", "0x300"),
        series("kyai_schedule_last_success_timestamp_seconds", "paused", f"{1 * HOUR}x300"),
        series("kyai_schedule_period_seconds", "paused", f"{HOUR}x300"),
        series("kyai_schedule_suspended", "paused", "1x300"),
        series("kyai_schedule_last_success_timestamp_seconds", "manual", f"{1 * HOUR}x300"),
        series("kyai_schedule_suspended", "manual", "0x300"),
    ],
    "alert_rule_test": [
        {
            "eval_time": "4h",
            "alertname": "KyaiEvaluationScheduleNoSuccess",
            "exp_alerts": [
                fired(
                    "late",
                    summary="EvaluationSchedule evals/late has had no successful run for two "
                    "schedule periods",
                    description="No run of EvaluationSchedule evals/late has succeeded for "
                    "3h 0m 0s, more than two periods of its schedule (it is not suspended). "
                    "Its runs and their phases: kubectl -n evals get er -l "
                    "kyai.io/schedule=late",
                )
            ],
        },
        # Two periods exactly (at 3h) is not yet more than two.
        {"eval_time": "3h", "alertname": "KyaiEvaluationScheduleNoSuccess", "exp_alerts": []},
    ],
}

#: "worse" regressed (change -0.0875) from 5m to 30m, then its next run did not; "steady"
#: never regressed.
REGRESSED = {
    "interval": "1m",
    "input_series": [
        series("kyai_schedule_regressed", "worse", "0x4 1x25 0x20"),
        series("kyai_schedule_change", "worse", "-0.01x4 -0.0875x25 0.002x20"),
        series("kyai_schedule_regressed", "steady", "0x50"),
        series("kyai_schedule_change", "steady", "0.01x50"),
    ],
    "alert_rule_test": [
        {
            "eval_time": "10m",
            "alertname": "KyaiEvaluationRegressed",
            "exp_alerts": [
                fired(
                    "worse",
                    summary="EvaluationSchedule evals/worse regressed",
                    description="The newest finished run of EvaluationSchedule evals/worse is "
                    "shown worse than its baseline by more than spec.regression.margin: change "
                    "-0.0875 of the score scale. The Regressed condition names both runs, the "
                    "difference's interval and p: kubectl -n evals describe esched worse",
                )
            ],
        },
        {"eval_time": "3m", "alertname": "KyaiEvaluationRegressed", "exp_alerts": []},
        {"eval_time": "40m", "alertname": "KyaiEvaluationRegressed", "exp_alerts": []},
    ],
}

#: "broken" has a run fail at 10m; "fine" only succeeds (its failed counter stays 0).
FAILED = {
    "interval": "1m",
    "input_series": [
        series("kyai_schedule_runs_total", "broken", "0x9 1x200", outcome="failed"),
        series("kyai_schedule_runs_total", "broken", "2x200", outcome="succeeded"),
        series("kyai_schedule_runs_total", "fine", "0x200", outcome="failed"),
        series("kyai_schedule_runs_total", "fine", "0x4 1x30 2x170", outcome="succeeded"),
    ],
    "alert_rule_test": [
        {
            "eval_time": "20m",
            "alertname": "KyaiScheduledRunFailed",
            "exp_alerts": [
                fired(
                    "broken",
                    outcome="failed",
                    summary="A run of EvaluationSchedule evals/broken failed",
                    description="A run of EvaluationSchedule evals/broken ended Failed in the "
                    "last 1h. Its runs and their phases: kubectl -n evals get er -l "
                    "kyai.io/schedule=broken",
                )
            ],
        },
        {"eval_time": "5m", "alertname": "KyaiScheduledRunFailed", "exp_alerts": []},
        # An hour after the failure, with no other since, the window has passed it.
        {"eval_time": "2h", "alertname": "KyaiScheduledRunFailed", "exp_alerts": []},
    ],
}


@needs_promtool
@pytest.mark.parametrize(
    "case", [NO_SUCCESS, REGRESSED, FAILED], ids=["no-success", "regressed", "run-failed"]
)
def test_promtool_test_rules_fires_and_stays_silent(
    rules_file: Path, case: dict[str, Any], tmp_path: Path
) -> None:
    tests = tmp_path / "tests.yaml"
    tests.write_text(
        yaml.safe_dump(
            {"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": [case]},
            sort_keys=False,
        )
    )
    result = subprocess.run(
        [str(PROMTOOL), "test", "rules", str(tests)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ((), None),
        (("--set", "prometheusRule.enabled=true"), "no alert rules were rendered"),
        (
            ("--set", "prometheusRule.enabled=true", "--api-versions", CRD),
            "The PrometheusRule kyai-kyai-operator alerts on EvaluationSchedules",
        ),
    ],
)
def test_notes_say_whether_the_alerts_were_rendered(
    helm_binary: Path, tmp_path: Path, extra: tuple[str, ...], said: str | None
) -> None:
    notes = _chart.rendered_notes(tmp_path, *extra)
    for sentence in ("no alert rules were rendered", "alerts on EvaluationSchedules"):
        assert (sentence in notes) == (said is not None and sentence in said), sentence
