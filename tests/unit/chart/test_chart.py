"""The Helm chart and the kustomize config: lint, render, and check what they would install.

Helm comes from scripts/install-helm.sh (into .venv/bin/helm); kubectl's built-in kustomize
builds config/. Both run offline.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyai.api import EngineArgsSetSpec, EvaluationRunSpec, SnapshotSpec, WorkloadSpec
from kyai.metrics import RunMetrics, ScheduleMetrics, SweepMetrics
from kyai.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "kyai-operator"
CONFIG = ROOT / "config"
HELM = ROOT / ".venv" / "bin" / "helm"
KUBECTL = shutil.which("kubectl")
RELEASE_NS = "kyai-under-test"

CUSTOM_VALUES: dict[str, Any] = {
    "watchNamespaces": ["team-a", "team-b"],
    "defaultJudge": {
        "endpoint": "https://judge.example.test/v1",
        "model": "judge-70b",
        "apiKeySecret": {"name": "judge-key", "key": "token"},
    },
    "engineImages": {"vllm": "registry.local/vllm:pinned", "trtllm": "registry.local/trt:1"},
    "workerImage": {"repository": "registry.local/kyai-worker", "tag": "9.9.9"},
    "metrics": {"port": 9090, "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "health": {"port": 9091},
    "grafanaDashboard": {"enabled": True, "labels": {"team": "ml"}},
    "extraEnv": [{"name": "KYAI_WORKLOAD_POLL_SECONDS", "value": "5"}],
    "missingReferenceGraceSeconds": 120,
    "snapshotRetrySeconds": 10,
}

# -- the operator's permissions, as the design states them ------------------------------------

KYAI_RESOURCES = ["engineargssets", "workloads", "snapshots", "evaluationruns"]
ALL_VERBS = {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
CHILD_VERBS = {"create", "get", "list", "watch", "patch", "update", "delete"}
READ = {"get", "list", "watch"}


#: Leader election: the operator's Lease in the release namespace (client-go's verbs).
LEASE_PERMISSIONS = {
    ("coordination.k8s.io", "leases", verb) for verb in ("get", "create", "update")
}


def expected_namespaced_permissions() -> set[tuple[str, str, str]]:
    wanted: set[tuple[str, str, str]] = set()
    for resource in KYAI_RESOURCES:
        for verb in ALL_VERBS:
            wanted |= {("kyai.io", resource, verb), ("kyai.io", f"{resource}/status", verb)}
        wanted.add(("kyai.io", f"{resource}/finalizers", "update"))
    # Sweeps: watched, their status written, their children owned (users create them).
    for resource in ("evaluationsweeps", "evaluationsweeps/status"):
        wanted |= {("kyai.io", resource, verb) for verb in ("get", "list", "patch", "watch")}
    wanted.add(("kyai.io", "evaluationsweeps/finalizers", "update"))
    # Schedules: watched, their status written and their run-now annotation removed; the
    # runs they make are owned (users create the schedules).
    for resource in ("evaluationschedules", "evaluationschedules/status"):
        wanted |= {("kyai.io", resource, verb) for verb in READ | {"patch", "update"}}
    wanted.add(("kyai.io", "evaluationschedules/finalizers", "update"))
    children = [
        ("apps", "deployments"),
        ("", "services"),
        ("batch", "jobs"),
        ("", "persistentvolumeclaims"),
        ("", "configmaps"),
        ("", "serviceaccounts"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("networking.k8s.io", "networkpolicies"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    ]
    wanted |= {(group, resource, verb) for group, resource in children for verb in CHILD_VERBS}
    # Secrets: read (a run's named keys exist), never created: no key is copied anywhere.
    wanted |= {("", "secrets", "get")}
    wanted |= {("", resource, verb) for resource in ("pods", "pods/log") for verb in READ}
    wanted |= {("", "events", "create"), ("", "events", "patch")}
    # Kueue's Workloads: read (WaitingForQuota, Preempted), never written.
    wanted |= {("kueue.x-k8s.io", "workloads", verb) for verb in READ}
    return wanted


EXPECTED_CLUSTER_PERMISSIONS = {
    ("apiextensions.k8s.io", "customresourcedefinitions", verb) for verb in READ
} | {("", "namespaces", verb) for verb in READ}


def permissions(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    found = set()
    for rule in rules:
        assert "resourceNames" not in rule or rule["resources"] == ["secrets"], rule
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    found.add((group, resource, verb))
    return found


# -- rendering --------------------------------------------------------------------------------


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def helm_binary() -> Path:
    if not HELM.exists():
        pytest.skip("helm is not installed: run scripts/install-helm.sh (make setup does)")
    return HELM


@pytest.fixture(scope="module")
def values_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("values") / "custom.yaml"
    path.write_text(yaml.safe_dump(CUSTOM_VALUES))
    yield path


def render(values: Path | None = None, *extra: str) -> list[dict[str, Any]]:
    args = ["template", "kyai", str(CHART), "--namespace", RELEASE_NS, *extra]
    if values is not None:
        args += ["--values", str(values)]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def default_objects(helm_binary: Path) -> list[dict[str, Any]]:
    return render()


@pytest.fixture(scope="module")
def custom_objects(helm_binary: Path, values_file: Path) -> list[dict[str, Any]]:
    return render(values_file)


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The operator's objects of ``kind`` (the judge gateway's: test_gateway_chart.py)."""
    return [
        obj
        for obj in objects
        if obj["kind"] == kind
        and obj["metadata"]["labels"].get("app.kubernetes.io/component") != "judge-gateway"
    ]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = of_kind(objects, kind)
    return found


