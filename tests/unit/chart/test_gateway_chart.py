"""The chart's judge gateway: rendered whenever a default judge is set, and what it may do.

Rendered with ``helm template`` (offline), checked against the gateway's own settings model
(every KYAI_GATEWAY_* variable the chart sets must parse) and the Kubernetes schemas.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyai.constants import LABEL_COMPONENT, LABEL_RUN
from kyai.gateway import GatewaySettings
from kyai.label_selector import LabelSelector
from kyai.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "kyai-operator"
HELM = ROOT / ".venv" / "bin" / "helm"
RELEASE_NS = "kyai-under-test"
COMPONENT = "judge-gateway"

JUDGE: dict[str, Any] = {
    "defaultJudge": {
        "endpoint": "https://judge.example.test/v1",
        "model": "judge-70b",
        "apiKeySecret": {"name": "judge-key", "key": "token"},
    }
}


def render(values: dict[str, Any] | None, tmp: Path, *extra: str) -> list[dict[str, Any]]:
    args = [str(HELM), "template", "kyai", str(CHART), "--namespace", RELEASE_NS, *extra]
    if values is not None:
        path = tmp / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["--values", str(path)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def helm_binary() -> Path:
    if not HELM.exists():
        pytest.skip("helm is not installed: run scripts/install-helm.sh (make setup does)")
    return HELM


@pytest.fixture(scope="module")
def judged(helm_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(JUDGE, tmp_path_factory.mktemp("judged"))


def gateway_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["metadata"]["labels"].get(LABEL_COMPONENT) == COMPONENT]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in gateway_objects(objects) if o["kind"] == kind]
    return found


def container_of(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def settings_of(deployment: dict[str, Any]) -> GatewaySettings:
    env = container_of(deployment)["env"]
    assert all("value" in item for item in env), "the gateway takes no secret through env"
    return GatewaySettings.from_env({item["name"]: item["value"] for item in env})


def permissions(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return LabelSelector.model_validate(selector).matches(labels)


# -- when it is rendered --------------------------------------------------------------------


def test_no_default_judge_no_gateway(helm_binary: Path, tmp_path: Path) -> None:
    assert gateway_objects(render(None, tmp_path)) == []


def test_a_default_judge_needs_its_model(helm_binary: Path, tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"defaultJudge": {"endpoint": "https://judge.example/v1"}}))
    result = subprocess.run(
        [str(HELM), "template", "kyai", str(CHART), "--values", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "defaultJudge.model is required when defaultJudge.endpoint is set" in result.stderr


def test_lint_and_the_kubernetes_schemas(
    helm_binary: Path, judged: list[dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(JUDGE))
    result = subprocess.run(
        [str(HELM), "lint", "--strict", str(CHART), "--values", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    objects = gateway_objects(judged)
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == [
        "ClusterRole", "ClusterRoleBinding", "Deployment", "NetworkPolicy", "Service",
        "ServiceAccount",
    ]  # fmt: skip
    for obj in objects:
        kubernetes_validate.validate(obj, "1.32.0", strict=True)
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "kyai"
        assert labels["app.kubernetes.io/part-of"] == "kyai"
        assert labels["helm.sh/chart"].startswith("kyai-operator-")
        cluster_scoped = obj["kind"] in ("ClusterRole", "ClusterRoleBinding")
        assert obj["metadata"].get("namespace") == (None if cluster_scoped else RELEASE_NS)


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("gateway.limits.concurrency=0", "concurrency"),
        ("gateway.port=0", "port"),
        ("gateway.limits.namespaces.team-a.rps=1", "rps"),
        ("gateway.limits.requestsPerSecond=0", "requestsPerSecond"),
        ("defaultJudge.namespaceSelector.matchExpressions[0].key=k", "operator"),
        ("gateway.typo=1", "typo"),
    ],
)
def test_the_schema_refuses_bad_gateway_values(
    helm_binary: Path, setting: str, complaint: str
) -> None:
    result = subprocess.run(
        [str(HELM), "lint", str(CHART), "--set", setting],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert complaint in result.stdout + result.stderr


# -- the Deployment -------------------------------------------------------------------------


def test_the_gateway_runs_the_operators_image_restricted(judged: list[dict[str, Any]]) -> None:
    deployment = one(judged, "Deployment")
    operator = next(
        o for o in judged
        if o["kind"] == "Deployment" and o["metadata"]["labels"][LABEL_COMPONENT] == "operator"
    )  # fmt: skip
    container = container_of(deployment)
    assert container["command"] == ["kyai", "judge-gateway"]
    assert container["image"] == container_of(operator)["image"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert pod["serviceAccountName"] == one(judged, "ServiceAccount")["metadata"]["name"]
    assert pod["serviceAccountName"] != operator["spec"]["template"]["spec"]["serviceAccountName"]
    kinds = ("startupProbe", "livenessProbe", "readinessProbe")
    probes = {name: container[name]["httpGet"] for name in kinds}
    assert probes == {
        "startupProbe": {"path": "/healthz", "port": "metrics"},
        "livenessProbe": {"path": "/healthz", "port": "metrics"},
        "readinessProbe": {"path": "/readyz", "port": "metrics"},
    }
    # No liveness probe before the process first answers (a slow start is no restart), and
    # the start may take longer than liveness would wait (its failures x its period).
    startup, liveness = container["startupProbe"], container["livenessProbe"]
    allowed = startup["periodSeconds"] * startup["failureThreshold"]
    assert allowed >= 60 and allowed > liveness["periodSeconds"] * liveness["failureThreshold"]
    assert startup["periodSeconds"] <= 5  # and the gateway starts serving soon after it answers


def test_the_settings_follow_the_values(helm_binary: Path, tmp_path: Path) -> None:
    values = {
        **JUDGE,
        "gateway": {
            "port": 8443,
            "metricsPort": 9443,
            "audience": "judge.example",
            "limits": {
                "concurrency": 8,
                "queue": 2,
                "queueTimeoutSeconds": 5,
                "requestsPerSecond": 2.5,
                "burst": 10,
                "namespaces": {"team-a": {"concurrency": 64, "requestsPerSecond": 100}},
            },
            "tokenCacheSeconds": 30,
            "failureCacheSeconds": 3,
            "upstreamTimeoutSeconds": 120,
            "extraEnv": [{"name": "KYAI_GATEWAY_MAX_BODY_BYTES", "value": "1048576"}],
        },
    }
    values["defaultJudge"] = {
        **JUDGE["defaultJudge"],
        "namespaceSelector": {"matchLabels": {"kyai.io/default-judge": "enabled"}},
    }
    deployment = one(render(values, tmp_path), "Deployment")
    settings = settings_of(deployment)
    assert settings.upstream_url == "https://judge.example.test/v1"
    assert (settings.model, settings.audience) == ("judge-70b", "judge.example")
    assert (settings.port, settings.metrics_port) == (8443, 9443)
    assert settings.limits_for("team-b").model_dump() == {
        "concurrency": 8,
        "queue": 2,
        "queue_timeout_seconds": 5.0,
        "requests_per_second": 2.5,
        "burst": 10,
    }
    team_a = settings.limits_for("team-a")
    assert (team_a.concurrency, team_a.requests_per_second, team_a.queue) == (64, 100.0, 2)
    assert settings.namespace_selector.matches({"kyai.io/default-judge": "enabled"})
    assert not settings.namespace_selector.matches({})
    assert (settings.token_cache_seconds, settings.failure_cache_seconds) == (30, 3)
    assert (settings.upstream_timeout_seconds, settings.max_body_bytes) == (120, 1048576)
    ports = {port["name"]: port["containerPort"] for port in container_of(deployment)["ports"]}
    assert ports == {"http": 8443, "metrics": 9443}


def operator_settings(objects: list[dict[str, Any]]) -> OperatorSettings:
    (deployment,) = [
        o for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["labels"][LABEL_COMPONENT] == "operator"
    ]  # fmt: skip
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert all("value" in item for item in container["env"]), "no secret reaches the operator"
    return OperatorSettings.from_env({item["name"]: item["value"] for item in container["env"]})


def test_the_operator_sends_runs_to_the_gateway_it_renders(
    helm_binary: Path, tmp_path: Path
) -> None:
    selector = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}
    values = {
        "defaultJudge": {**JUDGE["defaultJudge"], "namespaceSelector": selector},
        "gateway": {"port": 8443, "audience": "judge.example", "tokenExpirationSeconds": 1200},
    }
    objects = render(values, tmp_path)
    settings = operator_settings(objects)
    service = one(objects, "Service")
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "http"]
    (metrics,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "metrics"]
    name = service["metadata"]["name"]
    # The URL the workers get is the gateway Service's, on its proxy port.
    assert settings.default_judge_gateway == f"http://{name}.{RELEASE_NS}.svc:{port}/v1"
    # The operator checks the default judge on the Service's metrics port, which the
    # gateway's NetworkPolicy leaves open (the proxy port admits judge pods only).
    check = f"http://{name}.{RELEASE_NS}.svc:{metrics}/upstream/v1"
    assert settings.default_judge_gateway_check == check
    # The token the judge pods mount is the one the gateway asks for.
    gateway = settings_of(one(objects, "Deployment"))
    assert settings.default_judge_gateway_audience == gateway.audience == "judge.example"
    assert settings.default_judge_gateway_token_seconds == 1200
    # Operator and gateway let in the same namespaces.
    assert settings.default_judge_namespace_selector == gateway.namespace_selector
    assert settings.default_judge_namespace_selector.matches({"tier": "gold"})
    assert settings.default_judge_model == gateway.model == "judge-70b"
    assert settings.default_judge_secret_name is None


def test_the_token_lifetime_is_at_least_what_the_api_server_issues(
    helm_binary: Path, tmp_path: Path
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({**JUDGE, "gateway": {"tokenExpirationSeconds": 300}}))
    result = subprocess.run(
        [str(HELM), "template", "kyai", str(CHART), "--values", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "tokenExpirationSeconds" in result.stderr


def test_the_key_reaches_the_gateway_as_a_volume_only(judged: list[dict[str, Any]]) -> None:
    deployment = one(judged, "Deployment")
    settings = settings_of(deployment)
    assert settings.api_key_file is not None
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == "judge-key"
    assert volume["secret"]["items"] == [{"key": "token", "path": "api-key"}]
    (mount,) = [m for m in container_of(deployment)["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True and "subPath" not in mount  # subPath would stop rotation
    assert f"{mount['mountPath']}/api-key" == settings.api_key_file
    # Readable by the gateway's group (fsGroup), by no one else.
    assert volume["secret"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


def test_without_a_key_secret_no_key_is_mounted(helm_binary: Path, tmp_path: Path) -> None:
    values = {"defaultJudge": {"endpoint": "http://judge.svc:8000/v1", "model": "m"}}
    deployment = one(render(values, tmp_path), "Deployment")
    assert settings_of(deployment).api_key_file is None
    assert not any("secret" in v for v in deployment["spec"]["template"]["spec"]["volumes"])


# -- what it may do and who may reach it ----------------------------------------------------


def test_the_gateway_may_only_review_tokens_and_read_pods(judged: list[dict[str, Any]]) -> None:
    role = one(judged, "ClusterRole")
    assert permissions(role["rules"]) == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("", "pods", "get"),
    }
    binding = one(judged, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    account = one(judged, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": RELEASE_NS}
    ]


def test_watched_namespaces_and_a_selector_shape_the_rights(
    helm_binary: Path, tmp_path: Path
) -> None:
    values = {
        **JUDGE,
        "watchNamespaces": ["team-a", "team-b"],
        "defaultJudge": {
            **JUDGE["defaultJudge"],
            "namespaceSelector": {
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]
            },
        },
    }
    objects = render(values, tmp_path)
    assert permissions(one(objects, "ClusterRole")["rules"]) == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("", "namespaces", "get"),
    }
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    gateway = gateway_objects(objects)
    roles = {o["metadata"]["namespace"]: o for o in gateway if o["kind"] == "Role"}
    bindings = {o["metadata"]["namespace"]: o for o in gateway if o["kind"] == "RoleBinding"}
    assert set(roles) == set(bindings) == {"team-a", "team-b"}
    for namespace, role in roles.items():
        assert permissions(role["rules"]) == {("", "pods", "get")}
        assert bindings[namespace]["roleRef"]["name"] == role["metadata"]["name"]
        assert bindings[namespace]["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": RELEASE_NS}
        ]
    policy = one(objects, "NetworkPolicy")
    (source,) = policy["spec"]["ingress"][0]["from"]
    assert selects(source["namespaceSelector"], {"tier": "gold"})
    assert not selects(source["namespaceSelector"], {"tier": "bronze"})


def test_only_judge_workers_reach_the_proxy_port(judged: list[dict[str, Any]]) -> None:
    policy = one(judged, "NetworkPolicy")
    deployment = one(judged, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["spec"]["podSelector"], pod_labels)
    operator_pod = {**pod_labels, LABEL_COMPONENT: "operator"}
    assert not selects(policy["spec"]["podSelector"], operator_pod)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    workers, scrapers = policy["spec"]["ingress"]
    (source,) = workers["from"]
    assert source["namespaceSelector"] == {}  # every namespace by default
    assert workers["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert "from" not in scrapers and scrapers["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    # The same rule as the gateway's own check on the caller's pod.
    settings = settings_of(deployment)
    assert (settings.run_label, settings.component_label) == (LABEL_RUN, LABEL_COMPONENT)
    judge = {LABEL_RUN: "run-1", LABEL_COMPONENT: settings.worker_components[0]}
    for labels, admitted in (
        (judge, True),
        ({LABEL_RUN: "run-1", LABEL_COMPONENT: "generate"}, False),
        ({LABEL_COMPONENT: "judge"}, False),
        ({}, False),
    ):
        assert selects(source["podSelector"], labels) is admitted, labels


def test_the_service_and_its_monitor(helm_binary: Path, tmp_path: Path) -> None:
    values = {**JUDGE, "metrics": {"serviceMonitor": {"enabled": True, "release": "kps"}}}
    objects = render(values, tmp_path)
    service = one(objects, "Service")
    deployment = one(objects, "Deployment")
    assert selects(
        {"matchLabels": service["spec"]["selector"]},
        deployment["spec"]["template"]["metadata"]["labels"],
    )
    assert [(p["name"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("http", "http"),
        ("metrics", "metrics"),
    ]
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert selects(monitor["spec"]["selector"], service["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["honorLabels"]) == (
        "metrics",
        "/metrics",
        True,
    )