def operator_role(objects: list[dict[str, Any]]) -> dict[str, Any]:
    roles = [
        role
        for role in of_kind(objects, "ClusterRole")
        if not any(
            key.startswith("rbac.authorization.k8s.io/aggregate")
            for key in role["metadata"]["labels"]
        )
    ]
    (role,) = roles
    return role


# -- lint -------------------------------------------------------------------------------------


def test_helm_lint_default_and_custom_values(helm_binary: Path, values_file: Path) -> None:
    for extra in ([], ["--values", str(values_file)]):
        result = helm("lint", "--strict", str(CHART), *extra)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("replicas=-1", "replicas"),
        ("imageTypo.tag=x", "imageTypo"),
        ("metrics.port=0", "port"),
        ("leaderElection.leaseTypo=1", "leaseTypo"),
    ],
)
def test_values_schema_refuses_bad_values(helm_binary: Path, setting: str, complaint: str) -> None:
    result = helm("lint", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert complaint in result.stdout + result.stderr


# -- rendered objects -------------------------------------------------------------------------


def test_no_hard_coded_namespace_in_templates() -> None:
    for template in (CHART / "templates").glob("*.yaml"):
        for number, line in enumerate(template.read_text().splitlines(), 1):
            if re.match(r"^\s*namespace:", line):
                assert "{{" in line, f"{template.name}:{number} hard-codes a namespace: {line}"


def test_namespaced_objects_land_in_the_release_namespace(
    default_objects: list[dict[str, Any]], custom_objects: list[dict[str, Any]]
) -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
    for objects, allowed in (
        (default_objects, {RELEASE_NS}),
        (custom_objects, {RELEASE_NS, *CUSTOM_VALUES["watchNamespaces"]}),
    ):
        for obj in objects:
            namespace = obj["metadata"].get("namespace")
            if obj["kind"] in cluster_scoped:
                assert namespace is None, obj["metadata"]["name"]
            else:
                assert namespace in allowed, (obj["kind"], obj["metadata"]["name"], namespace)
            if obj["kind"] in ("Role", "RoleBinding"):
                continue
            assert namespace in (None, RELEASE_NS)


def test_standard_labels_on_every_object(custom_objects: list[dict[str, Any]]) -> None:
    for obj in custom_objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "kyai"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"].startswith("kyai-operator-")
        assert labels["app.kubernetes.io/part-of"] == "kyai"


def test_cluster_wide_rbac_has_exactly_the_needed_verbs(
    default_objects: list[dict[str, Any]],
) -> None:
    role = operator_role(default_objects)
    assert permissions(role["rules"]) == (
        expected_namespaced_permissions() | EXPECTED_CLUSTER_PERMISSIONS
    )
    (election,) = of_kind(default_objects, "Role")  # the Lease's, nothing else namespaced
    assert permissions(election["rules"]) == LEASE_PERMISSIONS
    binding = one(default_objects, "ClusterRoleBinding")
    account = one(default_objects, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": RELEASE_NS}
    ]


def test_watched_namespaces_get_roles_and_the_cluster_role_shrinks(
    custom_objects: list[dict[str, Any]],
) -> None:
    assert permissions(operator_role(custom_objects)["rules"]) == EXPECTED_CLUSTER_PERMISSIONS
    account = one(custom_objects, "ServiceAccount")["metadata"]["name"]
    roles = {
        (r["metadata"]["namespace"], r["metadata"]["name"]): r
        for r in of_kind(custom_objects, "Role")
    }
    bindings = of_kind(custom_objects, "RoleBinding")
    for namespace in CUSTOM_VALUES["watchNamespaces"]:
        (role,) = [r for (ns, _), r in roles.items() if ns == namespace]
        assert permissions(role["rules"]) == expected_namespaced_permissions()
        (binding,) = [b for b in bindings if b["metadata"]["namespace"] == namespace]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        }
        assert binding["subjects"][0]["namespace"] == RELEASE_NS
        assert binding["subjects"][0]["name"] == account
    # The operator never reads the default judge's key (the gateway mounts it): no Role in
    # the release namespace grants it a Secret there, only its Lease.
    released = [r for (ns, _), r in roles.items() if ns == RELEASE_NS]
    assert [permissions(r["rules"]) for r in released] == [LEASE_PERMISSIONS]


def test_aggregated_user_roles(default_objects: list[dict[str, Any]]) -> None:
    aggregated = {
        label: role
        for role in of_kind(default_objects, "ClusterRole")
        for label in role["metadata"]["labels"]
        if label.startswith("rbac.authorization.k8s.io/aggregate-to-")
    }
    assert set(aggregated) == {
        "rbac.authorization.k8s.io/aggregate-to-edit",
        "rbac.authorization.k8s.io/aggregate-to-admin",
        "rbac.authorization.k8s.io/aggregate-to-view",
    }
    viewer = permissions(aggregated["rbac.authorization.k8s.io/aggregate-to-view"]["rules"])
    assert {verb for _, _, verb in viewer} == READ
    editor = permissions(aggregated["rbac.authorization.k8s.io/aggregate-to-edit"]["rules"])
    assert {("kyai.io", "evaluationruns", "create"), ("kyai.io", "workloads", "delete")} <= editor
    assert {("kyai.io", "evaluationsweeps", verb) for verb in ("create", "delete")} <= editor
    assert {("kyai.io", "evaluationsweeps", verb) for verb in READ} <= viewer
    assert {("kyai.io", "evaluationschedules", verb) for verb in ("create", "delete")} <= editor
    assert ("kyai.io", "evaluationschedules/status", "get") in editor
    assert {("kyai.io", "evaluationschedules", verb) for verb in READ} <= viewer
    assert {("kyai.io", "evaluationschedules/status", verb) for verb in READ} <= viewer
    assert not any(res.endswith("/status") and verb != "get" for _, res, verb in editor)


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item["value"] for item in container["env"]}


def test_operator_deployment_defaults(default_objects: list[dict[str, Any]]) -> None:
    deployment = one(default_objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["kyai", "operator"]
    assert container["image"].endswith(":0.1.0")
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert pod["serviceAccountName"] == one(default_objects, "ServiceAccount")["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    settings = OperatorSettings.from_env(env_of(deployment))
    assert settings.namespaces == ()
    assert settings.worker_image == container["image"]
    assert (settings.metrics_port, settings.health_port) == (8080, 8081)
    assert settings.default_judge_endpoint is None
    service = one(default_objects, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert service["spec"]["selector"].items() <= pod_labels(deployment).items()
    assert not of_kind(default_objects, "ServiceMonitor")
    assert not of_kind(default_objects, "ConfigMap")


def test_readiness_probe_and_chart_metadata(default_objects: list[dict[str, Any]]) -> None:
    (container,) = one(default_objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for key in ("icon", "home"):
        assert chart[key].startswith("https://")
    assert chart["sources"] and chart["maintainers"][0]["name"]


def test_part_of_label_is_the_same_on_crds_chart_and_kustomize(
    default_objects: list[dict[str, Any]],
) -> None:
    part_of = {
        obj["metadata"]["labels"]["app.kubernetes.io/part-of"]
        for obj in default_objects
        + kustomize(CONFIG / "default")
        + kustomize(CONFIG / "prometheus")
        if "app.kubernetes.io/part-of" in obj["metadata"].get("labels", {})
    }
    crds = [yaml.safe_load(path.read_text()) for path in (CHART / "crds").glob("*.yaml")]
    part_of |= {crd["metadata"]["labels"]["app.kubernetes.io/part-of"] for crd in crds}
    assert part_of == {"kyai"}


def test_image_digest_pins_operator_and_workers(helm_binary: Path) -> None:
    digest = "sha256:" + "b" * 64
    objects = render(None, "--set", f"image.digest={digest}")
    deployment = one(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/kyai-io/kyai-operator@{digest}"
    assert env_of(deployment)["KYAI_WORKER_IMAGE"] == container["image"]
    (test_pod,) = [pod for pod in of_kind(objects, "Pod")]
    assert test_pod["spec"]["containers"][0]["image"] == container["image"]
    bad = helm("lint", str(CHART), "--set", "image.digest=latest")
    assert bad.returncode != 0 and "digest" in bad.stdout + bad.stderr


def test_helm_test_pod_checks_health_and_crds(default_objects: list[dict[str, Any]]) -> None:
    (pod,) = of_kind(default_objects, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    service = one(default_objects, "Service")
    ports = {port["name"]: port["port"] for port in service["spec"]["ports"]}
    (container,) = pod["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["HEALTH_URL"] == (
        f"http://{service['metadata']['name']}.{RELEASE_NS}.svc:{ports['health']}/healthz"
    )
    assert set(env["CRDS"].split()) == {
        f"{plural}.kyai.io"
        for plural in (
            "engineargssets",
            "workloads",
            "snapshots",
            "evaluationruns",
            "evaluationsweeps",
            "evaluationschedules",
        )
    }
    # The operator's account may read CRDs: the test pod uses it.
    assert (
        pod["spec"]["serviceAccountName"]
        == one(default_objects, "ServiceAccount")["metadata"]["name"]
    )
    script = container["command"][-1]
    compile(script, "helm-test", "exec")  # valid Python
    assert "Established" in script


@pytest.mark.parametrize(
    ("values", "api_versions", "rendered"),
    [
        ([], [], False),  # auto, no Prometheus Operator
        ([], ["monitoring.coreos.com/v1/ServiceMonitor"], True),  # auto, CRDs present
        (["metrics.serviceMonitor.enabled=true"], [], True),  # explicit
        (
            ["metrics.serviceMonitor.enabled=false"],
            ["monitoring.coreos.com/v1/ServiceMonitor"],
            False,
        ),
    ],
)
def test_service_monitor_follows_the_cluster_or_an_explicit_value(
    helm_binary: Path, values: list[str], api_versions: list[str], rendered: bool
) -> None:
    extra = [arg for value in values for arg in ("--set", value)]
    extra += [arg for version in api_versions for arg in ("--api-versions", version)]
    monitors = of_kind(
        render(None, *extra, "--set", "metrics.serviceMonitor.release=kps"), "ServiceMonitor"
    )
    assert len(monitors) == int(rendered)
    for monitor in monitors:
        assert monitor["metadata"]["labels"]["release"] == "kps"
        assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def pod_labels(deployment: dict[str, Any]) -> dict[str, str]:
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


def test_operator_settings_from_custom_values(custom_objects: list[dict[str, Any]]) -> None:
    deployment = one(custom_objects, "Deployment")
    # Every KYAI_* variable the chart sets must be one the operator's settings know.
    settings = OperatorSettings.from_env(env_of(deployment))
    assert settings.namespaces == ("team-a", "team-b")
    assert settings.worker_image == "registry.local/kyai-worker:9.9.9"
    assert settings.engine_image("vllm") == "registry.local/vllm:pinned"
    assert settings.engine_image("trtllm") == "registry.local/trt:1"
    assert settings.engine_image("sglang") == OperatorSettings().engine_image("sglang")
    assert settings.default_judge_endpoint == "https://judge.example.test/v1"
    assert settings.default_judge_model == "judge-70b"
    # The default judge goes through the gateway: the operator knows no key Secret at all.
    gateway = f"http://kyai-kyai-operator-judge-gateway.{RELEASE_NS}.svc:8080/v1"
    assert settings.default_judge_gateway == gateway
    assert settings.default_judge_gateway_audience == "kyai-judge-gateway"
    assert settings.default_judge_gateway_token_seconds == 600
    assert settings.default_judge_namespace_selector.empty
    assert settings.default_judge_secret_name is None
    assert settings.default_judge_secret_namespace is None
    assert (settings.metrics_port, settings.health_port) == (9090, 9091)
    assert settings.workload_poll_seconds == 5
    assert settings.missing_reference_grace_seconds == 120
    assert settings.snapshot_retry_seconds == 10


def test_service_monitor_scrapes_the_metrics_service(custom_objects: list[dict[str, Any]]) -> None:
    monitor = one(custom_objects, "ServiceMonitor")
    service = one(custom_objects, "Service")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    assert service["spec"]["ports"][0]["port"] == 9090


#: The EvaluationSchedule series issue 44 names, name -> labels (the dashboard's and the alert
#: rules' contract with kyai.metrics; test_prometheus_rules.py reads it).
SCHEDULE_SERIES = {
    "kyai_schedule_last_score": {"namespace", "schedule"},
    "kyai_schedule_last_run_timestamp_seconds": {"namespace", "schedule"},
    "kyai_schedule_last_success_timestamp_seconds": {"namespace", "schedule"},
    "kyai_schedule_period_seconds": {"namespace", "schedule"},
    "kyai_schedule_suspended": {"namespace", "schedule"},
    "kyai_schedule_regressed": {"namespace", "schedule"},
    "kyai_schedule_runs_total": {"namespace", "schedule", "outcome"},
    "kyai_schedule_change": {"namespace", "schedule"},
}


def exported_series() -> dict[str, set[str]]:
    """Sample name -> label names, as a running operator's /metrics shows them."""
    metrics = RunMetrics()
    metrics.observe(
        {
            "metadata": {"namespace": "team-a", "name": "r1"},
            "spec": {"workloadRef": {"name": "w"}},
            "status": {
                "phase": "Succeeded", "avgScore": 0.5, "avgLatencyMs": 120.0, "questions": 4,
                "errors": {"timeout": 1}, "errorCount": 1, "comparisonKey": "k", "model": "m",
                "framework": "vllm", "dataset": "d", "datasetVersion": "v",
                "startedAt": "2026-01-31T12:00:00Z", "completedAt": "2026-01-31T12:01:00Z",
                "avgScoreInterval": {"low": 0.15, "high": 0.85, "standardError": 0.29,
                                     "confidence": 0.95, "method": "wilson"},
                "serving": {"ttftP50Ms": 50.0, "ttftP90Ms": 60.0, "ttftP99Ms": 70.0,
                            "tpotP50Ms": 5.0, "e2eP50Ms": 90.0, "outputTokensPerSecond": 30.0,
                            "gpuSeconds": 2.0, "server": {"ttftP50Ms": 49.0, "e2eP50Ms": 88.0}},
            },
        }
    )  # fmt: skip
    with metrics.reconciling("EvaluationRun"):
        pass
    sweeps = SweepMetrics(registry=metrics.registry)  # as the operator registers it
    sweeps.observe(
        {
            "metadata": {"namespace": "team-a", "name": "s1"},
            "status": {"phase": "Running", "cells": {"total": 2, "running": 1, "succeeded": 1}},
        }
    )
    schedules = ScheduleMetrics(registry=metrics.registry)
    schedules.observe(
        {
            "metadata": {"namespace": "team-a", "name": "nightly"},
            "spec": {"schedule": "0 2 * * *", "suspend": False},
            "status": {
                "phase": "Active", "lastScore": 0.75, "change": -0.05, "regressed": True,
                "periodSeconds": 86400.0, "lastSuccessfulTime": "2026-01-31T02:04:00Z",
                "runs": {"succeeded": 2, "failed": 1},
                "history": [{"run": "nightly-1", "trigger": "schedule", "phase": "Succeeded",
                             "finishedAt": "2026-01-31T02:04:00Z", "score": 0.75}],
            },
        }
    )  # fmt: skip
    series: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series


def promql_selectors(expr: str) -> tuple[list[tuple[str, set[str]]], set[str]]:
    """(metric name, matcher labels) of every selector, and the labels of by/on/without."""
    promql_parser = pytest.importorskip("promql_parser")
    grafana = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", expr)
    if grafana:  # Grafana's templating function: a selector and a label
        inner, labels = promql_selectors(grafana.group(1))
        return inner, labels | {grafana.group(2)}
    selectors: list[tuple[str, set[str]]] = []
    grouping: set[str] = set()

    def walk(node: Any) -> None:
        kind = type(node).__name__
        if kind == "VectorSelector":
            selectors.append((node.name, {m.name for m in node.matchers.matchers}))
        elif kind == "MatrixSelector":
            walk(node.vector_selector)
        elif kind == "AggregateExpr":
            if node.modifier is not None:
                grouping.update(node.modifier.labels)
            walk(node.expr)
        elif kind == "BinaryExpr":
            matching = node.modifier.matching if node.modifier is not None else None
            if matching is not None:
                grouping.update(matching.labels)
            walk(node.lhs)
            walk(node.rhs)
        elif kind == "Call":
            for arg in node.args:
                walk(arg)
        elif kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
            walk(node.expr)
        else:
            assert kind in ("NumberLiteral", "StringLiteral"), kind

    walk(promql_parser.parse(expr))
    return selectors, grouping


def test_dashboard_queries_use_only_what_the_operator_exports(
    custom_objects: list[dict[str, Any]],
) -> None:
    config_map = one(custom_objects, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["labels"]["team"] == "ml"
    (text,) = config_map["data"].values()
    dashboard = json.loads(text)
    assert dashboard == json.loads((CHART / "dashboards" / "kyai.json").read_text())
    expressions = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    variables = {var["name"]: var for var in dashboard["templating"]["list"]}
    expressions += [var["definition"] for var in variables.values() if "definition" in var]
    expressions += [note["expr"] for note in dashboard["annotations"]["list"] if "expr" in note]
    exported = exported_series()
    # The operator serves the schedule series issue 44 names, with its labels.
    assert {name: exported.get(name) for name in SCHEDULE_SERIES} == SCHEDULE_SERIES
    assert "kyai_evaluation_latency_seconds" in exported and "kyai_operator_build_info" in exported
    used = set()
    for expr in expressions:
        selectors, grouping = promql_selectors(expr)
        assert selectors, expr
        labels_here: set[str] = set()
        for name, matched in selectors:
            assert name in exported, f"{name} is not exported by the operator ({expr})"
            assert matched <= exported[name], (name, matched - exported[name])
            labels_here |= exported[name]
            used.add(name)
        assert grouping <= labels_here, (expr, grouping - labels_here)
        if "kyai_evaluation_score" in expr and "label_values" not in expr:
            assert '$comparison_key"' in expr and "$dataset" in expr, expr
    # The deprecated millisecond series is left to old dashboards.
    assert "kyai_evaluation_latency_ms" not in used
    assert "kyai_evaluation_latency_seconds" in used
    assert {"kyai_evaluation_score_interval", "kyai_evaluation_ttft_seconds"} <= used
    assert {"kyai_schedule_last_score", "kyai_schedule_regressed"} <= used


def panel_named(dashboard: dict[str, Any], start: str) -> dict[str, Any]:
    (found,) = [panel for panel in dashboard["panels"] if panel["title"].startswith(start)]
    return found


def test_dashboard_draws_the_interval_and_quality_against_speed() -> None:
    dashboard = json.loads((CHART / "dashboards" / "kyai.json").read_text())
    # The ranking table shows the interval and the serving figures beside each score.
    table = panel_named(dashboard, "Ranking")
    assert table["type"] == "table"
    exprs = {target["refId"]: target["expr"] for target in table["targets"]}
    assert 'bound="low"' in exprs["D"] and 'bound="high"' in exprs["E"]
    assert 'kyai_evaluation_ttft_seconds{quantile="0.5"' in exprs["F"]
    assert "kyai_evaluation_output_tokens_per_second" in exprs["G"]
    rename = next(t for t in table["transformations"] if t["id"] == "organize")["options"]
    assert rename["renameByName"]["Value #D"] == "scoreLow95"
    # A bar from the interval's low end to its high end, per run: a transparent bar up to
    # the low end, then two stacked parts meeting at the score.
    bars = panel_named(dashboard, "Score and its 95 % interval")
    assert bars["type"] == "barchart" and bars["options"]["stacking"] == "normal"
    parts = {target["refId"]: target["expr"] for target in bars["targets"]}
    assert parts["A"].startswith("min by") and 'bound="low"' in parts["A"]
    assert "kyai_evaluation_score{" in parts["B"] and 'bound="low"' in parts["B"]
    assert 'bound="high"' in parts["C"] and "kyai_evaluation_score{" in parts["C"]
    hidden = bars["fieldConfig"]["overrides"][0]
    assert hidden["matcher"]["options"] == "below the interval"
    assert {"id": "custom.fillOpacity", "value": 0} in hidden["properties"]
    # Score against TTFT p50, one point per run of the key.
    speed = panel_named(dashboard, "Quality against speed")
    assert speed["type"] == "xychart"
    targets = {target["refId"]: target["expr"] for target in speed["targets"]}
    assert targets["A"].startswith("kyai_evaluation_score{")
    assert 'kyai_evaluation_ttft_seconds{quantile="0.5"' in targets["B"]
    assert speed["options"]["series"][0]["x"] == "TTFT p50"
    assert speed["options"]["series"][0]["y"] == "score"
    for panel in (table, bars, speed):
        for target in panel["targets"]:
            assert 'comparison_key="$comparison_key"' in target["expr"], target["expr"]


def test_dashboard_draws_each_schedules_score_with_its_regressions_marked() -> None:
    dashboard = json.loads((CHART / "dashboards" / "kyai.json").read_text())
    (row,) = [panel for panel in dashboard["panels"] if panel["type"] == "row"]
    assert row["title"] == "Continuous evaluation" and row["collapsed"] is False
    scores = panel_named(dashboard, "Score over time per schedule")
    assert scores["type"] == "timeseries"
    assert scores["gridPos"]["y"] == row["gridPos"]["y"] + row["gridPos"]["h"]
    # The row holds what lies below it: nothing of the other panels.
    assert all(p["gridPos"]["y"] < row["gridPos"]["y"] for p in dashboard["panels"]
               if p not in (row, scores))  # fmt: skip
    targets = {target["refId"]: target for target in scores["targets"]}
    score = "max by (namespace, schedule) (kyai_schedule_last_score)"
    assert targets["A"]["expr"] == score
    assert targets["A"]["legendFormat"] == "{{namespace}}/{{schedule}}"
    # The regressions: the score again, only where the schedule regressed, drawn as red points.
    regressed = "max by (namespace, schedule) (kyai_schedule_regressed) == 1"
    assert targets["B"]["expr"] == f"{score} and on (namespace, schedule) ({regressed})"
    (points,) = scores["fieldConfig"]["overrides"]
    assert points["matcher"] == {"id": "byFrameRefID", "options": "B"}
    assert {"id": "custom.drawStyle", "value": "points"} in points["properties"]
    # ... and marked on the panel's time axis by an annotation of the same condition.
    (note,) = dashboard["annotations"]["list"]
    assert note["expr"] == regressed and note["enable"] is True
    assert note["filter"] == {"exclude": False, "ids": [scores["id"]]}
    for expr in (*(t["expr"] for t in targets.values()), note["expr"]):
        selectors, grouping = promql_selectors(expr)
        assert {name for name, _ in selectors} <= set(SCHEDULE_SERIES), expr
        assert grouping == {"namespace", "schedule"}, expr


def test_dashboard_ranks_one_comparison_key_by_score_then_latency() -> None:
    dashboard = json.loads((CHART / "dashboards" / "kyai.json").read_text())
    key = next(var for var in dashboard["templating"]["list"] if var["name"] == "comparison_key")
    # One key at a time (the first by default): rankings never mix comparison keys.
    assert key["multi"] is False and key["includeAll"] is False and key["current"] == {}
    (table,) = [panel for panel in dashboard["panels"] if panel["title"].startswith("Ranking")]
    exprs = {target["refId"]: target["expr"] for target in table["targets"]}
    for expr in exprs.values():
        assert 'comparison_key="$comparison_key"' in expr
    sort = next(t for t in table["transformations"] if t["id"] == "sortBy")["options"]["sort"]
    assert sort == [{"field": "rank", "desc": True}]
    rename = next(t for t in table["transformations"] if t["id"] == "organize")["options"]
    assert rename["renameByName"]["Value #C"] == "rank"
    # The rank column, evaluated as Prometheus would on runs of equal score: lower latency
    # first; a higher score first whatever the latency (up to the 1000 s cap).
    assert "kyai_evaluation_latency_seconds" in exprs["C"] and "1e-9" in exprs["C"]

    def rank_value(score: float, latency: float | None) -> float:
        return score - min(latency, 1000.0) * 1e-9 if latency is not None else score - 1e-6

    runs = [("slow", 0.75, 9.0), ("fast", 0.75, 0.5), ("best", 0.8, 999.0), ("none", 0.75, None)]
    ordered = sorted(runs, key=lambda r: rank_value(r[1], r[2]), reverse=True)
    assert [name for name, _, _ in ordered] == ["best", "fast", "slow", "none"]


# -- CRDs: one source, three copies -----------------------------------------------------------


def test_crd_copies_match_the_generated_crds() -> None:
    generated = {path.name: path.read_text() for path in (ROOT / "crds").glob("*.yaml")}
    assert generated
    for copy in (CHART / "crds", CONFIG / "crd" / "bases"):
        copies = {path.name: path.read_text() for path in copy.glob("*.yaml")}
        assert copies == generated, (
            f"stale CRDs in {copy.relative_to(ROOT)}: cp crds/*.yaml {copy.relative_to(ROOT)}/"
        )


# -- schema validation (kubernetes-validate, offline OpenAPI schemas) ---------------------------


def test_rendered_objects_validate_against_kubernetes_schemas(
    default_objects: list[dict[str, Any]], custom_objects: list[dict[str, Any]]
) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for obj in default_objects + custom_objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com"):
            continue
        kubernetes_validate.validate(obj, "1.32.0", strict=True)


# -- kustomize --------------------------------------------------------------------------------


def kustomize(directory: Path) -> list[dict[str, Any]]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    result = subprocess.run(
        [KUBECTL, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_kustomize_default_builds_a_consistent_install(
    default_objects: list[dict[str, Any]],
) -> None:
    objects = kustomize(CONFIG / "default")
    kinds = [obj["kind"] for obj in objects]
    assert kinds.count("CustomResourceDefinition") == 6
    for kind in ("Namespace", "ServiceAccount", "ClusterRoleBinding", "Deployment", "Service"):
        assert kind in kinds
    namespace = one(objects, "Namespace")["metadata"]["name"]
    deployment = one(objects, "Deployment")
    account = one(objects, "ServiceAccount")
    assert deployment["metadata"]["namespace"] == account["metadata"]["namespace"] == namespace
    assert (
        deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    )
    (binding,) = of_kind(objects, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": namespace}
    ]
    roles = {role["metadata"]["name"]: role for role in of_kind(objects, "ClusterRole")}
    manager = roles[binding["roleRef"]["name"]]
    # The same rules as the chart's.
    assert permissions(manager["rules"]) == permissions(operator_role(default_objects)["rules"])
    # An editor and a viewer role per kind.
    for singular in (
        "engineargsset",
        "workload",
        "snapshot",
        "evaluationrun",
        "evaluationsweep",
        "evaluationschedule",
    ):
        assert any(name.endswith(f"{singular}-editor-role") for name in roles)
        assert any(name.endswith(f"{singular}-viewer-role") for name in roles)
    settings = OperatorSettings.from_env(env_of(deployment))
    assert settings.metrics_port == 8080
    service = one(objects, "Service")
    assert service["spec"]["selector"].items() <= pod_labels(deployment).items()
    # The ServiceMonitor needs the Prometheus Operator's CRDs: it is config/prometheus's.
    assert "ServiceMonitor" not in kinds
    (monitor,) = kustomize(CONFIG / "prometheus")
    assert monitor["metadata"]["namespace"] == namespace
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )


def worker_and_operator_image(objects: list[dict[str, Any]]) -> tuple[str, str]:
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    return env["KYAI_WORKER_IMAGE"], container["image"]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"newName": "registry.local/kyai", "newTag": "9.9.9"}, "registry.local/kyai:9.9.9"),
        ({"newTag": "1.2.3"}, "ghcr.io/kyai-io/kyai-operator:1.2.3"),
        ({"digest": "sha256:" + "a" * 64}, "ghcr.io/kyai-io/kyai-operator@sha256:" + "a" * 64),
    ],
)
@pytest.mark.parametrize("where", ["default", "overlay"])
def test_kustomize_image_override_moves_the_worker_image_too(
    tmp_path: Path, override: dict[str, str], expected: str, where: str
) -> None:
    # Unchanged: both are the released image.
    worker, operator = worker_and_operator_image(kustomize(CONFIG / "default"))
    assert worker == operator == "ghcr.io/kyai-io/kyai-operator:0.1.0"
    images = [{"name": "ghcr.io/kyai-io/kyai-operator", **override}]
    shutil.copytree(CONFIG, tmp_path / "config")
    if where == "default":  # `kustomize edit set image` in config/default
        target = tmp_path / "config" / "default"
        kustomization = yaml.safe_load((target / "kustomization.yaml").read_text())
        kustomization["images"] = images
    else:  # an overlay on top of config/default
        target = tmp_path / "overlay"
        target.mkdir()
        kustomization = {"resources": ["../config/default"], "images": images}
    (target / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    assert worker_and_operator_image(kustomize(target)) == (expected, expected)


SPEC_MODELS = {
    "EngineArgsSet": EngineArgsSetSpec,
    "Workload": WorkloadSpec,
    "Snapshot": SnapshotSpec,
    "EvaluationRun": EvaluationRunSpec,
}


def assert_subset(given: Any, dumped: Any, path: str = "spec") -> None:
    """Every key the sample writes survives a round trip: camelCase, known to the model."""
    if isinstance(given, dict):
        assert isinstance(dumped, dict), path
        for key, value in given.items():
            assert key in dumped, f"{path}.{key} is not a field (camelCase expected)"
            assert_subset(value, dumped[key], f"{path}.{key}")
    elif isinstance(given, list):
        assert isinstance(dumped, list) and len(given) == len(dumped), path
        for index, (item, back) in enumerate(zip(given, dumped, strict=True)):
            assert_subset(item, back, f"{path}[{index}]")


def test_samples_validate_against_the_api_models() -> None:
    samples = sorted((CONFIG / "samples").glob("kyai.io_v1alpha1_*.yaml"))
    assert [path.name.split("_")[-1] for path in samples] == [
        "engineargsset.yaml",
        "evaluationrun.yaml",
        "snapshot.yaml",
        "workload.yaml",
    ]
    seen: dict[str, list[Any]] = {}
    for path in samples:
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["apiVersion"] == "kyai.io/v1alpha1"
            assert path.name == f"kyai.io_v1alpha1_{doc['kind'].lower()}.yaml"
            spec = SPEC_MODELS[doc["kind"]].model_validate(doc["spec"])
            assert_subset(doc["spec"], spec.to_k8s())
            seen.setdefault(doc["kind"], []).append(spec)
    workloads = seen["Workload"]
    assert any(w.engine_args_set_ref and w.framework == "vllm" for w in workloads)
    assert any(w.endpoint is not None for w in workloads)
    snapshots = seen["Snapshot"]
    assert any(s.builtin for s in snapshots)
    assert any(s.source is not None and s.source.rows for s in snapshots)
    built = kustomize(CONFIG / "samples")
    assert len(built) == sum(len(specs) for specs in seen.values())


def test_kustomize_prometheus_monitor_builds() -> None:
    (monitor,) = kustomize(CONFIG / "prometheus")
    assert monitor["kind"] == "ServiceMonitor"


def rendered_notes(tmp_path: Path, *extra: str) -> str:
    """NOTES.txt as `helm install` prints it (helm template skips it: render a copy)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "notes-rendered.txt").write_text(
        (chart / "templates" / "NOTES.txt").read_text()
    )
    result = helm("template", "kyai", str(chart), "--namespace", RELEASE_NS, "--debug", *extra)
    start = result.stdout.index("KYAI Operator")
    return result.stdout[start:]


def test_notes_say_a_service_monitor_scrapes_only_when_one_is_rendered(
    helm_binary: Path, tmp_path: Path
) -> None:
    without = rendered_notes(tmp_path / "a")
    assert "(a ServiceMonitor scrapes them)" not in without
    assert "no ServiceMonitor was rendered" in without
    monitor = "monitoring.coreos.com/v1/ServiceMonitor"
    with_crd = rendered_notes(tmp_path / "b", "--api-versions", monitor)
    assert "(a ServiceMonitor scrapes them)" in with_crd
    forced_off = rendered_notes(
        tmp_path / "c", "--api-versions", monitor, "--set", "metrics.serviceMonitor.enabled=false"
    )
    assert "(a ServiceMonitor scrapes them)" not in forced_off


def test_notes_say_how_the_default_judge_is_reached_when_the_gateway_runs(
    helm_binary: Path, tmp_path: Path
) -> None:
    without = rendered_notes(tmp_path / "a").split("\n---")[0]
    assert "No default judge is configured" in without and "judge gateway" not in without
    judged = ("--set", "defaultJudge.endpoint=https://j/v1", "--set", "defaultJudge.model=big")
    gateway = f"http://kyai-kyai-operator-judge-gateway.{RELEASE_NS}.svc:8080/v1"
    notes = " ".join(rendered_notes(tmp_path / "b", *judged).split("\n---")[0].split())
    assert f"uses the default judge (big) through the judge gateway {gateway}" in notes
    assert f"the judge's key never leaves {RELEASE_NS}" in notes
    assert "kyai_judge_gateway_requests_total{namespace,code}" in notes
    assert "kyai_judge_gateway_tokens_total{namespace,kind}" in notes
    assert "defaultJudge.namespaceSelector" not in notes
    selector = ("--set", "defaultJudge.namespaceSelector.matchLabels.team=a")
    selected = " ".join(rendered_notes(tmp_path / "c", *judged, *selector).split())
    assert "Only namespaces that defaultJudge.namespaceSelector selects may use it" in selected


# -- leader election (issue 32) ---------------------------------------------------------------


def test_two_operator_replicas_elect_a_leader_by_default(
    default_objects: list[dict[str, Any]],
) -> None:
    deployment = one(default_objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    settings = OperatorSettings.from_env(env_of(deployment))
    assert settings.leader_elect is True
    assert settings.leader_election_id == "kyai-operator"
    timings = (
        settings.leader_election_lease_seconds,
        settings.leader_election_renew_deadline_seconds,
        settings.leader_election_retry_seconds,
    )
    assert timings == (15, 10, 2)
    assert settings.leader_election_namespace is None  # the pod's own (its service account's)
    pod = deployment["spec"]["template"]["spec"]
    spread = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert spread[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert spread[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    budget = one(default_objects, "PodDisruptionBudget")
    assert budget["metadata"]["namespace"] == RELEASE_NS
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    (election,) = of_kind(default_objects, "Role")
    (binding,) = [
        b for b in of_kind(default_objects, "RoleBinding")
        if b["roleRef"]["name"] == election["metadata"]["name"]
    ]  # fmt: skip
    assert election["metadata"]["namespace"] == binding["metadata"]["namespace"] == RELEASE_NS
    account = one(default_objects, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": RELEASE_NS}
    ]


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("leaderElection.enabled=false", "replicas > 1 needs leaderElection.enabled"),
        ("leaderElection.renewDeadlineSeconds=15", "leaseDurationSeconds > renewDeadlineSeconds"),
    ],
)
def test_unsafe_leader_election_values_are_refused(
    helm_binary: Path, setting: str, complaint: str
) -> None:
    result = helm("template", "kyai", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_one_replica_without_leader_election_is_todays_operator(helm_binary: Path) -> None:
    objects = render(None, "--set", "replicas=1", "--set", "leaderElection.enabled=false")
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert OperatorSettings.from_env(env_of(deployment)).leader_elect is False
    assert "affinity" not in deployment["spec"]["template"]["spec"]
    assert not of_kind(objects, "PodDisruptionBudget")
    assert not of_kind(objects, "Role")


def test_kustomize_grants_the_lease_in_the_operators_namespace() -> None:
    objects = kustomize(CONFIG / "default")
    namespace = one(objects, "Namespace")["metadata"]["name"]
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    (role,) = of_kind(objects, "Role")
    assert role["metadata"]["namespace"] == namespace
    assert permissions(role["rules"]) == LEASE_PERMISSIONS
    (binding,) = of_kind(objects, "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    ]


def test_default_queue_name_reaches_the_operators_settings(helm_binary: Path) -> None:
    unset = env_of(one(render(), "Deployment"))
    assert "KYAI_DEFAULT_QUEUE_NAME" not in unset
    assert OperatorSettings.from_env(unset).default_queue_name is None
    deployment = one(render(None, "--set", "defaultQueueName=team"), "Deployment")
    assert OperatorSettings.from_env(env_of(deployment)).default_queue_name == "team"
    # The schema refuses a name Kueue could never have (not a DNS subdomain).
    refused = helm("template", "kyai", str(CHART), "--set", "defaultQueueName=Team_A")
    assert refused.returncode != 0 and "defaultQueueName" in refused.stderr
